#include "data/step_batch.h"

namespace hylo {

StepBatch make_step_batch(const std::vector<int32_t>& tokens, int B, int T, Device device) {
  HYLO_CHECK(int64_t(tokens.size()) == int64_t(B) * (T + 1), "batch of {} tokens, expected {} x {}", tokens.size(),
             B, T + 1);
  std::vector<int32_t> inputs(size_t(B) * T), targets(size_t(B) * T);
  for (int b = 0; b < B; ++b) {
    const int32_t* row = tokens.data() + size_t(b) * (T + 1);
    std::copy(row, row + T, inputs.begin() + size_t(b) * T);
    std::copy(row + 1, row + T + 1, targets.begin() + size_t(b) * T);
  }
  return {Tensor::from_vector(inputs, {B, T}).to(device), Tensor::from_vector(targets, {int64_t(B) * T}).to(device)};
}

}  // namespace hylo
