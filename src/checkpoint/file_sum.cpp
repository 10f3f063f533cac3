#include "checkpoint/file_sum.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"

namespace hylo {
namespace {

constexpr std::string_view kTag = "hylo-checkpoint-sum 1 ";
constexpr std::string_view kHdf5Signature{"\x89HDF\r\n\x1a\n", 8};

// Closes the descriptor on every path out.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// CRC-32 of bytes [from, size) of fd; false (errno set) when a read fails or ends early.
bool crc_from(int fd, uint64_t from, uint64_t size, uint32_t& crc) {
  std::vector<unsigned char> buffer(size_t(4) << 20);
  uLong c = crc32_z(0L, Z_NULL, 0);
  for (uint64_t at = from; at < size;) {
    const ssize_t n = ::pread(fd, buffer.data(), size_t(std::min<uint64_t>(buffer.size(), size - at)), off_t(at));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;  // shorter than fstat said
      return false;
    }
    c = crc32_z(c, buffer.data(), size_t(n));
    at += uint64_t(n);
  }
  crc = uint32_t(c);
  return true;
}

[[noreturn]] void corrupt(const std::string& path, const std::string& detail) {
  HYLO_FAIL("{}: truncated or corrupt HDF5 file ({})", path, detail);
}

// "size=<n> crc32=<hex8>\n" after the tag; nullopt-like false when it does not parse exactly.
bool parse_line(std::string_view rest, uint64_t& size, uint32_t& crc) {
  constexpr std::string_view size_key = "size=", crc_key = " crc32=";
  if (!rest.starts_with(size_key)) return false;
  rest.remove_prefix(size_key.size());
  auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), size);
  if (ec != std::errc() || end == rest.data()) return false;
  rest.remove_prefix(size_t(end - rest.data()));
  if (!rest.starts_with(crc_key)) return false;
  rest.remove_prefix(crc_key.size());
  if (rest.size() < 9 || rest[8] != '\n') return false;
  auto [crc_end, crc_ec] = std::from_chars(rest.data(), rest.data() + 8, crc, 16);
  if (crc_ec != std::errc() || crc_end != rest.data() + 8) return false;
  // The rest of the user block is zeros as the writer left it.
  for (char ch : rest.substr(9))
    if (ch != '\0') return false;
  return true;
}

}  // namespace

void write_file_sum(const std::string& path, const std::string& display) {
  Fd f{::open(path.c_str(), O_RDWR)};
  HYLO_CHECK(f.fd >= 0, "{}: cannot reopen {} to checksum it: {}", display, path, std::strerror(errno));
  struct stat st {};
  HYLO_CHECK(::fstat(f.fd, &st) == 0, "{}: cannot stat {}: {}", display, path, std::strerror(errno));
  const uint64_t size = uint64_t(st.st_size);
  HYLO_CHECK(size > kUserBlock, "{}: {} is only {} bytes after writing (disk full?)", display, path, size);
  // Gives back what the writer reserved beyond the end (checkpoint.cpp) and libhdf5 did not use.
  HYLO_CHECK(::ftruncate(f.fd, off_t(size)) == 0, "{}: cannot trim {}: {}", display, path, std::strerror(errno));
  uint32_t crc = 0;
  HYLO_CHECK(crc_from(f.fd, kUserBlock, size, crc), "{}: cannot read back {}: {}", display, path,
             std::strerror(errno));
  const std::string line = fmt::format("{}size={} crc32={:08x}\n", kTag, size, crc);
  HYLO_CHECK(::pwrite(f.fd, line.data(), line.size(), 0) == ssize_t(line.size()),
             "{}: cannot write the checksum into {}: {}", display, path, std::strerror(errno));
  HYLO_CHECK(::fsync(f.fd) == 0, "{}: fsync of {} failed (disk full?): {}", display, path, std::strerror(errno));
  const int fd = std::exchange(f.fd, -1);
  HYLO_CHECK(::close(fd) == 0, "{}: cannot close {} (disk full?): {}", display, path, std::strerror(errno));
}

FileSum check_file_sum(const std::string& path) {
  Fd f{::open(path.c_str(), O_RDONLY)};
  struct stat st {};
  HYLO_CHECK(f.fd >= 0 && ::fstat(f.fd, &st) == 0 && S_ISREG(st.st_mode), "{}: no such checkpoint file", path);
  const uint64_t size = uint64_t(st.st_size);
  if (size == 0) corrupt(path, "empty file");
  std::string head(size_t(std::min<uint64_t>(size, kUserBlock)), '\0');
  HYLO_CHECK(::pread(f.fd, head.data(), head.size(), 0) == ssize_t(head.size()), "{}: cannot read: {}", path,
             std::strerror(errno));
  if (std::string_view(head).starts_with(kHdf5Signature)) return FileSum::legacy;
  if (!std::string_view(head).starts_with(kTag)) {
    // Where our user block ends the superblock begins: a damaged first line, not a foreign file.
    char at_block[8] = {};
    const bool ours = size >= kUserBlock + 8 && ::pread(f.fd, at_block, 8, off_t(kUserBlock)) == 8 &&
                      std::string_view(at_block, 8) == kHdf5Signature;
    if (ours) corrupt(path, "damaged checksum line");
    HYLO_FAIL("{}: not a hylo checkpoint (not an HDF5 file)", path);
  }
  uint64_t expected_size = 0;
  uint32_t expected_crc = 0;
  if (!parse_line(std::string_view(head).substr(kTag.size()), expected_size, expected_crc))
    corrupt(path, "damaged checksum line");
  if (size != expected_size)
    corrupt(path, fmt::format("{} bytes where {} were written{}", size, expected_size,
                              size < expected_size ? ": cut short" : ""));
  uint32_t crc = 0;
  HYLO_CHECK(crc_from(f.fd, kUserBlock, size, crc), "{}: cannot read: {}", path, std::strerror(errno));
  if (crc != expected_crc)
    corrupt(path, fmt::format("whole-file checksum mismatch: crc32 {:08x}, written {:08x}", crc, expected_crc));
  return FileSum::verified;
}

}  // namespace hylo
