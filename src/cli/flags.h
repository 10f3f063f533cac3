// Flag values shared by the commands: the value after a flag, comma lists and positive integers,
// with errors that name the command, the flag and the text.
#pragma once
#include <string>
#include <vector>

namespace hylo {

// Takes the value after the flag args[i] (advancing i) or fails "[COMMAND: ]FLAG needs a value".
const std::string& flag_value(const std::vector<std::string>& args, size_t& i, const std::string& command = "");

std::vector<std::string> split_commas(const std::string& text);
int parse_positive_int(const std::string& command, const std::string& flag, const std::string& text);
// "16,64" -> {16, 64}; at least one value.
std::vector<int> parse_int_list(const std::string& command, const std::string& flag, const std::string& text);

}  // namespace hylo
