// RMSNorm forward and backward, one warp per row; the backward's blocks own fixed chunks of rows
// and write deterministic fp32 partial sums for the weight gradient.
#include "core/cuda/allocator.h"
#include "kernels/common/common.cuh"
#include "kernels/rmsnorm/rmsnorm.h"

namespace hylo::cuda {
namespace {

constexpr int kForwardThreads = 256;  // 8 rows per block, one per warp
constexpr int kBackwardWarps = 4;
constexpr int kMaxBackwardBlocks = 1024;
constexpr int kMaxWidth = 8192;  // the per-warp dw sums: 4 x 8192 fp32 = 128 KiB of shared memory

template <int VEC>
__device__ __forceinline__ void load_weight(const nv_bf16* w_D, int d, float (&out)[VEC]) {
  if (w_D) {
    load_floats<VEC>(w_D + d, out);
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k) out[k] = 1.f;
  }
}

template <int VEC>
__global__ void rmsnorm_forward_kernel(int N, int D, float eps, const nv_bf16* x_ND, const nv_bf16* w_D,
                                       nv_bf16* y_ND, float* rstd_N) {
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x & 31;
  if (row >= N) return;
  const nv_bf16* x = x_ND + int64_t(row) * D;
  nv_bf16* y = y_ND + int64_t(row) * D;
  float ss = 0.f;
  for (int d = lane * VEC; d < D; d += 32 * VEC) {
    float v[VEC];
    load_floats<VEC>(x + d, v);
#pragma unroll
    for (int k = 0; k < VEC; ++k) ss += v[k] * v[k];
  }
  ss = warp_sum(ss);
  float rstd = rsqrtf(ss / float(D) + eps);
  if (lane == 0) rstd_N[row] = rstd;
  for (int d = lane * VEC; d < D; d += 32 * VEC) {  // second read of the row hits L1
    float v[VEC], w[VEC];
    load_floats<VEC>(x + d, v);
    load_weight<VEC>(w_D, d, w);
#pragma unroll
    for (int k = 0; k < VEC; ++k) v[k] = v[k] * rstd * w[k];
    store_floats<VEC>(y + d, v);
  }
}

// Where column d of a warp's dw sums lives: lane l owns the VEC columns from VEC * (l + 32 j), so
// storing them VEC-strided ("column d % VEC, then d / VEC") puts the 32 lanes' k-th columns in 32
// consecutive words, free of bank conflicts.
template <int VEC>
__device__ __forceinline__ int dw_slot(int d, int D) {
  return (d % VEC) * (D / VEC) + d / VEC;
}

// Block b handles rows [b * rows_per_block, ...); warp w of the block takes every kBackwardWarps-th
// of them, one row at a time, with no barrier per row (a block-wide reduction per row left the
// SM idle on barriers). Each warp sums its own dw columns in its slice of shared memory; at the
// end the slices are added in warp order, so the partial is deterministic. dw_partial_GD is null
// when no dw is wanted. With accumulate_dx, dx += the gradient (the residual stream's buffer).
template <int VEC>
__global__ void rmsnorm_backward_kernel(int N, int D, int rows_per_block, const nv_bf16* x_ND, const nv_bf16* w_D,
                                        const float* rstd_N, const nv_bf16* dy_ND, nv_bf16* dx_ND,
                                        bool accumulate_dx, float* dw_partial_GD) {
  extern __shared__ float dw_acc_WD[];  // (kBackwardWarps, D)
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const bool want_dw = dw_partial_GD != nullptr;
  float* dw_acc = dw_acc_WD + int64_t(warp) * D;
  if (want_dw)
    for (int d = lane; d < D; d += 32) dw_acc[d] = 0.f;

  const int row0 = blockIdx.x * rows_per_block, row1 = min(N, row0 + rows_per_block);
  for (int row = row0 + warp; row < row1; row += kBackwardWarps) {
    const nv_bf16* x = x_ND + int64_t(row) * D;
    const nv_bf16* dy = dy_ND + int64_t(row) * D;
    nv_bf16* dx = dx_ND + int64_t(row) * D;
    const float r = rstd_N[row];
    float dot = 0.f;  // Σ dy w x
    for (int d = lane * VEC; d < D; d += 32 * VEC) {
      float xv[VEC], gv[VEC], wv[VEC];
      load_floats<VEC>(x + d, xv);
      load_floats<VEC>(dy + d, gv);
      load_weight<VEC>(w_D, d, wv);
#pragma unroll
      for (int k = 0; k < VEC; ++k) dot += gv[k] * wv[k] * xv[k];
    }
    // The shuffle orders every lane's dy reads before any dx write (dx may alias dy).
    const float c = r * r * r * warp_sum(dot) / float(D);
    for (int d = lane * VEC; d < D; d += 32 * VEC) {  // second read of the row hits L1
      float xv[VEC], gv[VEC], wv[VEC], out[VEC], prior[VEC];
      load_floats<VEC>(x + d, xv);
      load_floats<VEC>(dy + d, gv);
      load_weight<VEC>(w_D, d, wv);
      if (accumulate_dx) load_floats<VEC>(dx + d, prior);
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        out[k] = r * gv[k] * wv[k] - c * xv[k] + (accumulate_dx ? prior[k] : 0.f);
        if (want_dw) dw_acc[dw_slot<VEC>(d + k, D)] += gv[k] * xv[k] * r;
      }
      store_floats<VEC>(dx + d, out);
    }
  }
  if (!want_dw) return;
  __syncthreads();
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float sum = 0.f;
#pragma unroll
    for (int w = 0; w < kBackwardWarps; ++w) sum += dw_acc_WD[int64_t(w) * D + dw_slot<VEC>(d, D)];
    dw_partial_GD[int64_t(blockIdx.x) * D + d] = sum;
  }
}

// dw[d] += Σ_g partial[g, d]: the deterministic second pass. A block covers 32 columns with
// kReduceSlices slices of blocks each (slice s sums g = s, s + kReduceSlices, ... in order), then
// the slices are added in slice order.
constexpr int kReduceSlices = 8;
__global__ void reduce_partials_kernel(int G, int D, const float* partial_GD, nv_bf16* dw_D) {
  __shared__ float slice_sums[kReduceSlices][32];
  const int col = threadIdx.x & 31, slice = threadIdx.x >> 5, d = blockIdx.x * 32 + col;
  float sum = 0.f;
  if (d < D)
    for (int g = slice; g < G; g += kReduceSlices) sum += partial_GD[int64_t(g) * D + d];
  slice_sums[slice][col] = sum;
  __syncthreads();
  if (slice != 0 || d >= D) return;
  float total = 0.f;
#pragma unroll
  for (int s = 0; s < kReduceSlices; ++s) total += slice_sums[s][col];
  dw_D[d] = __float2bfloat16_rn(__bfloat162float(dw_D[d]) + total);
}

}  // namespace

void rmsnorm_forward(int N, int D, float eps, const bf16* x_ND, const bf16* w_D, bf16* y_ND, float* rstd_N,
                     cudaStream_t stream) {
  HYLO_CUDA_REQUIRE(N >= 0 && D > 0, "rmsnorm_forward: bad shape N=%d D=%d", N, D);
  if (N == 0) return;
  int rows_per_block = kForwardThreads / 32;
  int blocks = int(ceil_div(N, rows_per_block));
  if (D % 8 == 0 && aligned16(x_ND) && aligned16(y_ND) && (!w_D || aligned16(w_D)))
    rmsnorm_forward_kernel<8><<<blocks, kForwardThreads, 0, stream>>>(N, D, eps, as_nv(x_ND), as_nv(w_D),
                                                                      as_nv(y_ND), rstd_N);
  else
    rmsnorm_forward_kernel<1><<<blocks, kForwardThreads, 0, stream>>>(N, D, eps, as_nv(x_ND), as_nv(w_D),
                                                                      as_nv(y_ND), rstd_N);
  HYLO_CUDA_LAUNCH_CHECK("rmsnorm_forward_kernel");
}

void rmsnorm_backward(int N, int D, const bf16* x_ND, const bf16* w_D, const float* rstd_N, const bf16* dy_ND,
                      bf16* dx_ND, bool accumulate_dx, bf16* dw_D, cudaStream_t stream) {
  HYLO_CUDA_REQUIRE(N >= 0 && D > 0 && D <= kMaxWidth, "rmsnorm_backward: bad shape N=%d D=%d (D <= %d)", N, D,
                    kMaxWidth);
  HYLO_CUDA_REQUIRE(w_D || !dw_D, "rmsnorm_backward: a weight gradient was requested without a weight");
  if (N == 0) return;
  int G = N < kMaxBackwardBlocks ? N : kMaxBackwardBlocks;
  int rows_per_block = int(ceil_div(N, G));
  G = int(ceil_div(N, rows_per_block));  // no empty blocks
  float* partial_GD = dw_D ? static_cast<float*>(stream_scratch(size_t(G) * D * sizeof(float), stream)) : nullptr;
  int smem = dw_D ? kBackwardWarps * D * int(sizeof(float)) : 0;
  bool vec = D % 8 == 0 && aligned16(x_ND) && aligned16(dy_ND) && aligned16(dx_ND) && (!w_D || aligned16(w_D));
  // Raise both variants' shared-memory limit to the widest row once; the attribute persists.
  static const bool reserved = [] {
    for (auto k : {rmsnorm_backward_kernel<8>, rmsnorm_backward_kernel<1>})
      HYLO_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           kBackwardWarps * kMaxWidth * int(sizeof(float))));
    return true;
  }();
  (void)reserved;
  auto kernel = vec ? rmsnorm_backward_kernel<8> : rmsnorm_backward_kernel<1>;
  kernel<<<G, kBackwardWarps * 32, smem, stream>>>(N, D, rows_per_block, as_nv(x_ND), as_nv(w_D), rstd_N,
                                                   as_nv(dy_ND), as_nv(dx_ND), accumulate_dx, partial_GD);
  HYLO_CUDA_LAUNCH_CHECK("rmsnorm_backward_kernel");
  if (dw_D) {
    reduce_partials_kernel<<<ceil_div(D, 32), kReduceSlices * 32, 0, stream>>>(G, D, partial_GD, as_nv(dw_D));
    HYLO_CUDA_LAUNCH_CHECK("reduce_partials_kernel");
  }
}

}  // namespace hylo::cuda
