#include "optim/schedule.h"

#include <algorithm>
#include <cmath>

namespace hylo {

double LrSchedule::at(int64_t step) const {
  const double floor = lr * min_lr_ratio;
  if (step < warmup_steps) return lr * double(step + 1) / double(warmup_steps);
  const double span = double(std::max<int64_t>(1, total_steps - warmup_steps));
  const double progress = std::clamp(double(step - warmup_steps) / span, 0.0, 1.0);
  if (kind == "wsd") {
    const double stable_until = 1.0 - decay_fraction;
    if (progress < stable_until) return lr;
    return lr + (floor - lr) * (progress - stable_until) / std::max(decay_fraction, 1e-12);
  }
  return floor + 0.5 * (lr - floor) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace hylo
