#include "train/progress.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>

#include "checkpoint/run_dir.h"

#if HYLO_WITH_CUDA
#include "core/cuda/allocator.h"
#endif

namespace hylo {

namespace {

std::string human_duration(double seconds) {
  const auto s = int64_t(seconds);
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, s / 60 % 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

// 512, 35.8K, 1.20M, 3.40B.
std::string human_count(double n) {
  if (n < 1e3) return fmt::format("{:.0f}", n);
  if (n < 1e6) return fmt::format("{:.3g}K", n / 1e3);
  if (n < 1e9) return fmt::format("{:.3g}M", n / 1e6);
  if (n < 1e12) return fmt::format("{:.3g}B", n / 1e9);
  return fmt::format("{:.3g}T", n / 1e12);
}

double gib(double bytes) { return bytes / double(1ull << 30); }

}  // namespace

Progress::Progress(int64_t total_steps, int64_t first_step)
    : total_(total_steps), first_(first_step), start_(std::chrono::steady_clock::now()) {}

double Progress::elapsed_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::string Progress::line(const StepStats& s, Device device) const {
  const double elapsed = elapsed_seconds();
  const double per_step = s.step > first_ ? elapsed / double(s.step - first_) : s.step_seconds;
  const std::string mfu = s.mfu ? fmt::format("{:.1f}%", 100 * *s.mfu) : "-";
  return fmt::format(
      "step {:>6}/{} | loss {:.4f} | lr {:.2e} | gnorm {:.3f} | {:.0f} tok/s | mfu {} | {:.0f} ms | {} tokens | {} | "
      "elapsed {} | eta {}",
      s.step, total_, s.loss, s.lr, s.grad_norm, s.tokens_per_s, mfu, 1000 * s.step_seconds,
      human_count(double(s.tokens)), memory_text(device), human_duration(elapsed),
      human_duration(per_step * double(total_ - s.step)));
}

std::string summary_paragraph(const RunSummary& s) {
  std::vector<double> rates = s.tokens_per_s;
  std::string median = "-";
  if (!rates.empty()) {
    std::nth_element(rates.begin(), rates.begin() + std::ptrdiff_t(rates.size() / 2), rates.end());
    median = fmt::format("{:.0f}", rates[rates.size() / 2]);
  }
  const std::string ran = s.last_step > s.first_step
                              ? fmt::format("steps {}-{} of {}", s.first_step + 1, s.last_step, s.total_steps)
                              : fmt::format("no steps (already at step {} of {})", s.last_step, s.total_steps);
  const std::string val = s.val_loss ? fmt::format("{:.4f} (step {})", *s.val_loss, s.val_step) : "-";
  return fmt::format(
      "summary: {} in {}, {} tokens seen, median {} tokens/s; final train loss {}, val loss {}; last checkpoint {}",
      ran, human_duration(s.seconds), human_count(double(s.tokens)), median,
      s.last_step > s.first_step ? fmt::format("{:.4f}", s.train_loss) : "-", val,
      s.checkpoint.empty() ? "none" : s.checkpoint);
}

std::string memory_text(Device device) {
#if HYLO_WITH_CUDA
  if (device == Device::cuda) {
    const cuda::AllocatorStats stats = cuda::allocator_stats();
    return fmt::format("mem {:.2f} GiB (peak {:.2f})", gib(double(stats.current_bytes)), gib(double(stats.peak_bytes)));
  }
#endif
  (void)device;
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return fmt::format("peak rss {:.2f} GiB", gib(double(usage.ru_maxrss) * 1024));  // ru_maxrss is in KiB
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
