// The forward's parameters, shared by its two kernel families and its host entry (attention_fwd.cu).
//
// Attention forward: one thread block per (query tile, head, batch), FlashAttention-2 style: the
// block keeps the online-softmax state (running max, partial sum) and the output accumulator of
// its rows in registers while K and V tiles stream through swizzled shared memory. Tile skipping:
// a query tile visits only key tiles in [lowest_key(first query), last query], and the mask is
// evaluated only on tiles where some pairs are disallowed.
//   attention_fwd_wgmma.cu (sm_90a): one warpgroup per 64 rows, wgmma products, TMA tile copies.
//   attention_fwd_mma.cu (other targets): warps of 16 * kMTiles rows with Q fragments in registers,
//   mma.sync products, a two-stage cp.async pipeline; a warp skips the math of a tile where none of
//   its pairs is allowed.
//
// Legend: BM query rows per block, BN keys per tile, D head dim; q_BTHD etc. as in attention.h.
#pragma once
#include <cuda_bf16.h>

#include "kernels/attention/attention_params.cuh"

namespace hylo::cuda::attn {

struct FwdParams : AttnInputs {
  __nv_bfloat16* out;
  float* lse;
#if HYLO_WGMMA
  CUtensorMap tm_out;
#endif
};

// Launches the forward; defined, for D = 64 and 128, by the kernel family the build targets.
template <int D>
void launch_forward(const FwdParams& p, cudaStream_t stream);

}  // namespace hylo::cuda::attn
