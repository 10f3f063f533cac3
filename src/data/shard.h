// Token shards (SPEC §4): a 1024-byte header, then the tokens, little-endian.
//
// Header layout (all integers little-endian):
//   offset  size  field
//        0     8  magic "HYLOTOK1"
//        8     4  version (1)
//       12     4  bytes per token: 2 (uint16, vocab <= 65536) or 4 (uint32)
//       16     8  token count
//       24     8  vocab size
//       32     8  document count
//       40     4  CRC-32 (IEEE, as zlib) of the token payload
//       44     4  CRC-32 of the header itself, computed with this field zeroed
//       48     4  metadata length in bytes
//       52   972  metadata: UTF-8 text, "key=value" lines (split, seed, sources, ...), zero padded
// A writer produces `path.tmp.<pid>` and renames it, so a crash never leaves a partial shard.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hylo::data {

inline constexpr size_t kShardHeaderBytes = 1024;
inline constexpr size_t kShardMetadataBytes = kShardHeaderBytes - 52;
inline constexpr uint32_t kShardVersion = 1;

// CRC-32 (reflected polynomial 0xEDB88320), chainable: crc32(b, crc32(a)) == crc32(a + b).
uint32_t crc32(const void* data, size_t size, uint32_t previous = 0);

struct ShardHeader {
  uint32_t version = kShardVersion;
  uint32_t token_bytes = 2;
  uint64_t token_count = 0;
  uint64_t vocab_size = 0;
  uint64_t document_count = 0;
  uint32_t payload_crc = 0;
  std::string metadata;
};

// Writes tokens (each must be in [0, vocab_size)) with the narrowest dtype that holds the vocab.
// `metadata` must fit in kShardMetadataBytes.
void write_shard(const std::string& path, std::span<const int32_t> tokens, uint64_t vocab_size,
                 uint64_t document_count, const std::string& metadata);

// A validated, memory-mapped shard. Opening checks magic, version, dtype, header CRC, file size
// and (unless told not to) the payload CRC; every error names the file and what is wrong.
class ShardReader {
 public:
  explicit ShardReader(const std::string& path, bool verify_payload_crc = true);
  ~ShardReader();
  ShardReader(ShardReader&& other) noexcept;
  ShardReader& operator=(ShardReader&& other) noexcept;
  ShardReader(const ShardReader&) = delete;
  ShardReader& operator=(const ShardReader&) = delete;

  const std::string& path() const { return path_; }
  const ShardHeader& header() const { return header_; }
  uint64_t size() const { return header_.token_count; }
  uint64_t vocab_size() const { return header_.vocab_size; }
  uint64_t document_count() const { return header_.document_count; }
  const std::string& metadata() const { return header_.metadata; }
  // Value of a "key=value" metadata line, or "" if absent.
  std::string metadata_value(std::string_view key) const;

  uint32_t token(uint64_t i) const {
    return header_.token_bytes == 2 ? uint32_t(u16_[i]) : u32_[i];
  }
  // Exactly one of these is non-empty, by the shard's dtype.
  std::span<const uint16_t> tokens_u16() const { return header_.token_bytes == 2 ? std::span(u16_, size()) : std::span<const uint16_t>(); }
  std::span<const uint32_t> tokens_u32() const { return header_.token_bytes == 4 ? std::span(u32_, size()) : std::span<const uint32_t>(); }
  // Copies tokens [begin, begin + count) widened to int32.
  void copy_tokens(uint64_t begin, uint64_t count, int32_t* out) const;

 private:
  void unmap();
  std::string path_;
  ShardHeader header_;
  void* mapping_ = nullptr;
  size_t mapping_bytes_ = 0;
  const uint16_t* u16_ = nullptr;
  const uint32_t* u32_ = nullptr;
};

}  // namespace hylo::data
