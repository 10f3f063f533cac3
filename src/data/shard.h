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
// A writer produces `path.tmp` and renames it, so a crash never leaves a partial shard.
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

// zlib's CRC-32 (reflected polynomial 0xEDB88320), chainable: crc32(b, crc32(a)) == crc32(a + b).
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

// The same, for shards too large to hold in memory: tokens are appended in pieces and streamed to
// `path.tmp`; finish() writes the header and renames the file into place. A writer destroyed
// unfinished (an error on the way) removes its temporary file and leaves `path` as it was.
class ShardWriter {
 public:
  ShardWriter(std::string path, uint64_t vocab_size);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  void append(std::span<const int32_t> tokens);
  uint64_t size() const { return token_count_; }
  const std::string& path() const { return path_; }
  // Returns the payload CRC.
  uint32_t finish(uint64_t document_count, const std::string& metadata);

 private:
  void flush();
  std::string path_, tmp_;
  uint64_t vocab_size_;
  uint32_t token_bytes_;
  int fd_ = -1;
  uint64_t token_count_ = 0;
  uint32_t crc_ = 0;
  std::vector<unsigned char> pending_;
};

// Replaces a finished shard's metadata in place (the header CRC follows; the payload is not read).
void rewrite_shard_metadata(const std::string& path, const std::string& metadata);

// Token files hylo reads: its own shards, llm.c's (a 256 x int32 header: magic 20240520 with
// version 1 and uint16 GPT-2 tokens, or magic 20240801 with version 7 and uint32 Llama-3 tokens;
// the token count at header[2]) and nanoGPT's raw uint16 arrays (no header, so never guessed:
// they must be named). auto_detect reads the magic.
enum class ShardFormat { auto_detect, hylo, llmc, nanogpt };
// "auto", "hylo", "llmc", "nanogpt"; `what` names the setting in the error.
ShardFormat parse_shard_format(std::string_view name, std::string_view what);
const char* shard_format_name(ShardFormat format);

// A validated, memory-mapped token file. Opening checks magic, version, dtype, header CRC and file
// size and, unless told not to, reads the payload once: its CRC (checked against the header's in a
// hylo shard, computed for the others) and every token id, which must be below the shard's vocab.
// Every error names the file and what is wrong.
class ShardReader {
 public:
  explicit ShardReader(const std::string& path, bool verify_payload = true,
                       ShardFormat format = ShardFormat::auto_detect);
  ~ShardReader();
  ShardReader(ShardReader&& other) noexcept;
  ShardReader& operator=(ShardReader&& other) noexcept;
  ShardReader(const ShardReader&) = delete;
  ShardReader& operator=(const ShardReader&) = delete;

  const std::string& path() const { return path_; }
  ShardFormat format() const { return format_; }
  const ShardHeader& header() const { return header_; }
  uint64_t size() const { return header_.token_count; }
  // A foreign file's vocab is its tokenizer's (50257 for GPT-2, 128256 for Llama 3).
  uint64_t vocab_size() const { return header_.vocab_size; }
  // A foreign file's documents are counted as its 50256 separators when the payload is verified.
  uint64_t document_count() const { return header_.document_count; }
  const std::string& metadata() const { return header_.metadata; }
  // Value of a "key=value" metadata line, or "" if absent.
  std::string metadata_value(std::string_view key) const;
  // The largest token id, when the payload was verified (0 for an empty file).
  uint32_t max_token() const { return max_token_; }

  uint32_t token(uint64_t i) const {
    return header_.token_bytes == 2 ? uint32_t(u16_[i]) : u32_[i];
  }
  // Exactly one of these is non-empty, by the shard's dtype.
  std::span<const uint16_t> tokens_u16() const { return header_.token_bytes == 2 ? std::span(u16_, size()) : std::span<const uint16_t>(); }
  std::span<const uint32_t> tokens_u32() const { return header_.token_bytes == 4 ? std::span(u32_, size()) : std::span<const uint32_t>(); }
  // Copies tokens [begin, begin + count) widened to int32.
  void copy_tokens(uint64_t begin, uint64_t count, int32_t* out) const;

 private:
  void parse_hylo_header(const unsigned char* h, uint64_t file_bytes);
  void parse_llmc_header(const unsigned char* h, uint64_t file_bytes);
  void check_payload_size(uint64_t payload_bytes) const;
  void verify_payload(const unsigned char* payload);
  void unmap();
  std::string path_;
  ShardFormat format_ = ShardFormat::hylo;
  ShardHeader header_;
  uint32_t max_token_ = 0;
  void* mapping_ = nullptr;
  size_t mapping_bytes_ = 0;
  const uint16_t* u16_ = nullptr;
  const uint32_t* u32_ = nullptr;
};

}  // namespace hylo::data
