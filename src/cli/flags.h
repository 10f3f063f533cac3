// What the commands share: flag values (the value after a flag, numbers, comma lists and positive
// integers, with errors that name the command, the flag and the text, SPEC §8) and the path of the
// running executable.
#pragma once
#include <charconv>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"

namespace hylo {

// Takes the value after the flag args[i] (advancing i) or fails "[COMMAND: ]FLAG needs a value".
const std::string& flag_value(const std::vector<std::string>& args, size_t& i, const std::string& command = "");

// args[0], the path a command takes before its flags, or one line "COMMAND: expected WHAT first"
// (naming the flag found there instead).
const std::string& leading_path(const std::vector<std::string>& args, const std::string& command,
                                const std::string& what);

// The whole of `text` as a T (an integer or floating-point type), or one line
// "COMMAND: FLAG needs a number, got 'TEXT'".
template <class T>
T parse_number(const std::string& command, const std::string& flag, const std::string& text) {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  HYLO_CHECK(!text.empty() && ec == std::errc() && end == text.data() + text.size(), "{}: {} needs a number, got '{}'",
             command, flag, text);
  return value;
}

std::vector<std::string> split_commas(const std::string& text);
int parse_positive_int(const std::string& command, const std::string& flag, const std::string& text);
// "16,64" -> {16, 64}; at least one value.
std::vector<int> parse_int_list(const std::string& command, const std::string& flag, const std::string& text);

// This hylo executable (what a sweep's jobs run; where scripts/ is found next to the build).
std::filesystem::path self_binary();

}  // namespace hylo
