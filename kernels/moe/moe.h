// Mixture-of-experts kernels on the GPU (oracle: src/ops/cpu/moe.h; same legend, same row order).
// Legend: N tokens, D width, E experts, K top_k, A kept assignments (permuted rows).
// Router tensors (logits, scores, gate weights, aux loss) are fp32 (SPEC §3); token rows are bf16
// with fp32 arithmetic; indices are int32. Nothing here uses atomics whose order reaches a result:
// every float sum has a fixed order, so a run repeats bit for bit.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace hylo {
struct bf16;
}

namespace hylo::cuda {

// Softmax over E (or elementwise sigmoid) per row. dlogits_NE may alias dscores_NE.
void router_scores_forward(int N, int E, bool sigmoid, const float* logits_NE, float* scores_NE, cudaStream_t stream);
void router_scores_backward(int N, int E, bool sigmoid, const float* scores_NE, const float* dscores_NE,
                            float* dlogits_NE, cudaStream_t stream);

// Top-K of scores + bias_E (bias may be null) per row, best first, ties to the lower index; the
// comparison is made in fp64 like the CPU's, so both pick the same experts from the same scores.
// E <= 2048.
void router_topk(int N, int E, int K, const float* scores_NE, const float* bias_E, int32_t* expert_NK,
                 cudaStream_t stream);

void gate_weights_forward(int N, int E, int K, const float* scores_NE, const int32_t* expert_NK, float* w_NK,
                          cudaStream_t stream);
// dscores_NE OVERWRITTEN (zero outside the selected experts).
void gate_weights_backward(int N, int E, int K, const float* scores_NE, const int32_t* expert_NK, const float* w_NK,
                           const float* dw_NK, float* dscores_NE, cudaStream_t stream);

// The dispatch plan, built on the device: chunks of 1024 assignments count per expert, one block
// scans the chunk counts, and each chunk then scatters its assignments in (token, slot) order, so
// rows come out grouped by expert, then token, then slot, exactly as cpu::plan_dispatch orders
// them, and capacity keeps each expert's first `capacity` assignments (capacity <= 0: dropless).
// Writes token_A (sized N*K, first A used), row_NK (-1 when dropped) and
//   counts = [offsets (E+1) | routed (E) | dropped (1) | bad (1)]   (plan_counts_size(E) ints)
// where `bad` counts expert indices outside [0, E) (such assignments are dropped; the caller
// reads the counts back and rejects the plan). E <= 8192.
constexpr int plan_counts_size(int E) { return 2 * E + 3; }
void plan_dispatch(int N, int E, int K, const int32_t* expert_NK, int64_t capacity, int32_t* counts,
                   int32_t* token_A, int32_t* row_NK, cudaStream_t stream);

// xs_AD[a] = x_ND[token_A[a]]
void permute_forward(int A, int D, const int32_t* token_A, const bf16* x_ND, bf16* xs_AD, cudaStream_t stream);
// dx_ND OVERWRITTEN: dx[n] = Σ_k dxs[row_NK[n,k]] over kept slots, one thread per token and column
// chunk (a gather: no two threads write one element).
void permute_backward(int N, int K, int D, const int32_t* row_NK, const bf16* dxs_AD, bf16* dx_ND,
                      cudaStream_t stream);

// y_ND[n] = Σ_k w_NK[n,k] ys_AD[row_NK[n,k]] over kept slots.
void combine_forward(int N, int K, int D, const int32_t* row_NK, const float* w_NK, const bf16* ys_AD, bf16* y_ND,
                     cudaStream_t stream);
// dys_AD and dw_NK OVERWRITTEN: dys[row] = w dy[n]; dw[n,k] = <dy[n], ys[row]> (0 when dropped).
void combine_backward(int N, int K, int D, const int32_t* row_NK, const float* w_NK, const bf16* ys_AD,
                      const bf16* dy_ND, bf16* dys_AD, float* dw_NK, cudaStream_t stream);

// Switch aux loss coef * E * Σ_i f_i P_i into loss_1 (see cpu::aux_loss_forward); routed_E is the
// plan's routed count (device).
void aux_loss_forward(int N, int E, int K, bool normalize, const float* scores_NE, const int32_t* routed_E,
                      double coef, float* loss_1, cudaStream_t stream);
// dscores_NE OVERWRITTEN with dloss * d(aux)/d(scores); dloss_1 is read on the device (no sync).
void aux_loss_backward(int N, int E, int K, bool normalize, const float* scores_NE, const int32_t* routed_E,
                       double coef, const float* dloss_1, float* dscores_NE, cudaStream_t stream);

}  // namespace hylo::cuda
