// RMSNorm on the GPU (oracle: src/ops/cpu/rmsnorm.h). Legend: N rows, D width (D <= 8192).
// bf16 x/w/y/gradients; statistics and all sums in fp32.
//
//   rmsnorm_forward : rstd_N = 1/sqrt(mean(x²) + eps) (fp32, saved for backward); y = x * rstd * w
//   rmsnorm_backward: dx_ND OVERWRITTEN, or ACCUMULATED with accumulate_dx (the residual stream's
//                     gradient, saving a separate add); dx may alias dy. dw_D ACCUMULATED
//                     (bf16 += fp32 sum).
//
// w_D == nullptr means unit weight (then dw_D must be nullptr); dw_D == nullptr skips it.
// The weight gradient is deterministic: each of G = min(N, 1024) blocks owns a fixed range of rows
// and writes fp32 per-column partial sums, which a second kernel adds in a fixed order. G does not
// depend on the GPU, so the summation order is the same on every card.
#pragma once
#include <cuda_runtime_api.h>

namespace hylo {
struct bf16;
}

namespace hylo::cuda {

void rmsnorm_forward(int N, int D, float eps, const bf16* x_ND, const bf16* w_D, bf16* y_ND, float* rstd_N,
                     cudaStream_t stream);

void rmsnorm_backward(int N, int D, const bf16* x_ND, const bf16* w_D, const float* rstd_N, const bf16* dy_ND,
                      bf16* dx_ND, bool accumulate_dx, bf16* dw_D, cudaStream_t stream);

}  // namespace hylo::cuda
