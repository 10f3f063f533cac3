// A whole-file checksum for checkpoints, checked before libhdf5 parses a byte (SPEC §8: a damaged
// checkpoint of any byte is never a crash). libhdf5 trusts its metadata: one flipped byte in an
// object header or B-tree can crash it inside H5Fopen or H5Dread. So the writer reserves the
// HDF5 user block (the first kUserBlock bytes, which libhdf5 and every HDF5 tool skip) and, once
// the file is closed, writes there one text line
//
//   hylo-checkpoint-sum 1 size=<file bytes> crc32=<CRC-32 of bytes kUserBlock..end, 8 hex digits>
//
// The check reads the file once, sequentially, before anything else opens it. Kept inside the
// file rather than beside it: one rename publishes data and checksum together, and a copied
// checkpoint carries its proof with it.
#pragma once
#include <cstdint>
#include <string>

namespace hylo {

inline constexpr uint64_t kUserBlock = 512;  // HDF5's smallest user block

// Computes the checksum of `path` (an HDF5 file created with a kUserBlock user block and closed)
// and writes the line into its user block, then fsyncs the file. `display` names it in errors.
void write_file_sum(const std::string& path, const std::string& display);

enum class FileSum {
  verified,  // the line is there and the bytes match it
  legacy,    // no user block: an HDF5 file from before the checksum (or from another tool)
};

// Proves `path` intact, or fails with one line "PATH: truncated or corrupt HDF5 file (...)" /
// "PATH: not a hylo checkpoint (not an HDF5 file)" / "PATH: no such checkpoint file".
FileSum check_file_sum(const std::string& path);

}  // namespace hylo
