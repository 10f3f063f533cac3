// Ends a job of several ranks that stopped making progress. A rank that died or hangs leaves the
// others waiting in a collective for ever (neither MPI nor NCCL times out by itself), holding
// their GPUs. The trainer calls beat() from before MPI's start-up on (MPI_Init, NCCL's set-up, the
// checkpoint load and the resume handshake wait for every rank too) and as it starts each step,
// evaluation and checkpoint; when `timeout_s` passes without one, the watchdog prints one line
// naming what was last under way and ends the process (exit code 3), and the launcher then ends
// the other ranks (SPEC §8).
#pragma once
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace hylo {

class Watchdog {
 public:
  Watchdog(double timeout_s, int rank);  // starts watching: construct it where the work begins
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void beat(std::string doing);  // e.g. "step 12"

 private:
  void watch();

  const std::chrono::duration<double> timeout_;
  const int rank_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::chrono::steady_clock::time_point last_beat_ = std::chrono::steady_clock::now();
  std::string doing_ = "the start";
  std::thread thread_;  // last: it starts once the members above exist
};

}  // namespace hylo
