#include "train/watchdog.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

namespace hylo {

Watchdog::Watchdog(double timeout_s, int rank)
    : timeout_(timeout_s), rank_(rank), thread_([this] { watch(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Watchdog::beat(std::string doing) {
  std::lock_guard lock(mutex_);
  last_beat_ = std::chrono::steady_clock::now();
  doing_ = std::move(doing);
}

void Watchdog::watch() {
  std::unique_lock lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, std::chrono::milliseconds(250));
    if (stop_ || std::chrono::steady_clock::now() - last_beat_ < timeout_) continue;
    // The main thread may sit inside MPI or CUDA for ever: say why and leave from here. _Exit runs
    // no destructors and no atexit handlers, which could wait on the very collective that hangs.
    const std::string line = fmt::format(
        "hylo: error: rank {}: no progress for {:g} s in {} (another rank died or hangs; train.hang_timeout_s)\n",
        rank_, timeout_.count(), doing_);
    std::fputs(line.c_str(), stderr);
    std::fflush(stderr);
    std::_Exit(3);
  }
}

}  // namespace hylo
