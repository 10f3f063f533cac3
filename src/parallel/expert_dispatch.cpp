#include "parallel/expert_dispatch.h"

#include <vector>

#include "ops/ops.h"

namespace hylo {

namespace {

// Rows to the ranks of `comm` (send[q] to rank q, in order) and the rows they send back; the
// backward returns the gradients the reverse way.
Var exchange_rows(const Var& rows, const std::vector<int64_t>& send, const std::vector<int64_t>& recv,
                  dist::Communicator& comm) {
  Tensor received = comm.all_to_all(rows.value(), send, recv);
  return Var::from_op(received, {rows}, [send, recv, &comm](const Tensor& grad, std::vector<Var>& in) {
    in[0].accumulate_grad(comm.all_to_all(grad.contiguous(), recv, send));
  });
}

}  // namespace

// The plan's rows are grouped by expert, so rank q's experts [q L, (q + 1) L) are one run of rows:
// each run goes to its rank, which gets the rows of its L experts from every rank (rank-major,
// by expert within a rank), regroups them by expert with a plan of its own, runs its experts,
// undoes the regrouping (a combine with weight 1, exact) and sends the outputs back.
Var ExpertDispatch::run(const Var& xs_AD, const MoePlan& plan, const LocalExperts& local) const {
  const int E = plan.num_experts, P = group_.size(), L = E / P;
  const int32_t* kept = plan.kept_E.data<int32_t>();  // host: rows per expert, all E
  std::vector<int64_t> send(size_t(P), 0), counts(kept, kept + E);
  for (int e = 0; e < E; ++e) send[size_t(e / L)] += kept[e];
  const std::vector<int64_t> incoming = group_.all_to_all(counts);  // per rank q: its rows for my L experts
  std::vector<int64_t> recv(size_t(P), 0);
  std::vector<int32_t> local_expert;  // of each received row
  for (int q = 0; q < P; ++q)
    for (int e = 0; e < L; ++e) {
      const int64_t n = incoming[size_t(q * L + e)];
      recv[size_t(q)] += n;
      local_expert.insert(local_expert.end(), size_t(n), int32_t(e));
    }
  const int64_t R = int64_t(local_expert.size());
  const Device device = xs_AD.value().device();
  Var xr_RD = exchange_rows(xs_AD, send, recv, group_);
  if (R == 0) return exchange_rows(xr_RD, recv, send, group_);  // no rows for these experts: (0, D) back
  const MoePlan mine = moe_plan(Tensor::from_vector(local_expert, {R, 1}).to(device), L, /*capacity=*/0);
  const DType weight_dtype = device == Device::cuda ? DType::f32 : xr_RD.value().dtype();
  Var ones_R1(Tensor::empty({R, 1}, weight_dtype, device, "expert exchange weights"));
  ones_R1.mutable_value().fill_(1.0);
  Var yr_RD = moe_combine(local(moe_permute(xr_RD, mine), mine), ones_R1, mine);
  return exchange_rows(yr_RD, recv, send, group_);
}

std::unique_ptr<ExpertDispatch> parallelize_experts(Transformer& model, const ParallelLayout& layout) {
  if (!layout.expert_parallel()) return nullptr;
  auto dispatch = std::make_unique<ExpertDispatch>(*layout.expert_group());
  model.shard_experts(*dispatch);
  return dispatch;
}

}  // namespace hylo
