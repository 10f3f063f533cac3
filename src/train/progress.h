// Console progress for long runs: step, loss, lr, grad norm, tokens/s, MFU and ETA on one line.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace hylo {

class MetricsLog;

class Progress {
 public:
  Progress(int64_t total_steps, int64_t first_step);
  std::string line(int64_t step, double loss, double lr, double grad_norm, double tokens_per_s, double mfu,
                   double step_seconds) const;

 private:
  int64_t total_, first_;
  std::chrono::steady_clock::time_point start_;
};

// Prints to stdout and appends to the run's log.txt (when a log is given).
void log_line(MetricsLog* log, const std::string& line);

}  // namespace hylo
