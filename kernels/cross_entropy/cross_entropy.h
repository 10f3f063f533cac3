// Fused softmax cross-entropy on the GPU (oracle: src/ops/cpu/cross_entropy.h).
// Legend: N rows (tokens), V stored vocabulary columns (padded, e.g. 50304), V_valid real tokens
// (e.g. 50257; columns >= V_valid are excluded from the softmax and get zero gradient).
// bf16 logits, int32 targets (-1 = ignored row), fp32 loss/LSE and arithmetic.
//
//   cross_entropy_fused: forward and backward in one kernel (one read of the logits from HBM, the
//   second from L2):
//     lse_N = logsumexp(logits[n, :V_valid]); loss_N = lse - logits[n, target] (0 for ignored rows);
//     logits_NV is OVERWRITTEN by dlogits = (softmax (1 + 2 z_loss lse) - onehot) * scale, in
//     place, so no second (N, V) buffer exists; zero for padded columns and ignored rows. scale =
//     dloss / number of non-ignored targets for a mean; z_loss: the coefficient of the z-loss
//     z_loss * lse^2 added per row (0: plain cross-entropy).
// Targets outside [-1, V_valid) are not checked on the device: the data loader guarantees them.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace hylo {
struct bf16;
}

namespace hylo::cuda {

void cross_entropy_fused(int N, int V, int V_valid, bf16* logits_NV, const int32_t* targets_N, float scale,
                         float z_loss, float* loss_N, float* lse_N, cudaStream_t stream);

}  // namespace hylo::cuda
