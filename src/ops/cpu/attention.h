// Masked causal attention (SPEC §1), CPU reference: the function every CUDA kernel is checked
// against, and the attention of CPU training.
//
// Shape legend: B batch, T sequence, Hq query heads, Hkv key/value heads (Hq % Hkv == 0; query
// head h reads kv head h / (Hq / Hkv)), D head dim.
//   q_BTHD (B, T, Hq, D), k_BTHD / v_BTHD (B, T, Hkv, D), out_BTHD (B, T, Hq, D),
//   lse_BHT (B, Hq, T): natural log-sum-exp of the scaled scores of each query row.
// Scale is 1/sqrt(D). All row-major and contiguous.
#pragma once
#include <cstdint>

#include "attn/shape.h"

namespace hylo {

namespace cpu {

// out, lse <- attention(q, k, v). Visits only keys in [MaskBounds(mask).lowest_key(t), t].
template <class T>
void attention_forward(const AttnShape& shape, const AttnMask& mask, const T* q, const T* k, const T* v,
                       T* out, T* lse);

// dq, dk, dv <- gradients of sum(out * dout) (overwritten, not accumulated). out and lse are the
// forward's; backward uses D_i = rowsum(dout * out) so no softmax row is renormalised.
template <class T>
void attention_backward(const AttnShape& shape, const AttnMask& mask, const T* q, const T* k, const T* v,
                        const T* out, const T* lse, const T* dout, T* dq, T* dk, T* dv);

}  // namespace cpu
}  // namespace hylo
