#include "core/json_text.h"

#include <fmt/format.h>

#include <cmath>

namespace hylo {

std::string json_number(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "Infinity" : "-Infinity";
  return fmt::format("{}", x);
}

std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (char ch : text) {
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20) out += fmt::format("\\u{:04x}", int(ch));
        else out += ch;
    }
  }
  return out + "\"";
}

}  // namespace hylo
