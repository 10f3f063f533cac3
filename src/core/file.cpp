#include "core/file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>

#include "core/error.h"

namespace hylo {

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string unique_temp_path(const std::string& path) {
  static std::mt19937_64 random{std::random_device{}() ^ uint64_t(::getpid()) << 32};
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  return fmt::format("{}.{}-{:08x}.tmp", path, ::getpid(), uint32_t(random()));
}

void write_file_atomic(const std::string& path, const std::string& content) {
  write_file_atomic(path, std::vector<std::string_view>{content});
}

void write_file_atomic(const std::string& path, const std::vector<std::string_view>& pieces) {
  const std::string tmp = unique_temp_path(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  HYLO_CHECK(fd >= 0, "{}: cannot create: {}", tmp, std::strerror(errno));
  for (std::string_view content : pieces) {
    size_t done = 0;
    while (done < content.size()) {
      ssize_t n = ::write(fd, content.data() + done, content.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        int err = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        HYLO_FAIL("{}: write failed: {}", tmp, std::strerror(err));
      }
      done += size_t(n);
    }
  }
  const bool synced = ::fsync(fd) == 0;  // the rename must not expose unwritten data
  const int sync_err = errno;
  ::close(fd);
  if (!synced) {
    ::unlink(tmp.c_str());
    HYLO_FAIL("{}: fsync failed: {}", tmp, std::strerror(sync_err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    HYLO_FAIL("{}: cannot rename {} into place: {}", path, tmp, std::strerror(err));
  }
}

}  // namespace hylo
