// Learning-rate schedules: linear warmup, then cosine or WSD (warmup-stable-decay) towards
// lr * min_lr_ratio, which at(total_steps) reaches: the last step a run takes, total_steps - 1,
// is one decay increment above it.
#pragma once
#include <cstdint>
#include <string>

namespace hylo {

struct LrSchedule {
  double lr = 3e-4;
  double min_lr_ratio = 0.1;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  std::string kind = "cosine";  // cosine | wsd
  double decay_fraction = 0.2;  // wsd: the last fraction of steps decays linearly

  double at(int64_t step) const;  // step counts from 0
};

}  // namespace hylo
