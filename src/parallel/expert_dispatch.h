// Expert parallelism's dispatch and combine (SPEC §6): the all-to-all that sends each MoE layer's
// rows to the ranks of their experts and the outputs back, behind the ExpertExchange the layers
// receive (nn/moe.h), as torchtitan's ExpertParallel wraps the experts module: the model itself
// holds no communicator.
#pragma once
#include <memory>

#include "nn/moe.h"
#include "nn/transformer.h"
#include "parallel/communicator.h"
#include "parallel/layout.h"

namespace hylo {

// The exchange over the ranks of an expert group (`group` must outlive it).
class ExpertDispatch final : public ExpertExchange {
 public:
  explicit ExpertDispatch(dist::Communicator& group) : group_(group) {}
  int rank() const override { return group_.rank(); }
  int ranks() const override { return group_.size(); }
  Var run(const Var& xs_AD, const MoePlan& plan, const LocalExperts& local) const override;

 private:
  dist::Communicator& group_;
};

// The parallelize step: under expert parallelism every MoE layer of `model` keeps the experts of
// this rank of layout.expert_group() and exchanges rows through the returned dispatch, which must
// outlive the model's forwards; null (the model untouched) without expert parallelism.
std::unique_ptr<ExpertDispatch> parallelize_experts(Transformer& model, const ParallelLayout& layout);

}  // namespace hylo
