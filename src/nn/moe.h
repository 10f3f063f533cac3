// Mixture-of-experts FFN (SPEC §2): a router picks top_k of E SwiGLU experts per token, their
// outputs are summed with renormalised router weights, plus optional always-on shared experts.
//
// Shared experts: `shared_experts: S` builds ONE SwiGLU of hidden S·F (F = expert_hidden). S
// separate always-on SwiGLU experts of hidden F, each weighted 1, compute exactly the same
// function (their hidden units are disjoint and their outputs add), so fusing them is one GEMM
// pair instead of S, and parameter counts are identical.
//
// Load balance: the Switch aux loss (a differentiable scalar, added to the training loss by the
// Transformer) and/or the aux-loss-free bias of DeepSeek-V3 (a non-trained buffer that shifts
// selection only; updated after each optimizer step from the loads seen since the last update,
// saved in checkpoints so that resume is bit-exact). The bias and the load tally live on the host
// (the plan's per-expert counts are on the host anyway); a CUDA forward uses a device copy of the
// bias that is refreshed only when the host values change.
//
// Legend: N tokens, D d_model, E experts, K top_k, F expert hidden, A kept assignments.
#pragma once
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "nn/model_config.h"
#include "nn/parameter.h"
#include "ops/moe.h"

namespace hylo {

// What one MoE layer saw in its last forward pass.
struct MoeLayerStats {
  int layer = 0;
  std::vector<int64_t> tokens_per_expert;  // assignments chosen per expert (before capacity)
  int64_t assignments = 0;                 // N * top_k
  int64_t dropped = 0;                     // over capacity, contributed zero
  double aux_loss = 0;                     // the value added to the loss (0 when aux_loss_coef == 0)
  int64_t min_load() const;
  int64_t max_load() const;
  double load_cv() const;  // std / mean of tokens_per_expert: 0 when perfectly balanced
};

// A non-trained tensor that checkpoints must carry (e.g. blocks.3.moe.router_bias).
struct NamedBufferRef {
  std::string name;
  Tensor& value;
};

// Expert parallelism's transport (SPEC §6), given to the layers by the parallelize step
// (parallel/expert_dispatch.h), so that the model holds no communicator: the experts are shared
// out over ranks() ranks, this one holding experts [rank() L, (rank() + 1) L), L = E / ranks().
class ExpertExchange {
 public:
  // This rank's L experts on rows grouped by a plan over them.
  using LocalExperts = std::function<Var(const Var& xs_AD, const MoePlan& plan)>;
  virtual ~ExpertExchange() = default;
  virtual int rank() const = 0;
  virtual int ranks() const = 0;
  // The experts' outputs (A, D) for the permuted rows xs_AD of `plan` (grouped by expert, over all
  // E): each expert's rows travel to the rank that holds it, `local` runs them there, and the
  // outputs come back in the rows' order. Differentiable; every rank of the group calls it in step.
  virtual Var run(const Var& xs_AD, const MoePlan& plan, const LocalExperts& local) const = 0;
};

class MoeFeedForward {
 public:
  // Registers blocks.<layer>.moe.{router, w_in, w_out[, shared.w_in, shared.w_out]} in `params`.
  MoeFeedForward(ParamList& params, int layer, const ModelConfig& config, uint64_t seed);

  // x (N, D) -> (N, D). When `aux_loss` is given and aux_loss_coef > 0 it receives the layer's
  // aux loss. Records stats(); under grad mode also adds the load to the bias-update tally.
  Var forward(const Var& x_ND, Var* aux_loss) const;

  // Reads a CUDA aux loss back to the host on the first call after a forward (not in the forward:
  // that would be a second sync per layer).
  const MoeLayerStats& stats() const;
  const std::string& bias_name() const { return bias_name_; }
  Tensor& router_bias() { return bias_E_; }
  // bias_i += rate * sign(mean load - load_i) over the loads tallied since the last call, then
  // clears the tally. No-op (tally cleared) when bias_update_rate == 0.
  void update_router_bias();
  void discard_router_load();
  // The tokens per expert tallied since the last update (data parallelism sums it over ranks).
  std::span<int64_t> load_tally() { return load_tally_E_; }

  // Expert parallelism (SPEC §6): keep only this rank's experts, rows [r L, (r + 1) L) of w_in and
  // w_out for r = exchange.rank() (L = experts / exchange.ranks()), and run the experts through
  // `exchange` (which must outlive the layer). Call before an optimizer takes the parameters.
  void shard_experts(ParamList& params, const ExpertExchange& exchange);
  bool expert_parallel() const { return exchange_ != nullptr; }

 private:
  int experts_ = 0, top_k_ = 0;
  RouterKind router_ = RouterKind::softmax;
  double aux_coef_ = 0, bias_rate_ = 0, capacity_factor_ = 0;
  Var router_ED, w_in_E2FD, w_out_EDF;  // w_in rows: gate [0, F), up [F, 2F)
  Var shared_w_in_2SD, shared_w_out_DS;  // S = shared_experts * F; undefined without shared experts
  std::string bias_name_;
  Tensor bias_E_;  // f32 host, zero-initialised; used only for selection
  // The bias as moe_topk needs it on `device` (undefined while all zero: adding 0 selects the same).
  Tensor selection_bias(Device device) const;
  // The experts' SwiGLU on the permuted rows (A, D) of `plan`: here, or on the experts' ranks.
  Var experts(const Var& xs_AD, const MoePlan& plan) const;
  Var local_experts(const Var& xs_AD, const MoePlan& plan) const;  // this rank's weights
  const ExpertExchange* exchange_ = nullptr;  // expert parallelism's, or none
  // Observation and caches, not model state: forward() is const for callers (evaluation takes a
  // const model).
  mutable MoeLayerStats stats_;
  mutable Tensor pending_aux_;  // the last forward's aux loss, not yet read into stats_
  mutable std::vector<int64_t> load_tally_E_;
  mutable Tensor device_bias_E_;             // device copy of bias_E_ ...
  mutable std::vector<float> device_bias_of_;  // ... made from these host values
};

}  // namespace hylo
