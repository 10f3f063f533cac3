#include "train/step.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "ops/ops.h"

namespace hylo {

namespace {

// Names the first parameter whose gradient holds NaN/inf (the slow path, after a bad step).
std::string first_nonfinite_grad(const ParamList& params) {
  for (const Parameter& p : params) {
    if (!p.var.has_grad()) continue;
    for (float g : p.var.grad().to(DType::f32).to_vector<float>())
      if (!std::isfinite(g)) return p.name;
  }
  return "(none: the loss itself)";
}

}  // namespace

Fp8Recipe fp8_recipe(const TrainConfig& t) {
  Fp8Recipe recipe;
  recipe.grad_format = t.fp8_format == "e4m3" ? Fp8Format::e4m3 : Fp8Format::e5m2;
  recipe.current_scaling = t.fp8_scaling == "current";
  recipe.history = t.fp8_amax_history;
  return recipe;
}

BatchSplit split_batch(const TrainConfig& t, int ranks, const std::string& where) {
  HYLO_CHECK(t.batch_size % ranks == 0, "{}: train.batch_size={} is not divisible by {} data-parallel ranks", where,
             t.batch_size, ranks);
  BatchSplit split;
  split.micro_batch = t.micro_batch_size > 0 ? t.micro_batch_size : t.batch_size / ranks;
  HYLO_CHECK(t.batch_size % (split.micro_batch * ranks) == 0,
             "{}: train.batch_size={} is not divisible by train.micro_batch_size={} x {} data-parallel ranks", where,
             t.batch_size, split.micro_batch, ranks);
  split.accumulation = t.batch_size / (split.micro_batch * ranks);
  return split;
}

TrainStep::TrainStep(const Config& config, Device device, const ParallelLayout& layout, BatchSplit split,
                     int vocab_valid)
    : train_(config.train), layout_(layout), split_(split), vocab_valid_(vocab_valid) {
  const TrainConfig& t = train_;
  model_ = std::make_unique<Transformer>(config.model, t.seed);
  model_->set_recompute(t.recompute);
  if (t.precision == "fp8") model_->enable_fp8(fp8_recipe(t), device);
  experts_ = parallelize_experts(*model_, layout);
  ParamList& params = model_->parameters();
  std::vector<std::vector<size_t>> buckets = gradient_buckets(params);
  if (t.zero1) zero_ = std::make_unique<ZeroLayout>(params, buckets, layout);
  optimizer_ = std::make_unique<AdamW>(params, AdamWOptions{t.beta1, t.beta2, t.eps, t.weight_decay}, device,
                                       zero_ ? zero_->owned() : std::vector<ElementRange>{});
  if (zero_) zero_->bind_values(params);
  gradient_sync_ = std::make_unique<GradientSync>(params, layout, std::move(buckets), zero_.get());
}

StepResult TrainStep::run(int64_t number, double lr, const std::function<StepBatch()>& next_batch) {
  if (zero_)
    zero_->zero_grads(model_->parameters());
  else
    optimizer_->zero_grad();
  StepResult r;
  r.loss = forward_backward(next_batch);
  r.grad_norm = grad_norm();
  r.finite = std::isfinite(r.loss) && std::isfinite(r.grad_norm);
  if (r.finite) {
    optimizer_->step(lr, clip_scale(r.grad_norm, train_.grad_clip));
    if (zero_) zero_->share_updated_values();
    sum_router_loads();
    model_->update_router_biases();  // MoE aux-loss-free balancing; no-op for dense / rate 0
    roll_fp8_history();
  } else if (train_.nan_policy == "abort") {
    HYLO_FAIL("step {}: non-finite loss {} / grad norm {} (first bad gradient: {}); aborting without saving", number,
              r.loss, r.grad_norm, first_nonfinite_grad(model_->parameters()));
  } else {
    model_->discard_router_load();
    if (Fp8State* fp8 = model_->fp8()) fp8->discard_step();
  }
  return r;
}

// Forward + backward over this rank's micro-batches, the gradients summed over the ranks; returns
// the mean loss of the step over all ranks. Each micro-batch's loss is scaled by 1 / (all
// micro-batches of the step), so the sum is the mean gradient.
double TrainStep::forward_backward(const std::function<StepBatch()>& next_batch) {
  double loss_sum = 0;
  const int accumulation = split_.accumulation, micro_batches = accumulation * layout_.dp();
  for (int micro = 0; micro < accumulation; ++micro) {
    const StepBatch batch = next_batch();
    Var loss = model_->loss(batch.inputs_BT, batch.targets_N, vocab_valid_, train_.z_loss);
    loss_sum += double(loss.value().to(DType::f32).to_vector<float>()[0]);
    if (micro == accumulation - 1) gradient_sync_->arm();
    scale(loss, 1.0 / micro_batches).backward();
  }
  gradient_sync_->finish();
  layout_.world().sum(std::span<double>(&loss_sum, 1));
  return loss_sum / micro_batches;
}

// The L2 norm of the whole summed gradient. Under ZeRO-1 each rank holds the sums of the elements
// it owns, and every element (of every expert shard) has one owner: their squares add over all
// ranks. Under expert parallelism alone each rank holds its own experts': their squares add over
// the expert group.
double TrainStep::grad_norm() const {
  if (layout_.expert_parallel() && !zero_) {  // the expert shards' squares add over the expert group
    const double replicated = optimizer_->grad_norm(false), experts = optimizer_->grad_norm(true);
    double squared = experts * experts;
    layout_.expert_group()->sum(std::span<double>(&squared, 1));
    return std::sqrt(replicated * replicated + squared);
  }
  const double norm = optimizer_->grad_norm();
  if (!zero_) return norm;
  double squared = norm * norm;
  layout_.world().sum(std::span<double>(&squared, 1));
  return std::sqrt(squared);
}

// The router's bias follows the load of every rank's tokens, so that it stays replicated.
void TrainStep::sum_router_loads() {
  if (layout_.world_size() == 1) return;
  for (std::span<int64_t> tally : model_->router_load_tallies()) layout_.world().sum(tally);
}

// The ranks saw different data: their FP8 histories take the largest amax of any rank (as the
// replicated weights do the summed gradient), so that every rank scales alike and a checkpoint,
// which is rank 0's, speaks for all of them.
void TrainStep::roll_fp8_history() {
  Fp8State* fp8 = model_->fp8();
  if (!fp8) return;
  if (layout_.world_size() > 1) {
    std::vector<uint32_t> mine = fp8->step_amax_bits();
    const std::vector<uint64_t> widened(mine.begin(), mine.end());
    const std::vector<uint64_t> all = layout_.world().all_gather(widened);
    for (size_t i = 0; i < all.size(); ++i) mine[i % mine.size()] = std::max(mine[i % mine.size()], uint32_t(all[i]));
    fp8->set_step_amax_bits(mine);
  }
  fp8->roll();
}

}  // namespace hylo
