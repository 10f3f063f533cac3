// Mixture-of-experts ops (SPEC §2). Each is one entry with shape checks, the CPU reference
// (src/ops/cpu/moe.h) and a hand-written backward; CUDA tensors fail with "moe: no CUDA kernels yet".
//
// A MoE FFN is composed from them as
//   logits_NE = linear(x_ND, router_ED)                       (fp32 on every backend)
//   scores_NE = moe_router_scores(logits_NE, kind)
//   expert_NK = moe_topk(scores_NE, bias_E, K)                (no gradient: a selection)
//   w_NK      = moe_gate_weights(scores_NE, expert_NK)
//   plan      = moe_plan(expert_NK, E, capacity)
//   xs_AD     = moe_permute(x_ND, plan)                       ┐ step 1: local permutation
//   ys_AD     = grouped SwiGLU over plan's groups             │ (expert parallelism inserts an
//   y_ND      = moe_combine(ys_AD, w_NK, plan)                ┘ all-to-all pair around the experts)
//   aux       = moe_aux_loss(scores_NE, plan, kind, coef)
//
// Legend: N tokens, D width, E experts, K top_k, A kept assignments (permuted rows).
#pragma once
#include <cstdint>
#include <string>

#include "autograd/variable.h"

namespace hylo {

enum class RouterKind { softmax, sigmoid };
RouterKind router_kind(const std::string& name);  // "softmax" | "sigmoid"

// Where every assignment goes. Index tensors are int32 on the CPU; what a forward produced is
// kept by the backward closures (the plan is small: O(N K + E)).
struct MoePlan {
  int num_tokens = 0, num_experts = 0, top_k = 0;
  int64_t capacity = 0;  // 0 = dropless
  int64_t dropped = 0;   // assignments over capacity (they contribute zero)
  Tensor expert_NK;      // chosen experts, best first
  Tensor routed_E;       // assignments chosen per expert, before capacity (the load)
  Tensor kept_E;         // rows per expert after capacity (group sizes)
  Tensor offsets_E1;     // E+1 prefix sums of kept_E: group e is rows [offsets[e], offsets[e+1])
  Tensor token_A;        // source token of each permuted row
  Tensor row_NK;         // permuted row of each assignment, -1 when dropped
  int64_t rows() const { return int64_t(num_tokens) * top_k - dropped; }
};

// ceil(factor * N * K / E) assignments per expert, or 0 (dropless) when factor <= 0.
int64_t moe_capacity(double factor, int64_t num_tokens, int top_k, int num_experts);

// logits (N, E) -> softmax over E, or elementwise sigmoid.
Var moe_router_scores(const Var& logits_NE, RouterKind kind);
// Top-k experts per row of scores + bias_E (f32, may be undefined), ties to the lower index: (N, K) int32.
Tensor moe_topk(const Tensor& scores_NE, const Tensor& bias_E, int top_k);
// Selected scores renormalised to sum to one per token: (N, K).
Var moe_gate_weights(const Var& scores_NE, const Tensor& expert_NK);
MoePlan moe_plan(const Tensor& expert_NK, int num_experts, int64_t capacity);
// x (N, D) -> (A, D) grouped by expert, then token, then slot.
Var moe_permute(const Var& x_ND, const MoePlan& plan);
// Per-expert rows of x (A, I) times w[e]^T for w (E, O, I) -> (A, O). Experts with no rows are skipped.
Var moe_grouped_linear(const Var& x_AI, const Var& w_EOI, const MoePlan& plan);
// Expert outputs (A, D) weighted by w (N, K) and summed per token -> (N, D).
Var moe_combine(const Var& ys_AD, const Var& w_NK, const MoePlan& plan);
// coef * E * Σ_i f_i P_i as a (1) tensor; see cpu::aux_loss_forward for f and P.
Var moe_aux_loss(const Var& scores_NE, const MoePlan& plan, RouterKind kind, double coef);

}  // namespace hylo
