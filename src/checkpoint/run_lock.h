// The lock on a run directory, held for the life of its run (SPEC §7): two `hylo train` on one
// directory would interleave their checkpoints and metrics. flock() on <dir>/.lock, which holds
// the holder's "host <name> pid <n>" for the refusal message and for `hylo sweep status`. The
// kernel drops the lock when the holder dies (kill -9, a lost node's NFS lease), so a stale lock
// never blocks a requeued job; the file itself stays (deleting it would race with a new holder).
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace hylo {

class RunDirLock {
 public:
  // Creates `dir` if needed and takes its lock, or fails with one line
  // "run directory DIR is in use by pid P on host H". Holding it, no other writer of the run can
  // be alive: the temporary files of writers that died (*.tmp in DIR, DIR/checkpoints and
  // DIR/checkpoints/superseded) are deleted, their names kept in removed().
  explicit RunDirLock(const std::string& dir);
  // Releases the lock. A directory this lock created is removed again unless keep() was called
  // (the run began): a launch that fails leaves the disk as it found it.
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

  void keep() { keep_ = true; }
  const std::vector<std::string>& removed() const { return removed_; }

 private:
  std::string dir_;
  int fd_ = -1;
  bool created_ = false, keep_ = false;
  std::vector<std::string> removed_;
};

// "pid P on host H" while a process holds the lock of `dir`; nullopt when none does (or `dir` has
// no lock file). What `hylo sweep status` calls running.
std::optional<std::string> run_dir_holder(const std::string& dir);

}  // namespace hylo
