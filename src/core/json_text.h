// JSON text for what hylo writes (metrics rows, eval reports): one spelling everywhere.
#pragma once
#include <string>
#include <string_view>

namespace hylo {

// Shortest text that reads back to the same double; NaN/inf as NaN / Infinity / -Infinity, which
// strict JSON lacks but Python's json module reads.
std::string json_number(double x);
std::string json_string(std::string_view text);

}  // namespace hylo
