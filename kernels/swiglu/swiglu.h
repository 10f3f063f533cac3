// SwiGLU on the GPU (oracle: src/ops/cpu/swiglu.h). Legend: N rows, F hidden width.
// ab_N2F row n = [gate a (F columns) | up b (F columns)], the output of one fused matmul.
//   swiglu_forward : out_NF = silu(a) * b
//   swiglu_backward: dab_N2F OVERWRITTEN with [dout * b * silu'(a) | dout * silu(a)]; may alias ab_N2F.
// bf16 in and out, fp32 arithmetic.
#pragma once
#include <cuda_runtime_api.h>

namespace hylo {
struct bf16;
}

namespace hylo::cuda {

void swiglu_forward(int N, int F, const bf16* ab_N2F, bf16* out_NF, cudaStream_t stream);

void swiglu_backward(int N, int F, const bf16* ab_N2F, const bf16* dout_NF, bf16* dab_N2F, cudaStream_t stream);

}  // namespace hylo::cuda
