#include "train/progress.h"

#include <fmt/format.h>

#include <cstdio>

#include "checkpoint/run_dir.h"

namespace hylo {

Progress::Progress(int64_t total_steps, int64_t first_step)
    : total_(total_steps), first_(first_step), start_(std::chrono::steady_clock::now()) {}

static std::string human_duration(double seconds) {
  const auto s = int64_t(seconds);
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, s / 60 % 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

std::string Progress::line(int64_t step, double loss, double lr, double grad_norm, double tokens_per_s, double mfu,
                           double step_seconds) const {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double per_step = step > first_ ? elapsed / double(step - first_) : step_seconds;
  std::string mfu_text = mfu > 0 ? fmt::format("{:.1f}%", 100 * mfu) : "-";
  return fmt::format("step {:>6}/{} | loss {:.4f} | lr {:.2e} | gnorm {:.3f} | {:.0f} tok/s | mfu {} | {:.0f} ms | eta {}",
                     step, total_, loss, lr, grad_norm, tokens_per_s, mfu_text, 1000 * step_seconds,
                     human_duration(per_step * double(total_ - step)));
}

void log_line(MetricsLog* log, const std::string& line) {
  if (log) {
    log->print(line);
    return;
  }
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

}  // namespace hylo
