#include "checkpoint/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

#include "core/error.h"

namespace fs = std::filesystem;

namespace hylo {
namespace {

constexpr const char* kLockName = ".lock";

std::string host_name() {
  char name[256] = {};
  return ::gethostname(name, sizeof name - 1) == 0 ? std::string(name) : std::string("unknown");
}

// "pid P on host H" from the text "host H pid P" the holder wrote.
std::string describe_holder(int fd) {
  char text[512] = {};
  const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
  char host[256] = {};
  long pid = 0;
  if (n > 0 && std::sscanf(text, "host %255s pid %ld", host, &pid) == 2) return fmt::format("pid {} on host {}", pid, host);
  return "another process (it has not yet written its host and pid)";
}

// File systems without flock() (some cluster mounts) give one of these; the run goes on unlocked.
bool unsupported(int err) { return err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS || err == EINVAL; }

}  // namespace

RunDirLock::RunDirLock(const std::string& dir) : dir_(dir) {
  std::error_code ec;
  HYLO_CHECK(!fs::exists(dir, ec) || fs::is_directory(dir, ec), "{}: exists and is not a directory", dir);
  created_ = !fs::exists(dir, ec);
  fs::create_directories(dir, ec);
  HYLO_CHECK(!ec, "{}: cannot create directory: {}", dir, ec.message());
  const std::string path = (fs::path(dir) / kLockName).string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  HYLO_CHECK(fd_ >= 0, "{}: cannot open the run directory's lock file: {}", path, std::strerror(errno));
  int rc;
  while ((rc = ::flock(fd_, LOCK_EX | LOCK_NB)) != 0 && errno == EINTR) {
  }
  if (rc != 0) {
    const int err = errno;
    if (err == EWOULDBLOCK) {
      const std::string holder = describe_holder(fd_);
      ::close(std::exchange(fd_, -1));
      HYLO_FAIL("run directory {} is in use by {} (its lock: {})", dir, holder, path);
    }
    HYLO_CHECK(unsupported(err), "{}: cannot lock: {}", path, std::strerror(err));
    fmt::print(stderr, "warning: {}: the file system does not support flock ({}): the run directory is not locked\n",
               path, std::strerror(err));
  }
  const std::string holder = fmt::format("host {} pid {}\n", host_name(), ::getpid());
  HYLO_CHECK(::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, holder.data(), holder.size(), 0) == ssize_t(holder.size()),
             "{}: cannot write the lock holder: {}", path, std::strerror(errno));

  // No writer of this run is alive: every temporary file is a dead writer's partial output.
  for (const fs::path& sub : {fs::path(dir), fs::path(dir) / "checkpoints", fs::path(dir) / "checkpoints" / "superseded"}) {
    if (!fs::is_directory(sub, ec)) continue;
    for (const auto& entry : fs::directory_iterator(sub, ec)) {
      const std::string name = entry.path().filename().string();
      if (!name.ends_with(".tmp") || !entry.is_regular_file(ec)) continue;
      fs::remove(entry.path(), ec);
      HYLO_CHECK(!ec, "{}: cannot remove a dead writer's temporary file: {}", entry.path().string(), ec.message());
      removed_.push_back(fs::relative(entry.path(), dir, ec).string());
    }
  }
}

RunDirLock::~RunDirLock() {
  std::error_code ec;
  // Before the lock goes: once released, the file may be another launch's. fs::remove leaves a
  // directory that is not empty.
  const bool undo = created_ && !keep_;
  if (undo) fs::remove(fs::path(dir_) / kLockName, ec);
  if (fd_ >= 0) ::close(fd_);
  if (undo) fs::remove(dir_, ec);
}

std::optional<std::string> run_dir_holder(const std::string& dir) {
  const std::string path = (fs::path(dir) / kLockName).string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::optional<std::string> holder;
  if (::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK) holder = describe_holder(fd);
  ::close(fd);  // also releases the shared lock, if it was taken
  return holder;
}

}  // namespace hylo
