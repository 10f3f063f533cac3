// CPU reference fused softmax cross-entropy (the oracle for kernels/cross_entropy).
// Legend: N rows (tokens), V stored vocabulary columns (padded, e.g. 50304), V_valid real tokens
// (e.g. 50257): columns [V_valid, V) are padding, excluded from the softmax and given zero gradient.
//
//   forward : lse_N[n]  = log Σ_{v < V_valid} exp(logits[n, v])
//             loss_N[n] = lse_N[n] - logits[n, target[n]]     (0 when target[n] == -1, ignored)
//   backward: logits_NV is OVERWRITTEN by its gradient, in place:
//             dlogits[n, v] = (softmax[n, v] (1 + 2 z_loss lse_N[n]) - [v == target[n]]) * scale
//             for v < V_valid; 0 for padded columns and for whole ignored rows.
//             scale = dloss / (number of non-ignored targets) for a mean loss; z_loss: the
//             coefficient of the z-loss z_loss * lse^2 per row (PaLM), 0 for none.
// Targets must be -1 or in [0, V_valid); anything else throws.
#pragma once
#include <cstdint>

namespace hylo::cpu {

constexpr int32_t kIgnoreIndex = -1;

template <class T>
void cross_entropy_forward(int N, int V, int V_valid, const T* logits_NV, const int32_t* targets_N, T* loss_N,
                           T* lse_N);

template <class T>
void cross_entropy_backward(int N, int V, int V_valid, const int32_t* targets_N, const T* lse_N, T scale,
                            T z_loss, T* logits_NV);

}  // namespace hylo::cpu
