// Whole-file reads, shared by the data, training and command layers.
#pragma once
#include <optional>
#include <string>

namespace hylo {

// The bytes of the file at `path`, or nullopt when it cannot be opened. Callers word the error.
std::optional<std::string> read_file(const std::string& path);

}  // namespace hylo
