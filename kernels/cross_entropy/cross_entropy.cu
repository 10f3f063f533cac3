// Fused cross-entropy: one block per row. The forward half keeps a running (max, sum of exp) per
// thread (online softmax), merges the pairs across the block, and writes lse and loss; the backward
// half then turns each logit into its gradient in place.
#include <cfloat>

#include "kernels/common/common.cuh"
#include "kernels/cross_entropy/cross_entropy.h"

namespace hylo::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;

// (m, s) represents Σ exp(z) = s * exp(m); merging rescales both sums to the larger max.
struct MaxSum {
  float m = -INFINITY, s = 0.f;
};

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return a;  // both empty (exp(-inf - -inf) would be NaN)
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

// Log-sum-exp of row `z` over columns < V_valid, returned to every thread of the block.
template <int VEC>
__device__ float row_lse(const nv_bf16* z, int V, int V_valid) {
  __shared__ float warp_max_W[kWarps], warp_sum_W[kWarps];  // plain arrays: no constructors in shared
  MaxSum acc;
  for (int v = threadIdx.x * VEC; v < V; v += blockDim.x * VEC) {
    float x[VEC];
    load_floats<VEC>(z + v, x);
    float local_max = -INFINITY;
#pragma unroll
    for (int k = 0; k < VEC; ++k)
      if (v + k < V_valid) local_max = fmaxf(local_max, x[k]);
    if (local_max == -INFINITY) continue;  // only padding in this pack
    float m = fmaxf(acc.m, local_max);
    float s = acc.s * expf(acc.m - m);  // acc.m = -inf gives exp(-inf) = 0 with acc.s = 0
#pragma unroll
    for (int k = 0; k < VEC; ++k)
      if (v + k < V_valid) s += expf(x[k] - m);
    acc = {m, s};
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    MaxSum other{__shfl_xor_sync(0xffffffffu, acc.m, offset), __shfl_xor_sync(0xffffffffu, acc.s, offset)};
    acc = merge(acc, other);
  }
  int warp = threadIdx.x >> 5;
  if ((threadIdx.x & 31) == 0) {
    warp_max_W[warp] = acc.m;
    warp_sum_W[warp] = acc.s;
  }
  __syncthreads();
  MaxSum total;
  for (int w = 0; w < kWarps; ++w) total = merge(total, {warp_max_W[w], warp_sum_W[w]});  // same order everywhere
  return total.m + logf(total.s);
}

template <int VEC>
__device__ void row_backward(nv_bf16* z, int V, int V_valid, int32_t target, float lse, float scale, float z_loss) {
  const float p_factor = 1.f + 2.f * z_loss * lse;  // d(z_loss lse^2) / d logit = 2 z_loss lse p
  for (int v = threadIdx.x * VEC; v < V; v += blockDim.x * VEC) {
    float x[VEC];
    load_floats<VEC>(z + v, x);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      int col = v + k;
      float p = expf(x[k] - lse);
      x[k] = (target < 0 || col >= V_valid) ? 0.f : (p * p_factor - (col == target ? 1.f : 0.f)) * scale;
    }
    store_floats<VEC>(z + v, x);
  }
}

template <int VEC>
__global__ void __launch_bounds__(kThreads) cross_entropy_fused_kernel(int V, int V_valid, nv_bf16* logits_NV,
                                                                       const int32_t* targets_N, float scale,
                                                                       float z_loss, float* loss_N, float* lse_N) {
  int64_t n = blockIdx.x;
  nv_bf16* z = logits_NV + n * V;
  int32_t target = targets_N[n];
  float lse = row_lse<VEC>(z, V, V_valid);
  // The target logit must be read before any thread overwrites it with its gradient.
  float target_logit = target < 0 ? 0.f : __bfloat162float(z[target]);
  __syncthreads();
  if (threadIdx.x == 0) {
    lse_N[n] = lse;
    loss_N[n] = target < 0 ? 0.f : lse - target_logit;
  }
  row_backward<VEC>(z, V, V_valid, target, lse, scale, z_loss);
}

bool vectorizable(int V, const void* logits) { return V % 8 == 0 && aligned16(logits); }

void check_shape(const char* op, int N, int V, int V_valid) {
  HYLO_CUDA_REQUIRE(N >= 0 && V > 0 && V_valid > 0 && V_valid <= V, "%s: bad shape N=%d V=%d V_valid=%d", op, N, V,
                    V_valid);
}

}  // namespace

void cross_entropy_fused(int N, int V, int V_valid, bf16* logits_NV, const int32_t* targets_N, float scale,
                         float z_loss, float* loss_N, float* lse_N, cudaStream_t stream) {
  check_shape("cross_entropy_fused", N, V, V_valid);
  if (N == 0) return;
  if (vectorizable(V, logits_NV))
    cross_entropy_fused_kernel<8><<<N, kThreads, 0, stream>>>(V, V_valid, as_nv(logits_NV), targets_N, scale, z_loss,
                                                              loss_N, lse_N);
  else
    cross_entropy_fused_kernel<1><<<N, kThreads, 0, stream>>>(V, V_valid, as_nv(logits_NV), targets_N, scale, z_loss,
                                                              loss_N, lse_N);
  HYLO_CUDA_LAUNCH_CHECK("cross_entropy_fused_kernel");
}

}  // namespace hylo::cuda
