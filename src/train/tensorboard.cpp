#include "train/tensorboard.h"

#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "core/error.h"

namespace hylo {

static_assert(std::endian::native == std::endian::little, "event files are little-endian; add byte swapping");

namespace {

constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0x82F63B78u ^ (c >> 1) : c >> 1;
    t[b] = c;
  }
  return t;
}
constexpr auto kCrc32cTable = make_crc32c_table();

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t c = crc32c(data, size);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

// Protobuf wire format: a key is (field << 3 | wire type); 0 varint, 1 fixed64, 2 length-delimited,
// 5 fixed32.
void put_varint(std::string& out, uint64_t v) {
  for (; v >= 0x80; v >>= 7) out += char(uint8_t(v) | 0x80);
  out += char(v);
}
void put_key(std::string& out, int field, int wire_type) { put_varint(out, uint64_t(field << 3 | wire_type)); }
template <typename T>
void put_fixed(std::string& out, int field, T value) {
  put_key(out, field, sizeof(T) == 8 ? 1 : 5);
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}
void put_bytes(std::string& out, int field, std::string_view bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Event{wall_time = now, step} followed by its `what`.
std::string event(int64_t step) {
  std::string e;
  put_fixed(e, 1, unix_seconds());
  put_key(e, 2, 0);
  put_varint(e, uint64_t(step));
  return e;
}

// A double beyond float's range as +-inf (the plain conversion would be undefined behaviour).
float as_float(double v) {
  if (std::isfinite(v) && std::abs(v) > double(std::numeric_limits<float>::max()))
    return std::copysign(std::numeric_limits<float>::infinity(), float(v > 0 ? 1 : -1));
  return float(v);
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

uint32_t crc32c(const void* data, size_t size, uint32_t previous) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~previous;
  for (; size > 0; --size, ++p) c = kCrc32cTable[(c ^ *p) & 0xFF] ^ (c >> 8);
  return ~c;
}

EventFile::EventFile(const std::string& dir, int64_t first_step) {
  const std::string stem =
      (std::filesystem::path(dir) / fmt::format("events.out.tfevents.{}.{}", int64_t(unix_seconds()), host_name()))
          .string();
  // "x": create, never open an existing file (another launch's, in the same second).
  for (int n = 0; !file_ && n < 1000; ++n) {
    path_ = n == 0 ? stem : fmt::format("{}.{}", stem, n);
    file_ = std::fopen(path_.c_str(), "wbx");
    HYLO_CHECK(file_ || errno == EEXIST, "{}: cannot create: {}", path_, std::strerror(errno));
  }
  HYLO_CHECK(file_, "{}: cannot create: 1000 files of that name exist", stem);
  std::string version = event(first_step);
  put_bytes(version, 3, "brain.Event:2");
  write_record(version);
  std::string start = event(first_step), session_log;
  put_key(session_log, 1, 0);
  put_varint(session_log, 1);  // SessionLog.START
  put_bytes(start, 7, session_log);
  write_record(start);
  flush();
}

EventFile::~EventFile() {
  if (file_) std::fclose(file_);
}

void EventFile::scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  std::string summary;
  for (const auto& [tag, value] : values) {
    std::string v;
    put_bytes(v, 1, tag);
    put_fixed(v, 2, as_float(value));
    put_bytes(summary, 1, v);
  }
  std::string e = event(step);
  put_bytes(e, 5, summary);
  write_record(e);
}

void EventFile::write_record(std::string_view data) {
  char header[12];
  const uint64_t length = data.size();
  std::memcpy(header, &length, 8);
  const uint32_t length_crc = masked_crc32c(header, 8), data_crc = masked_crc32c(data.data(), data.size());
  std::memcpy(header + 8, &length_crc, 4);
  const bool ok = std::fwrite(header, 1, 12, file_) == 12 &&
                  std::fwrite(data.data(), 1, data.size(), file_) == data.size() &&
                  std::fwrite(&data_crc, 1, 4, file_) == 4;
  HYLO_CHECK(ok, "{}: write failed: {}", path_, std::strerror(errno));
}

void EventFile::flush() { HYLO_CHECK(std::fflush(file_) == 0, "{}: write failed: {}", path_, std::strerror(errno)); }

}  // namespace hylo
