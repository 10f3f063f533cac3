#include "train/gradient_sync.h"

#include "core/error.h"

namespace hylo {

GradientSync::GradientSync(ParamList& params, dist::Communicator& comm, std::vector<int> owner, size_t bucket_bytes,
                           dist::Communicator* expert_replicas)
    : params_(params),
      comm_(comm),
      expert_replicas_(expert_replicas),
      owner_(std::move(owner)),
      bucket_of_(params.size()),
      ready_(params.size()) {
  size_t bytes = bucket_bytes;  // of the bucket being filled; a full one starts the next
  for (size_t i = params.size(); i-- > 0;) {
    const size_t param_bytes = size_t(params[i].var.value().numel()) * sizeof(float);
    if (bytes + param_bytes > bucket_bytes && bytes > 0) {
      buckets_.emplace_back();
      bytes = 0;
    }
    buckets_.back().push_back(i);
    bucket_of_[i] = buckets_.size() - 1;
    bytes += param_bytes;
  }
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
    // The replicated parameters' messages over every rank, then the expert shards' over the ranks
    // that hold the same experts (a group of one has nothing to sum).
    for (const bool experts : {false, true}) {
      std::vector<size_t> members;
      for (size_t i : buckets_[next_bucket_])
        if (params_[i].expert_shard == experts) members.push_back(i);
      if (members.empty()) continue;
      HYLO_CHECK(!experts || expert_replicas_, "data parallel: expert shards without their replicas' communicator");
      dist::Communicator& comm = experts ? *expert_replicas_ : comm_;
      if (experts && comm.size() == 1) continue;
      auto grads_of = [&](int root) {  // root: an owner, or kEveryRank for all
        std::vector<Tensor> grads;
        for (size_t i : members)
          if (root == dist::Communicator::kEveryRank || owner_[i] == root) grads.push_back(params_[i].var.grad());
        return grads;
      };
      if (owner_.empty()) {
        comm.start_sum(grads_of(dist::Communicator::kEveryRank), dist::Communicator::kEveryRank);
        continue;
      }
      // ZeRO-1: one message per owner (an index into `comm`), owners in rank order: every rank
      // starts them in the same order.
      for (int root = 0; root < comm.size(); ++root)
        if (std::vector<Tensor> grads = grads_of(root); !grads.empty()) comm.start_sum(std::move(grads), root);
    }
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
  comm_.wait();
  if (expert_replicas_) expert_replicas_->wait();
  armed_ = false;
}

}  // namespace hylo
