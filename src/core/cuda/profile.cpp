#include "core/cuda/profile.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/tensor_kernels.h"

namespace hylo::cuda {

namespace {

struct Interval {
  const char* name;
  const char* phase;
  cudaEvent_t start, stop;
};

struct Profile {
  std::vector<Interval> intervals;  // events are reused across resets
  size_t used = 0;
};

Profile& profile() {
  static Profile p;
  return p;
}

}  // namespace

bool profiling_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("HYLO_PROFILE");
    return v && *v && *v != '0';
  }();
  return on;
}

ProfileScope::ProfileScope(const char* name, const char* phase) {
  if (!profiling_enabled()) return;
  Profile& p = profile();
  if (p.used == p.intervals.size()) {
    Interval i{name, phase, nullptr, nullptr};
    HYLO_CUDA_CHECK(cudaEventCreate(&i.start));
    HYLO_CUDA_CHECK(cudaEventCreate(&i.stop));
    p.intervals.push_back(i);
  }
  slot_ = int(p.used++);
  p.intervals[size_t(slot_)].name = name;
  p.intervals[size_t(slot_)].phase = phase;
  HYLO_CUDA_CHECK(cudaEventRecord(p.intervals[size_t(slot_)].start, stream()));
}

ProfileScope::~ProfileScope() {
  if (slot_ >= 0) cudaEventRecord(profile().intervals[size_t(slot_)].stop, stream());
}

void profile_reset() {
  synchronize();
  profile().used = 0;
}

std::string profile_report(int steps) {
  synchronize();
  std::map<std::string, std::pair<double, int>> by_name;
  double total = 0;
  for (size_t i = 0; i < profile().used; ++i) {
    const Interval& iv = profile().intervals[i];
    float ms = 0;
    HYLO_CUDA_CHECK(cudaEventElapsedTime(&ms, iv.start, iv.stop));
    auto& row = by_name[std::string(iv.name) + iv.phase];
    row.first += ms;
    row.second += 1;
    total += ms;
  }
  std::vector<std::pair<std::string, std::pair<double, int>>> rows(by_name.begin(), by_name.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  std::string out = fmt::format("{:<28} {:>10} {:>8} {:>10}\n", "op (HYLO_PROFILE)", "ms/step", "calls", "share");
  for (const auto& [name, v] : rows)
    out += fmt::format("{:<28} {:>10.2f} {:>8} {:>9.1f}%\n", name, v.first / steps, v.second / steps,
                       100 * v.first / std::max(total, 1e-9));
  return out + fmt::format("{:<28} {:>10.2f}\n", "total timed", total / steps);
}

}  // namespace hylo::cuda
