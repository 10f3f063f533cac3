// Splits a loader batch of (B, T+1) tokens into model inputs (B, T) and next-token targets
// (B*T) on the training device.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace hylo {

struct StepBatch {
  Tensor inputs_BT;
  Tensor targets_N;
};

StepBatch make_step_batch(const std::vector<int32_t>& tokens, int B, int T, Device device);

}  // namespace hylo
