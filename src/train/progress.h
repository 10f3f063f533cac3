// Console progress for long runs: one line per log step (step, loss, lr, grad norm, tokens/s,
// MFU where the device's peak is known, step time, tokens seen, memory, elapsed time and ETA),
// and a closing paragraph on what the run did.
#pragma once
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace hylo {

class MetricsLog;

struct StepStats {
  int64_t step = 0;  // steps done
  double loss = 0, lr = 0, grad_norm = 0, tokens_per_s = 0, step_seconds = 0;
  std::optional<double> mfu;  // unknown without the device's peak FLOP/s (CPU)
  int64_t tokens = 0;         // seen by the end of this step, by all ranks
};

class Progress {
 public:
  Progress(int64_t total_steps, int64_t first_step);
  std::string line(const StepStats& s, Device device) const;
  double elapsed_seconds() const;

 private:
  int64_t total_, first_;
  std::chrono::steady_clock::time_point start_;
};

// What a launch of `hylo train` did, for its closing paragraph.
struct RunSummary {
  int64_t first_step = 0, last_step = 0, total_steps = 0;  // steps first_step+1 .. last_step ran
  int64_t tokens = 0;                                      // seen by the end of last_step
  double seconds = 0;
  std::vector<double> tokens_per_s;  // of every step that ran
  double train_loss = 0;             // of the last step
  std::optional<double> val_loss;    // of the last evaluation
  int64_t val_step = 0;
  std::string checkpoint;  // the last one written or resumed from; "" if none
};
std::string summary_paragraph(const RunSummary& s);

// Memory in use on `device`: the caching allocator's live and peak bytes on CUDA, the process's
// peak resident set on the CPU.
std::string memory_text(Device device);

// Prints to stdout and appends to the run's log.txt (when a log is given).
void log_line(MetricsLog* log, const std::string& line);

}  // namespace hylo
