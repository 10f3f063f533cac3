// Greedy tokens on the device (decode.h): one block per row of the logits.
#include <climits>

#include "kernels/common/common.cuh"
#include "kernels/decode/decode.h"

namespace hylo::cuda {
namespace {

constexpr int kThreads = 256;

// (value, index) of the better of two candidates: the larger value, ties to the lower index; an
// index of INT_MAX is no candidate (NaN values never become one).
__device__ __forceinline__ void keep_better(float& value, int& index, float other_value, int other_index) {
  if (other_value > value || (other_value == value && other_index < index)) value = other_value, index = other_index;
}

__global__ void __launch_bounds__(kThreads)
    greedy_kernel(const nv_bf16* logits_BV, int V, int n_valid, int32_t* ids_B) {
  const nv_bf16* row = logits_BV + int64_t(blockIdx.x) * V;
  float value = -INFINITY;
  int index = INT_MAX;
  // Each thread walks its elements in increasing order; keep_better also admits -inf, so that a
  // row of -inf gives its first index, as the CPU reference does.
  for (int i = threadIdx.x; i < n_valid; i += kThreads) keep_better(value, index, __bfloat162float(row[i]), i);
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, value, offset);
    const int j = __shfl_xor_sync(0xffffffffu, index, offset);
    keep_better(value, index, v, j);
  }
  __shared__ float warp_value[kThreads / 32];
  __shared__ int warp_index[kThreads / 32];
  if (threadIdx.x % 32 == 0) warp_value[threadIdx.x / 32] = value, warp_index[threadIdx.x / 32] = index;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) keep_better(value, index, warp_value[w], warp_index[w]);
    ids_B[blockIdx.x] = index == INT_MAX ? 0 : index;  // a row of NaN: 0, as the CPU reference
  }
}

}  // namespace

void greedy_tokens(const bf16* logits_BV, int B, int V, int n_valid, int32_t* ids_B, cudaStream_t stream) {
  if (B == 0) return;
  greedy_kernel<<<unsigned(B), kThreads, 0, stream>>>(as_nv(logits_BV), V, n_valid, ids_B);
  HYLO_CUDA_LAUNCH_CHECK("greedy_kernel");
}

}  // namespace hylo::cuda
