// Trains `model` on one fixed random batch (2 x 16 tokens of a `vocab`-token vocabulary, random
// targets) with AdamW at lr 1e-2 until the loss falls under 0.1 or 300 steps pass, updating MoE
// router biases as the trainer does. A model that cannot memorise one batch has a broken
// forward, backward or optimizer step.
#pragma once
#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "nn/transformer.h"
#include "optim/optimizer.h"

namespace hylo::test {

struct OverfitResult {
  double loss = 0;
  int steps = 0;
};

inline OverfitResult overfit_one_batch(Transformer& model, int vocab) {
  AdamW optimizer(model.parameters(), AdamWOptions{0.9, 0.95, 1e-8, 0.0}, Device::cpu);
  Rng rng{9, 0, 0};
  std::vector<int32_t> ids(2 * 16), targets(2 * 16);
  for (auto& x : ids) x = int32_t(rng.below(uint64_t(vocab)));
  for (auto& x : targets) x = int32_t(rng.below(uint64_t(vocab)));
  const Tensor inputs = Tensor::from_vector(ids, {2, 16}), target_t = Tensor::from_vector(targets, {32});
  OverfitResult r{1e9, 0};
  for (; r.steps < 300 && r.loss >= 0.1; ++r.steps) {
    optimizer.zero_grad();
    Var l = model.loss(inputs, target_t, vocab);
    r.loss = l.value().to(DType::f64).to_vector<double>()[0];
    l.backward();
    optimizer.step(1e-2, 1.0);
    model.update_router_biases();
  }
  return r;
}

}  // namespace hylo::test
