// One training step (SPEC §5, §6): forward and backward over this rank's micro-batches with the
// gradients summed over the ranks while the last backward runs, the norm of the summed gradient,
// clipping, the AdamW update and the non-finite policy (train.nan_policy). The step that
// `hylo train` loops over and `hylo bench train` times, with the model and what updates it laid
// out over the ranks as train.* asks.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "config/config.h"
#include "nn/transformer.h"
#include "optim/optimizer.h"
#include "parallel/expert_dispatch.h"
#include "parallel/gradient_sync.h"
#include "parallel/layout.h"
#include "parallel/zero.h"
#include "data/step_batch.h"

namespace hylo {

// train.batch_size is the global batch: each of `ranks` data-parallel ranks runs its share in
// `accumulation` micro-batches of `micro_batch` sequences (by default in one).
struct BatchSplit {
  int micro_batch = 0, accumulation = 1;
};
// Errors name `where` (the config file) and the keys.
BatchSplit split_batch(const TrainConfig& t, int ranks, const std::string& where);

// train.precision: fp8's recipe from train.fp8_* (ops/fp8_linear.h).
Fp8Recipe fp8_recipe(const TrainConfig& t);

struct StepResult {
  double loss = 0;       // the mean over every rank's micro-batches
  double grad_norm = 0;  // of the whole summed gradient, before clipping
  bool finite = true;    // false: the update was skipped (train.nan_policy: skip)
};

class TrainStep {
 public:
  // The model of config.model (seeded by train.seed) with its experts shared out over the expert
  // groups, ZeRO-1 under train.zero1, AdamW and the gradient sum. `vocab_valid`: the tokens the
  // data can hold (the rest of the vocabulary is padding). `layout` must outlive this.
  TrainStep(const Config& config, Device device, const ParallelLayout& layout, BatchSplit split, int vocab_valid);
  TrainStep(const TrainStep&) = delete;
  TrainStep& operator=(const TrainStep&) = delete;

  // One step at learning rate `lr` over split.accumulation micro-batches from `next_batch`; every
  // rank calls it in step. `number`: the step's number from 1, for errors.
  StepResult run(int64_t number, double lr, const std::function<StepBatch()>& next_batch);

  Transformer& model() { return *model_; }
  AdamW& optimizer() { return *optimizer_; }
  const ZeroLayout* zero() const { return zero_.get(); }

 private:
  double forward_backward(const std::function<StepBatch()>& next_batch);
  double grad_norm() const;
  void sum_router_loads();
  void roll_fp8_history();

  TrainConfig train_;
  const ParallelLayout& layout_;
  BatchSplit split_;
  int vocab_valid_ = 0;
  std::unique_ptr<Transformer> model_;
  std::unique_ptr<ExpertDispatch> experts_;  // expert parallelism's exchange; null without
  std::unique_ptr<ZeroLayout> zero_;         // ZeRO-1's sharding of the optimizer state; null without
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<GradientSync> gradient_sync_;
};

}  // namespace hylo
