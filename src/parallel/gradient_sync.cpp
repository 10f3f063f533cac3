#include "parallel/gradient_sync.h"

#include "core/error.h"
#include "parallel/zero.h"

namespace hylo {

std::vector<std::vector<size_t>> gradient_buckets(const ParamList& params, size_t bucket_bytes) {
  std::vector<std::vector<size_t>> buckets;
  size_t bytes = bucket_bytes;  // of the bucket being filled; a full one starts the next
  for (size_t i = params.size(); i-- > 0;) {
    const size_t param_bytes = size_t(params[i].var.value().numel()) * sizeof(float);
    if (bytes + param_bytes > bucket_bytes && bytes > 0) {
      buckets.emplace_back();
      bytes = 0;
    }
    buckets.back().push_back(i);
    bytes += param_bytes;
  }
  return buckets;
}

GradientSync::GradientSync(ParamList& params, const ParallelLayout& layout, std::vector<std::vector<size_t>> buckets,
                           const ZeroLayout* zero)
    : params_(params),
      layout_(layout),
      buckets_(std::move(buckets)),
      zero_(zero),
      bucket_of_(params.size()),
      ready_(params.size()) {
  HYLO_CHECK(!zero || zero->buckets() == buckets_.size(), "data parallel: a ZeRO-1 layout of {} buckets for {}",
             zero ? zero->buckets() : 0, buckets_.size());
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (size_t i : buckets_[b]) bucket_of_[i] = b;
  waiting_.resize(buckets_.size());
  for (size_t i = 0; i < params.size(); ++i)
    params[i].var.set_grad_ready_hook([this, i](Var&) { on_ready(i); });
}

void GradientSync::arm() {
  armed_ = true;
  next_bucket_ = 0;
  for (size_t b = 0; b < buckets_.size(); ++b) waiting_[b] = buckets_[b].size();
  ready_.assign(params_.size(), false);
}

void GradientSync::on_ready(size_t param) {
  if (!armed_) return;  // an earlier micro-batch: its gradients are not final
  const size_t b = bucket_of_[param];
  // A parameter read in two separately differentiated graphs would report twice, the second time
  // after its bucket may have left: fail rather than sum a partial gradient.
  HYLO_CHECK(!ready_[param] && b >= next_bucket_, "data parallel: the gradient of {} changed after it was sent",
             params_[param].name);
  ready_[param] = true;
  --waiting_[b];
  start_ready_buckets();
}

void GradientSync::start_ready_buckets() {
  for (; next_bucket_ < buckets_.size() && waiting_[next_bucket_] == 0; ++next_bucket_) {
    if (zero_) {
      start_flats(next_bucket_);
      continue;
    }
    // The replicated parameters' message over every rank, then the expert shards' over the ranks
    // that hold the same experts (a group of one has nothing to sum).
    for (const bool experts : {false, true}) {
      std::vector<Tensor> grads;
      for (size_t i : buckets_[next_bucket_])
        if (params_[i].expert_shard == experts) grads.push_back(params_[i].var.grad());
      if (grads.empty()) continue;
      HYLO_CHECK(!experts || layout_.expert_replicas(), "data parallel: expert shards without their replicas' communicator");
      dist::Communicator& comm = layout_.of(experts);
      if (!experts || comm.size() > 1) comm.start_sum(std::move(grads));
    }
  }
}

// ZeRO-1: each flat vector of the bucket (replicated first), reduce-scattered over its class's ranks.
void GradientSync::start_flats(size_t bucket) {
  const std::vector<ZeroLayout::Flat>& flats = zero_->flats(bucket);
  for (size_t k = 0; k < flats.size(); ++k) {
    const ZeroLayout::Flat& f = flats[k];
    dist::Communicator& comm = zero_->comm(f);
    if (f.experts && comm.size() == 1) continue;  // each rank owns all of it: the gradients are the sums
    comm.start_reduce_scatter(zero_->flat_grads(bucket, k, params_));
  }
}

void GradientSync::finish() {
  HYLO_CHECK(armed_, "data parallel: finish() without arm()");
  for (size_t i = 0; i < params_.size(); ++i) {
    if (ready_[i]) continue;
    Var& v = params_[i].var;
    if (!v.has_grad()) {
      const Tensor& value = v.value();
      v.mutable_grad() = Tensor::zeros(value.shape(), value.dtype(), value.device(), "zero grad");
    }
    ready_[i] = true;
    --waiting_[bucket_of_[i]];
  }
  start_ready_buckets();
  layout_.world().wait();
  if (layout_.expert_replicas()) layout_.expert_replicas()->wait();
  armed_ = false;
}

}  // namespace hylo
