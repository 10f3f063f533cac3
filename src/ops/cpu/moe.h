// CPU reference mixture-of-experts pieces (the oracle for kernels/moe).
// Legend: N tokens, D model width, E experts, K experts per token (top_k), A kept assignments
// (rows of the permuted buffer, A <= N*K; A == N*K when dropless), I/O input/output width of a
// grouped GEMM. Row-major, contiguous. Index buffers are int32.
//
// Routing (SPEC §2):
//   scores_NE   = softmax(logits) over E, or sigmoid(logits) elementwise
//   expert_NK   = top-K of (scores + bias_E) per row, best first, ties to the lower expert index;
//                 the bias (aux-loss-free balancing) steers selection only, never the weights
//   w_NK        = scores[n, expert_NK[n,k]] / Σ_j scores[n, expert_NK[n,j]]   (renormalised)
//
// Dispatch is two steps so that expert parallelism can swap an all-to-all in between without
// touching either: (1) plan + permute turn token-major assignments into per-expert contiguous row
// groups with counts (exactly what an all-to-all sends, one group per destination expert);
// (2) combine reads the expert outputs back by row and sums them per token with the gate weights.
// Row order is deterministic: by expert, then token index, then slot.
//
// Capacity: with cap > 0 each expert keeps its first `cap` assignments in (token, slot) order;
// later ones are dropped (row_NK = -1) and contribute zero to the combine.
#pragma once
#include <cstdint>

namespace hylo::cpu {

template <class T>
void router_scores_forward(int N, int E, bool sigmoid, const T* logits_NE, T* scores_NE);
// dlogits_NE OVERWRITTEN; it may alias dscores_NE.
template <class T>
void router_scores_backward(int N, int E, bool sigmoid, const T* scores_NE, const T* dscores_NE, T* dlogits_NE);

// bias_E may be null (no bias).
template <class T>
void router_topk(int N, int E, int K, const T* scores_NE, const float* bias_E, int32_t* expert_NK);

template <class T>
void gate_weights_forward(int N, int E, int K, const T* scores_NE, const int32_t* expert_NK, T* w_NK);
// dscores_NE OVERWRITTEN (zero outside the selected experts).
template <class T>
void gate_weights_backward(int N, int E, int K, const T* scores_NE, const int32_t* expert_NK, const T* w_NK,
                           const T* dw_NK, T* dscores_NE);

// Fills routed_E (assignments chosen per expert, before capacity), kept_E (after), offsets_E1
// (E+1 prefix sums of kept), token_A (source token of each permuted row; sized N*K, first A used)
// and row_NK (permuted row of each assignment or -1). capacity <= 0 means dropless.
// Returns the number of dropped assignments.
int64_t plan_dispatch(int N, int E, int K, const int32_t* expert_NK, int64_t capacity, int32_t* routed_E,
                      int32_t* kept_E, int32_t* offsets_E1, int32_t* token_A, int32_t* row_NK);

// xs_AD[a] = x_ND[token_A[a]]
template <class T>
void permute_forward(int A, int D, const int32_t* token_A, const T* x_ND, T* xs_AD);
// dx_ND OVERWRITTEN: dx[n] = Σ over rows a of token n of dxs[a] (summed in row order).
template <class T>
void permute_backward(int N, int A, int D, const int32_t* token_A, const T* dxs_AD, T* dx_ND);

// y_ND[n] = Σ_k w_NK[n,k] * ys_AD[row_NK[n,k]]  over kept assignments (dropped add nothing).
template <class T>
void combine_forward(int N, int K, int D, const int32_t* row_NK, const T* w_NK, const T* ys_AD, T* y_ND);
// dys_AD (A rows) and dw_NK OVERWRITTEN: dys[row] = w * dy[n];  dw[n,k] = <dy[n], ys[row]> (0 if dropped).
template <class T>
void combine_backward(int N, int K, int D, int A, const int32_t* row_NK, const T* w_NK, const T* ys_AD,
                      const T* dy_ND, T* dys_AD, T* dw_NK);

// Grouped GEMM over variable-size row groups: rows [offsets[e], offsets[e+1]) of x_AI times
// w_EOI[e]^T -> the same rows of y_AO. Empty groups are skipped (their weight gets zero grad).
template <class T>
void grouped_linear_forward(int E, int I, int O, const int32_t* offsets_E1, const T* x_AI, const T* w_EOI, T* y_AO);
// dx_AI OVERWRITTEN (skipped when null); dw_EOI overwritten, or added to when accumulate_dw.
template <class T>
void grouped_linear_backward(int E, int I, int O, const int32_t* offsets_E1, const T* x_AI, const T* w_EOI,
                             const T* dy_AO, T* dx_AI, T* dw_EOI, bool accumulate_dw);

// Switch load-balancing loss  coef * E * Σ_i f_i P_i  with f_i = routed_i / (N K) (fraction of
// assignments chosen for expert i, a constant) and P_i = mean_n q[n,i], q = scores for softmax,
// q = scores / Σ_e scores (a distribution, DeepSeek-V3 style) for sigmoid (`normalize`).
template <class T>
double aux_loss_forward(int N, int E, int K, bool normalize, const T* scores_NE, const int32_t* routed_E, double coef);
// dscores_NE OVERWRITTEN with dloss * d(aux)/d(scores).
template <class T>
void aux_loss_backward(int N, int E, int K, bool normalize, const T* scores_NE, const int32_t* routed_E, double coef,
                       double dloss, T* dscores_NE);

}  // namespace hylo::cpu
