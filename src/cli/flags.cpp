#include "cli/flags.h"

#include <algorithm>

#include "core/error.h"

namespace hylo {

const std::string& flag_value(const std::vector<std::string>& args, size_t& i, const std::string& command) {
  HYLO_CHECK(i + 1 < args.size(), "{}{} needs a value", command.empty() ? "" : command + ": ", args[i]);
  return args[++i];
}

const std::string& leading_path(const std::vector<std::string>& args, const std::string& command,
                                const std::string& what) {
  HYLO_CHECK(!args.empty(), "{}: expected {} first", command, what);
  HYLO_CHECK(!args[0].starts_with("--"), "{}: expected {} first, got the flag '{}'", command, what, args[0]);
  return args[0];
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(',', start), text.size());
    if (end > start) out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

int parse_positive_int(const std::string& command, const std::string& flag, const std::string& text) {
  const int value = parse_number<int>(command, flag, text);
  HYLO_CHECK(value > 0, "{}: {} needs a positive integer, got '{}'", command, flag, text);
  return value;
}

std::vector<int> parse_int_list(const std::string& command, const std::string& flag, const std::string& text) {
  std::vector<int> values;
  for (const std::string& item : split_commas(text)) values.push_back(parse_positive_int(command, flag, item));
  HYLO_CHECK(!values.empty(), "{}: {} needs a value", command, flag);
  return values;
}

std::filesystem::path self_binary() { return std::filesystem::canonical("/proc/self/exe"); }

}  // namespace hylo
