// Whole-file reads and atomic writes, shared by the data, training and command layers.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hylo {

// The bytes of the file at `path`, or nullopt when it cannot be opened. Callers word the error.
std::optional<std::string> read_file(const std::string& path);

// `path` + ".<pid>-<random hex>.tmp": a temporary name no other writer picks, even one racing on
// the same path from another process or host. Leftovers of killed writers end in ".tmp".
std::string unique_temp_path(const std::string& path);

// Writes `content` to `path` via a unique_temp_path + fsync + rename: readers see the old or the new file,
// and a failure leaves the old one (and no temporary file).
void write_file_atomic(const std::string& path, const std::string& content);
// The same for content in pieces, written one after the other (large files need no second copy).
void write_file_atomic(const std::string& path, const std::vector<std::string_view>& pieces);

}  // namespace hylo
