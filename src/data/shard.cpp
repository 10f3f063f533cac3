#include "data/shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "core/file.h"

namespace hylo::data {

static_assert(std::endian::native == std::endian::little, "shards are little-endian; add byte swapping");

namespace {

constexpr char kMagic[8] = {'H', 'Y', 'L', 'O', 'T', 'O', 'K', '1'};
constexpr size_t kHeaderCrcOffset = 44;

// Slicing-by-8 tables: table[k][b] is the CRC of byte b followed by k zero bytes, so eight input
// bytes are folded per step (~1 GB/s, which keeps CRC checks of large shards cheap).
constexpr std::array<std::array<uint32_t, 256>, 8> make_crc_tables() {
  std::array<std::array<uint32_t, 256>, 8> t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[0][b] = c;
  }
  for (uint32_t b = 0; b < 256; ++b)
    for (int k = 1; k < 8; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFF];
  return t;
}
constexpr auto kCrcTables = make_crc_tables();

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

}  // namespace

uint32_t crc32(const void* data, size_t size, uint32_t previous) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~previous;
  const auto& t = kCrcTables;
  for (; size >= 8; size -= 8, p += 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^
        t[3][hi & 0xFF] ^ t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
  }
  for (; size > 0; --size, ++p) c = t[0][(c ^ *p) & 0xFF] ^ (c >> 8);
  return ~c;
}

void write_shard(const std::string& path, std::span<const int32_t> tokens, uint64_t vocab_size,
                 uint64_t document_count, const std::string& metadata) {
  HYLO_CHECK(vocab_size > 0 && vocab_size <= (uint64_t(1) << 32), "{}: vocab size {} is not storable", path,
             vocab_size);
  HYLO_CHECK(metadata.size() <= kShardMetadataBytes, "{}: metadata is {} bytes, the header holds {}", path,
             metadata.size(), kShardMetadataBytes);
  const uint32_t token_bytes = vocab_size <= 65536 ? 2 : 4;

  std::vector<unsigned char> payload(tokens.size() * token_bytes);
  for (size_t i = 0; i < tokens.size(); ++i) {
    int32_t t = tokens[i];
    HYLO_CHECK(t >= 0 && uint64_t(t) < vocab_size, "{}: token {} at position {} is outside the vocab [0, {})",
               path, t, i, vocab_size);
    if (token_bytes == 2) put(payload.data(), i * 2, uint16_t(t));
    else put(payload.data(), i * 4, uint32_t(t));
  }

  std::array<unsigned char, kShardHeaderBytes> header{};
  std::memcpy(header.data(), kMagic, sizeof kMagic);
  put(header.data(), 8, kShardVersion);
  put(header.data(), 12, token_bytes);
  put(header.data(), 16, uint64_t(tokens.size()));
  put(header.data(), 24, vocab_size);
  put(header.data(), 32, document_count);
  put(header.data(), 40, crc32(payload.data(), payload.size()));
  put(header.data(), 48, uint32_t(metadata.size()));
  std::memcpy(header.data() + 52, metadata.data(), metadata.size());
  put(header.data(), kHeaderCrcOffset, crc32(header.data(), header.size()));

  auto bytes = [](const auto& v) { return std::string_view(reinterpret_cast<const char*>(v.data()), v.size()); };
  write_file_atomic(path, {bytes(header), bytes(payload)});
}

ShardReader::ShardReader(const std::string& path, bool verify_payload_crc) : path_(path) {
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
  if (file_bytes < kShardHeaderBytes) {
    ::close(fd);
    HYLO_FAIL("{}: truncated: file is {} bytes, smaller than the {}-byte header", path, file_bytes,
              kShardHeaderBytes);
  }
  mapping_ = ::mmap(nullptr, file_bytes, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);  // the mapping keeps the file referenced
  if (mapping_ == MAP_FAILED) {
    mapping_ = nullptr;
    HYLO_FAIL("{}: cannot mmap shard ({})", path, errno_text());
  }
  mapping_bytes_ = file_bytes;

  try {
    const auto* h = static_cast<const unsigned char*>(mapping_);
    HYLO_CHECK(std::memcmp(h, kMagic, sizeof kMagic) == 0, "{}: not a hylo token shard (bad magic '{}')", path,
               std::string(reinterpret_cast<const char*>(h), 8));
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

    const uint64_t payload_bytes = file_bytes - kShardHeaderBytes;
    const uint64_t held = payload_bytes / header_.token_bytes;
    HYLO_CHECK(header_.token_count <= held, "{}: truncated: header says {} tokens, file holds {}", path,
               header_.token_count, held);
    HYLO_CHECK(payload_bytes == header_.token_count * header_.token_bytes,
               "{}: {} unexpected trailing bytes after {} tokens", path,
               payload_bytes - header_.token_count * header_.token_bytes, header_.token_count);
    const unsigned char* payload = h + kShardHeaderBytes;
    if (verify_payload_crc) {
      uint32_t computed = crc32(payload, payload_bytes);
      HYLO_CHECK(computed == header_.payload_crc, "{}: CRC mismatch (header 0x{:08x}, payload 0x{:08x})", path,
                 header_.payload_crc, computed);
    }
    if (header_.token_bytes == 2) u16_ = reinterpret_cast<const uint16_t*>(payload);
    else u32_ = reinterpret_cast<const uint32_t*>(payload);
  } catch (...) {
    unmap();
    throw;
  }
}

ShardReader::~ShardReader() { unmap(); }

ShardReader::ShardReader(ShardReader&& other) noexcept { *this = std::move(other); }

ShardReader& ShardReader::operator=(ShardReader&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    header_ = std::move(other.header_);
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
