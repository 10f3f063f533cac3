// Opt-in GPU time per op (HYLO_PROFILE=1): CUDA events around each op's device work, summed by
// name, read once at report time so profiling adds no synchronisation to the step.
#pragma once
#include <string>

namespace hylo::cuda {

bool profiling_enabled();

// Times the device work issued on hylo's stream during its lifetime (no-op when disabled).
class ProfileScope {
 public:
  explicit ProfileScope(const char* name, const char* phase = "");
  ~ProfileScope();
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  int slot_ = -1;
};

void profile_reset();
// "op  ms/step  calls  share" rows, largest first, averaged over `steps` steps.
std::string profile_report(int steps);

}  // namespace hylo::cuda
