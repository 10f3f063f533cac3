// SHA-256 (FIPS 180-4), incremental: what `hylo data prepare` records for every input file so a
// manifest names its corpus exactly.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace hylo {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  void update(std::string_view text) { update(text.data(), text.size()); }
  // The digest as 64 lowercase hex digits; the object must not be updated afterwards.
  std::string hex();

 private:
  void compress(const unsigned char* block);
  std::array<uint32_t, 8> state_;
  std::array<unsigned char, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

// Digest of a whole file, read in pieces; throws naming the file when it cannot be read.
std::string sha256_file(const std::string& path);

}  // namespace hylo
