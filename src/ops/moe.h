// Mixture-of-experts ops (SPEC §2). Each is one entry with shape checks, the CPU reference
// (src/ops/cpu/moe.h), the CUDA kernels (kernels/moe) and a hand-written backward.
//
// Dtypes: on the CPU everything is f32 (f64 for gradient checks). On CUDA token rows (x, permuted
// rows, expert weights and outputs) are bf16 while the router side (logits, scores, gate weights,
// aux loss) is f32; index tensors are int32 on the device of the data.
//
// A MoE FFN is composed from them as
//   logits_NE = moe_router_logits(x_ND, router_ED)            (fp32 on every backend)
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

// Where every assignment goes; what a forward produced is kept by the backward closures (the plan
// is small: O(N K + E)). The per-assignment indices live on the device of expert_NK. The per-expert
// counts are always on the host, because the host genuinely needs them (grouped-GEMM sizes, load
// metrics): a CUDA plan is built on the device and reads them back in ONE small copy per MoE layer
// forward (the only host sync of the layer), which every later op and the whole backward reuse.
struct MoePlan {
  int num_tokens = 0, num_experts = 0, top_k = 0;
  int64_t capacity = 0;  // 0 = dropless
  int64_t dropped = 0;   // assignments over capacity (they contribute zero)
  Tensor expert_NK;      // chosen experts, best first
  Tensor routed_E;       // host: assignments chosen per expert, before capacity (the load)
  Tensor kept_E;         // host: rows per expert after capacity (group sizes)
  Tensor offsets_E1;     // host: E+1 prefix sums of kept_E: group e is rows [offsets[e], offsets[e+1])
  Tensor counts_dev;     // CUDA plans: [offsets (E+1) | routed (E) | dropped | bad] on the device (kernels/moe)
  Tensor token_A;        // source token of each permuted row
  Tensor row_NK;         // permuted row of each assignment, -1 when dropped
  int64_t rows() const { return int64_t(num_tokens) * top_k - dropped; }
};

// ceil(factor * N * K / E) assignments per expert, or 0 (dropless) when factor <= 0.
int64_t moe_capacity(double factor, int64_t num_tokens, int top_k, int num_experts);

// x (N, D) @ router (E, D)^T -> logits (N, E): linear() on the CPU; on CUDA bf16 operands with an
// fp32 product (the backward casts d(logits) to bf16 for its two GEMMs, as every other gradient).
Var moe_router_logits(const Var& x_ND, const Var& router_ED);
// logits (N, E) -> softmax over E, or elementwise sigmoid.
Var moe_router_scores(const Var& logits_NE, RouterKind kind);
// Top-k experts per row of scores + bias_E (f32 on the scores' device, may be undefined), ties to
// the lower index: (N, K) int32.
Tensor moe_topk(const Tensor& scores_NE, const Tensor& bias_E, int top_k);
// Selected scores renormalised to sum to one per token: (N, K).
Var moe_gate_weights(const Var& scores_NE, const Tensor& expert_NK);
MoePlan moe_plan(const Tensor& expert_NK, int num_experts, int64_t capacity);
// x (N, D) -> (A, D) grouped by expert, then token, then slot.
Var moe_permute(const Var& x_ND, const MoePlan& plan);
// Per-expert rows of x (A, I) times w[e]^T for w (E, O, I) -> (A, O). Experts with no rows are skipped.
// CUDA: one cublasGemmGroupedBatchedEx call for all experts (kernels/moe/grouped_gemm.h).
Var moe_grouped_linear(const Var& x_AI, const Var& w_EOI, const MoePlan& plan);
// Expert outputs (A, D) weighted by w (N, K) and summed per token -> (N, D).
Var moe_combine(const Var& ys_AD, const Var& w_NK, const MoePlan& plan);
// coef * E * Σ_i f_i P_i as a (1) tensor; see cpu::aux_loss_forward for f and P.
Var moe_aux_loss(const Var& scores_NE, const MoePlan& plan, RouterKind kind, double coef);

}  // namespace hylo
