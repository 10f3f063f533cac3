#include "data/shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <bit>
#include <cerrno>
#include <algorithm>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include <zlib.h>

#include "core/error.h"
#include "core/file.h"

namespace hylo::data {

static_assert(std::endian::native == std::endian::little, "shards are little-endian; add byte swapping");

namespace {

constexpr char kMagic[8] = {'H', 'Y', 'L', 'O', 'T', 'O', 'K', '1'};
constexpr size_t kHeaderCrcOffset = 44;

template <typename T>
void put(unsigned char* header, size_t offset, T value) {
  std::memcpy(header + offset, &value, sizeof value);
}
template <typename T>
T get(const unsigned char* header, size_t offset) {
  T value;
  std::memcpy(&value, header + offset, sizeof value);
  return value;
}

std::string errno_text() { return std::strerror(errno); }

// The first bytes of a file that is not a shard, as text a terminal can show.
std::string printable(const unsigned char* h, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += h[i] >= 0x20 && h[i] < 0x7F ? char(h[i]) : '.';
  return out;
}

constexpr uint32_t kLlmcGpt2Magic = 20240520, kLlmcLlama3Magic = 20240801;
constexpr uint32_t kGpt2Vocab = 50257, kLlama3Vocab = 128256, kGpt2EndOfText = 50256;

}  // namespace

uint32_t crc32(const void* data, size_t size, uint32_t previous) {
  return uint32_t(crc32_z(previous, static_cast<const Bytef*>(data), size));
}

ShardWriter::ShardWriter(std::string path, uint64_t vocab_size)
    : path_(std::move(path)), tmp_(path_ + ".tmp"), vocab_size_(vocab_size) {
  HYLO_CHECK(vocab_size > 0 && vocab_size <= (uint64_t(1) << 32), "{}: vocab size {} is not storable", path_,
             vocab_size);
  token_bytes_ = vocab_size <= 65536 ? 2 : 4;
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  HYLO_CHECK(fd_ >= 0, "{}: cannot create: {}", tmp_, errno_text());
  pending_.assign(kShardHeaderBytes, 0);  // the header's place, written last
}

ShardWriter::~ShardWriter() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(tmp_.c_str());
}

void ShardWriter::append(std::span<const int32_t> tokens) {
  constexpr size_t kFlushBytes = size_t(1) << 20;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t t = tokens[i];
    HYLO_CHECK(t >= 0 && uint64_t(t) < vocab_size_, "{}: token {} at position {} is outside the vocab [0, {})", path_,
               t, token_count_ + i, vocab_size_);
  }
  const size_t at = pending_.size();
  pending_.resize(at + tokens.size() * token_bytes_);
  unsigned char* out = pending_.data() + at;
  if (token_bytes_ == 2)
    for (size_t i = 0; i < tokens.size(); ++i) put(out, i * 2, uint16_t(tokens[i]));
  else
    for (size_t i = 0; i < tokens.size(); ++i) put(out, i * 4, uint32_t(tokens[i]));
  token_count_ += tokens.size();
  if (pending_.size() >= kFlushBytes) flush();
}

void ShardWriter::flush() {
  // The first flush carries the header's zeros, which the CRC of the payload must not see.
  const size_t skip = ::lseek(fd_, 0, SEEK_CUR) == 0 ? kShardHeaderBytes : 0;
  crc_ = crc32(pending_.data() + skip, pending_.size() - skip, crc_);
  for (size_t done = 0; done < pending_.size();) {
    const ssize_t n = ::write(fd_, pending_.data() + done, pending_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    HYLO_CHECK(n >= 0, "{}: write failed: {}", tmp_, errno_text());
    done += size_t(n);
  }
  pending_.clear();
}

uint32_t ShardWriter::finish(uint64_t document_count, const std::string& metadata) {
  HYLO_CHECK(fd_ >= 0, "{}: shard already finished", path_);
  HYLO_CHECK(metadata.size() <= kShardMetadataBytes, "{}: metadata is {} bytes, the header holds {}", path_,
             metadata.size(), kShardMetadataBytes);
  flush();
  std::array<unsigned char, kShardHeaderBytes> header{};
  std::memcpy(header.data(), kMagic, sizeof kMagic);
  put(header.data(), 8, kShardVersion);
  put(header.data(), 12, token_bytes_);
  put(header.data(), 16, token_count_);
  put(header.data(), 24, vocab_size_);
  put(header.data(), 32, document_count);
  put(header.data(), 40, crc_);
  put(header.data(), 48, uint32_t(metadata.size()));
  std::memcpy(header.data() + 52, metadata.data(), metadata.size());
  put(header.data(), kHeaderCrcOffset, crc32(header.data(), header.size()));
  HYLO_CHECK(::pwrite(fd_, header.data(), header.size(), 0) == ssize_t(header.size()), "{}: write failed: {}", tmp_,
             errno_text());
  HYLO_CHECK(::fsync(fd_) == 0, "{}: fsync failed: {}", tmp_, errno_text());  // the rename must not expose unwritten data
  ::close(fd_);
  fd_ = -1;
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const std::string reason = errno_text();
    ::unlink(tmp_.c_str());
    HYLO_FAIL("{}: cannot rename {} into place: {}", path_, tmp_, reason);
  }
  return crc_;
}

void write_shard(const std::string& path, std::span<const int32_t> tokens, uint64_t vocab_size,
                 uint64_t document_count, const std::string& metadata) {
  HYLO_CHECK(metadata.size() <= kShardMetadataBytes, "{}: metadata is {} bytes, the header holds {}", path,
             metadata.size(), kShardMetadataBytes);
  ShardWriter writer(path, vocab_size);
  writer.append(tokens);
  writer.finish(document_count, metadata);
}

void rewrite_shard_metadata(const std::string& path, const std::string& metadata) {
  HYLO_CHECK(metadata.size() <= kShardMetadataBytes, "{}: metadata is {} bytes, the header holds {}", path,
             metadata.size(), kShardMetadataBytes);
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  HYLO_CHECK(fd >= 0, "{}: cannot open shard ({})", path, errno_text());
  std::array<unsigned char, kShardHeaderBytes> header{};
  const bool read_ok = ::pread(fd, header.data(), header.size(), 0) == ssize_t(header.size()) &&
                       std::memcmp(header.data(), kMagic, sizeof kMagic) == 0;
  if (!read_ok) {
    ::close(fd);
    HYLO_FAIL("{}: not a hylo token shard", path);
  }
  std::fill(header.begin() + 52, header.end(), 0);
  put(header.data(), 48, uint32_t(metadata.size()));
  std::memcpy(header.data() + 52, metadata.data(), metadata.size());
  put(header.data(), kHeaderCrcOffset, uint32_t(0));
  put(header.data(), kHeaderCrcOffset, crc32(header.data(), header.size()));
  const bool ok = ::pwrite(fd, header.data(), header.size(), 0) == ssize_t(header.size()) && ::fsync(fd) == 0;
  const std::string reason = errno_text();
  ::close(fd);
  HYLO_CHECK(ok, "{}: cannot rewrite the header ({})", path, reason);
}

ShardFormat parse_shard_format(std::string_view name, std::string_view what) {
  if (name == "auto" || name.empty()) return ShardFormat::auto_detect;
  if (name == "hylo") return ShardFormat::hylo;
  if (name == "llmc") return ShardFormat::llmc;
  if (name == "nanogpt") return ShardFormat::nanogpt;
  HYLO_FAIL("{}: unknown token file format '{}' (expected auto, hylo, llmc or nanogpt)", what, name);
}

const char* shard_format_name(ShardFormat format) {
  switch (format) {
    case ShardFormat::auto_detect: return "auto";
    case ShardFormat::hylo: return "hylo";
    case ShardFormat::llmc: return "llmc";
    case ShardFormat::nanogpt: return "nanogpt";
  }
  return "?";
}

ShardReader::ShardReader(const std::string& path, bool verify, ShardFormat format) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  HYLO_CHECK(fd >= 0, "{}: cannot open shard ({})", path, errno_text());
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    std::string reason = errno_text();
    ::close(fd);
    HYLO_FAIL("{}: cannot stat shard ({})", path, reason);
  }
  if (!S_ISREG(info.st_mode)) {  // a directory's size passes the header check, then mmap fails with ENODEV
    ::close(fd);
    HYLO_FAIL("{}: not a regular file; expected a token shard (hylo data prepare writes them)", path);
  }
  const auto file_bytes = uint64_t(info.st_size);
  if (format != ShardFormat::nanogpt && file_bytes < kShardHeaderBytes) {
    ::close(fd);
    HYLO_FAIL("{}: truncated: file is {} bytes, smaller than the {}-byte header{}", path, file_bytes,
              kShardHeaderBytes,
              format == ShardFormat::auto_detect ? " (a nanoGPT train.bin, raw uint16, must be named: format nanogpt)"
                                                 : "");
  }
  if (file_bytes > 0) {
    mapping_ = ::mmap(nullptr, file_bytes, PROT_READ, MAP_SHARED, fd, 0);
    if (mapping_ == MAP_FAILED) {
      mapping_ = nullptr;
      std::string reason = errno_text();
      ::close(fd);
      HYLO_FAIL("{}: cannot mmap shard ({})", path, reason);
    }
  }
  ::close(fd);  // the mapping keeps the file referenced
  mapping_bytes_ = file_bytes;

  try {
    const auto* h = static_cast<const unsigned char*>(mapping_);
    if (format == ShardFormat::auto_detect) {
      const uint32_t word = get<uint32_t>(h, 0);
      format = std::memcmp(h, kMagic, sizeof kMagic) == 0         ? ShardFormat::hylo
               : word == kLlmcGpt2Magic || word == kLlmcLlama3Magic ? ShardFormat::llmc
                                                                   : ShardFormat::auto_detect;
      HYLO_CHECK(format != ShardFormat::auto_detect,
                 "{}: not a hylo token shard (bad magic '{}'), nor an llm.c one; a nanoGPT train.bin (raw uint16) "
                 "must be named: format nanogpt",
                 path, printable(h, 8));
    }
    format_ = format;
    size_t payload_offset = kShardHeaderBytes;
    if (format == ShardFormat::hylo) {
      parse_hylo_header(h, file_bytes);
    } else if (format == ShardFormat::llmc) {
      parse_llmc_header(h, file_bytes);
    } else {
      HYLO_CHECK(file_bytes % 2 == 0, "{}: {} bytes is not a whole number of uint16 tokens (nanoGPT format)", path,
                 file_bytes);
      header_ = ShardHeader{0, 2, file_bytes / 2, uint64_t(kGpt2Vocab), 0, 0, ""};
      payload_offset = 0;
    }
    const unsigned char* payload = h ? h + payload_offset : nullptr;
    if (verify) verify_payload(payload);
    if (header_.token_bytes == 2) u16_ = reinterpret_cast<const uint16_t*>(payload);
    else u32_ = reinterpret_cast<const uint32_t*>(payload);
  } catch (...) {
    unmap();
    throw;
  }
}

void ShardReader::parse_hylo_header(const unsigned char* h, uint64_t file_bytes) {
  const std::string& path = path_;
  HYLO_CHECK(std::memcmp(h, kMagic, sizeof kMagic) == 0, "{}: not a hylo token shard (bad magic '{}')", path,
             printable(h, 8));
  header_.version = get<uint32_t>(h, 8);
  HYLO_CHECK(header_.version == kShardVersion, "{}: shard version {} is not supported (expected {})", path,
             header_.version, kShardVersion);
  std::array<unsigned char, kShardHeaderBytes> copy;
  std::memcpy(copy.data(), h, copy.size());
  put(copy.data(), kHeaderCrcOffset, uint32_t(0));
  uint32_t stored_header_crc = get<uint32_t>(h, kHeaderCrcOffset), header_crc = crc32(copy.data(), copy.size());
  HYLO_CHECK(stored_header_crc == header_crc, "{}: header CRC mismatch (stored 0x{:08x}, computed 0x{:08x})", path,
             stored_header_crc, header_crc);
  header_.token_bytes = get<uint32_t>(h, 12);
  header_.token_count = get<uint64_t>(h, 16);
  header_.vocab_size = get<uint64_t>(h, 24);
  header_.document_count = get<uint64_t>(h, 32);
  header_.payload_crc = get<uint32_t>(h, 40);
  auto metadata_bytes = get<uint32_t>(h, 48);
  HYLO_CHECK(header_.token_bytes == 2 || header_.token_bytes == 4, "{}: token size {} bytes is not 2 or 4", path,
             header_.token_bytes);
  HYLO_CHECK(header_.token_bytes == 4 || header_.vocab_size <= 65536, "{}: vocab {} does not fit uint16 tokens",
             path, header_.vocab_size);
  HYLO_CHECK(metadata_bytes <= kShardMetadataBytes, "{}: metadata length {} exceeds the header", path,
             metadata_bytes);
  header_.metadata.assign(reinterpret_cast<const char*>(h) + 52, metadata_bytes);
  check_payload_size(file_bytes - kShardHeaderBytes);
}

void ShardReader::parse_llmc_header(const unsigned char* h, uint64_t file_bytes) {
  const uint32_t magic = get<uint32_t>(h, 0), version = get<uint32_t>(h, 4);
  const bool gpt2 = magic == kLlmcGpt2Magic;
  HYLO_CHECK(gpt2 || magic == kLlmcLlama3Magic, "{}: not an llm.c token file (magic {}, expected {} or {})", path_,
             magic, kLlmcGpt2Magic, kLlmcLlama3Magic);
  HYLO_CHECK(version == (gpt2 ? 1u : 7u), "{}: llm.c token file version {} with magic {} is not supported (expected {})",
             path_, version, magic, gpt2 ? 1 : 7);
  header_.version = version;
  header_.token_bytes = gpt2 ? 2 : 4;
  header_.token_count = get<uint32_t>(h, 8);
  header_.vocab_size = gpt2 ? uint64_t(kGpt2Vocab) : uint64_t(kLlama3Vocab);
  header_.metadata = fmt::format("format=llmc\nmagic={}\nversion={}\n", magic, version);
  check_payload_size(file_bytes - kShardHeaderBytes);
}

void ShardReader::check_payload_size(uint64_t payload_bytes) const {
  const uint64_t held = payload_bytes / header_.token_bytes;
  HYLO_CHECK(header_.token_count <= held, "{}: truncated: header says {} tokens, file holds {}", path_,
             header_.token_count, held);
  HYLO_CHECK(payload_bytes == header_.token_count * header_.token_bytes,
             "{}: {} unexpected trailing bytes after {} tokens", path_,
             payload_bytes - header_.token_count * header_.token_bytes, header_.token_count);
}

// One pass over the payload in cache-sized pieces: CRC, largest id and (for foreign files, whose
// header has no document count) separators.
void ShardReader::verify_payload(const unsigned char* payload) {
  constexpr uint64_t kPiece = 1 << 16;  // tokens
  const uint64_t n = header_.token_count, bytes = header_.token_bytes;
  const bool count_documents = format_ != ShardFormat::hylo;
  uint32_t crc = 0, max_id = 0;
  uint64_t documents = 0;
  for (uint64_t begin = 0; begin < n; begin += kPiece) {
    const uint64_t count = std::min(kPiece, n - begin);
    crc = crc32(payload + begin * bytes, count * bytes, crc);
    uint32_t piece_max = 0;
    if (bytes == 2) {
      const auto* t = reinterpret_cast<const uint16_t*>(payload) + begin;
      for (uint64_t i = 0; i < count; ++i) piece_max = std::max<uint32_t>(piece_max, t[i]);
      if (count_documents)
        for (uint64_t i = 0; i < count; ++i) documents += t[i] == kGpt2EndOfText;
    } else {
      const auto* t = reinterpret_cast<const uint32_t*>(payload) + begin;
      for (uint64_t i = 0; i < count; ++i) piece_max = std::max(piece_max, t[i]);
    }
    max_id = std::max(max_id, piece_max);
  }
  if (format_ == ShardFormat::hylo)
    HYLO_CHECK(crc == header_.payload_crc, "{}: CRC mismatch (header 0x{:08x}, payload 0x{:08x})", path_,
               header_.payload_crc, crc);
  header_.payload_crc = crc;
  if (count_documents) header_.document_count = documents;
  max_token_ = max_id;
  if (n > 0 && max_id >= header_.vocab_size) {
    uint64_t at = 0;
    while ((bytes == 2 ? uint32_t(reinterpret_cast<const uint16_t*>(payload)[at])
                       : reinterpret_cast<const uint32_t*>(payload)[at]) < header_.vocab_size)
      ++at;
    HYLO_FAIL("{}: token id {} at position {} is outside the shard's vocab [0, {}){}", path_,
              bytes == 2 ? uint32_t(reinterpret_cast<const uint16_t*>(payload)[at])
                         : reinterpret_cast<const uint32_t*>(payload)[at],
              at, header_.vocab_size, format_ == ShardFormat::hylo ? "" : " (the vocab its format implies)");
  }
}

ShardReader::~ShardReader() { unmap(); }

ShardReader::ShardReader(ShardReader&& other) noexcept { *this = std::move(other); }

ShardReader& ShardReader::operator=(ShardReader&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    format_ = other.format_;
    header_ = std::move(other.header_);
    max_token_ = other.max_token_;
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapping_bytes_ = std::exchange(other.mapping_bytes_, 0);
    u16_ = std::exchange(other.u16_, nullptr);
    u32_ = std::exchange(other.u32_, nullptr);
  }
  return *this;
}

void ShardReader::unmap() {
  if (mapping_) ::munmap(mapping_, mapping_bytes_);
  mapping_ = nullptr;
  u16_ = nullptr;
  u32_ = nullptr;
}

std::string ShardReader::metadata_value(std::string_view key) const {
  std::string_view rest = header_.metadata;
  while (!rest.empty()) {
    size_t eol = rest.find('\n');
    std::string_view line = rest.substr(0, eol);
    rest = eol == std::string_view::npos ? std::string_view() : rest.substr(eol + 1);
    if (line.size() > key.size() && line.starts_with(key) && line[key.size()] == '=')
      return std::string(line.substr(key.size() + 1));
  }
  return "";
}

void ShardReader::copy_tokens(uint64_t begin, uint64_t count, int32_t* out) const {
  HYLO_CHECK(begin <= size() && count <= size() - begin, "{}: tokens [{}, {}) are outside the shard of {} tokens",
             path_, begin, begin + count, size());
  if (u16_)
    for (uint64_t i = 0; i < count; ++i) out[i] = int32_t(u16_[begin + i]);
  else
    for (uint64_t i = 0; i < count; ++i) out[i] = int32_t(u32_[begin + i]);
}

}  // namespace hylo::data
