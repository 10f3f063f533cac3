// CUDA attention (SPEC §1 masks), bf16 in and out, fp32 softmax and LSE. Flash-style tiled kernels
// on tensor cores: warpgroup MMA (wgmma) in sm_90a builds, mma.sync otherwise; head dims 64 and
// 128; MHA and GQA; any T. Plain C++ declarations so
// that g++-compiled callers (src/ops) can include this header.
//
// Shape legend: B batch, T sequence, Hq query heads, Hkv key/value heads, D head dim.
//   q_BTHD (B, T, Hq, D), k/v (B, T, Hkv, D), out (B, T, Hq, D), lse_BHT (B, Hq, T) fp32,
//   natural log-sum-exp of the scaled scores (scale 1/sqrt(D)). All row-major and contiguous.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

#include "attn/shape.h"

namespace hylo {
struct bf16;  // core/dtype.h; only pointers here, so .cu files need not include fmt (core/error.h)
}

namespace hylo::cuda {

// True when the kernels handle this head dim (64 or 128).
bool attention_supports_head_dim(int D);

// out, lse <- attention(q, k, v). Only key tiles in [lowest_key(first query), last query] are read.
void attention_forward(const AttnShape& shape, const AttnMask& mask, const bf16* q, const bf16* k,
                       const bf16* v, bf16* out, float* lse, cudaStream_t stream);

// Scratch the backward needs: what its dQ pass hands its dK/dV pass, lse * log2(e) and
// D_i = rowsum(dout * out) per query row, fp32, 2 x (B, Hq) rows of T rounded up to a multiple of 4.
size_t attention_backward_workspace_bytes(const AttnShape& shape);

// dq, dk, dv <- gradients of sum(out * dout) (overwritten). out and lse are the forward's.
// Deterministic: no atomics; dk/dv of a kv head sum its query heads in a fixed order.
void attention_backward(const AttnShape& shape, const AttnMask& mask, const bf16* q, const bf16* k,
                        const bf16* v, const bf16* out, const float* lse, const bf16* dout, bf16* dq,
                        bf16* dk, bf16* dv, void* workspace, cudaStream_t stream);

}  // namespace hylo::cuda
