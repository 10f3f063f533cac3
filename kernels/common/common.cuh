// Device helpers shared by hylo's CUDA kernels (not attention's, which has its own tile code):
// bf16 views of hylo::bf16 buffers, 16-byte packs, warp/block reductions, Philox and rounding.
//
// core/dtype.h cannot be included here (it pulls in fmt, which nvcc 13 does not compile), so
// hylo::bf16 is only declared; its layout (one uint16_t of raw bf16 bits) matches __nv_bfloat16.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda/check.h"

namespace hylo {
struct bf16;
}

namespace hylo::cuda {

using nv_bf16 = __nv_bfloat16;

inline const nv_bf16* as_nv(const hylo::bf16* p) { return reinterpret_cast<const nv_bf16*>(p); }
inline nv_bf16* as_nv(hylo::bf16* p) { return reinterpret_cast<nv_bf16*>(p); }

__host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// True when every pointer is 16-byte aligned, so 8 bf16 (or 4 floats) move in one access.
__host__ __device__ inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// log2(e): softmax kernels work in base 2 (one MUFU ex2 per exponential).
constexpr float kLog2e = 1.4426950408889634f;

// Eight bf16 in one 16-byte register group: the unit of every vectorised bf16 kernel.
struct alignas(16) Pack8 {
  nv_bf16 v[8];
};

__device__ __forceinline__ Pack8 load_pack(const nv_bf16* p) { return *reinterpret_cast<const Pack8*>(p); }
__device__ __forceinline__ void store_pack(nv_bf16* p, const Pack8& x) { *reinterpret_cast<Pack8*>(p) = x; }

// Loads VEC consecutive bf16 as floats: one 16-byte access when VEC is 8 (the pointer must then be
// 16-byte aligned), element by element otherwise.
template <int VEC>
__device__ __forceinline__ void load_floats(const nv_bf16* p, float (&out)[VEC]) {
  if constexpr (VEC == 8) {
    Pack8 pk = load_pack(p);
#pragma unroll
    for (int k = 0; k < 8; ++k) out[k] = __bfloat162float(pk.v[k]);
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k) out[k] = __bfloat162float(p[k]);
  }
}

template <int VEC>
__device__ __forceinline__ void store_floats(nv_bf16* p, const float (&in)[VEC]) {
  if constexpr (VEC == 8) {
    Pack8 pk;
#pragma unroll
    for (int k = 0; k < 8; ++k) pk.v[k] = __float2bfloat16_rn(in[k]);
    store_pack(p, pk);
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k) p[k] = __float2bfloat16_rn(in[k]);
  }
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

// Sum over the block, returned to every thread. `shared` holds >= 32 floats. The order of the
// additions depends only on blockDim, so the result is deterministic. Ends with a barrier, so it
// can be called again at once with the same buffer.
__device__ __forceinline__ float block_sum(float x, float* shared) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  x = warp_sum(x);
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  float total = 0.f;
  for (int w = 0; w < warps; ++w) total += shared[w];
  __syncthreads();
  return total;
}

// Philox4x32-10, bit-identical to hylo::philox4x32 in core/rng.h (copied math, device form).
__device__ __forceinline__ uint4 philox4x32(uint4 ctr, uint2 key) {
  constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0 = __umulhi(M0, ctr.x), lo0 = M0 * ctr.x;
    uint32_t hi1 = __umulhi(M1, ctr.z), lo1 = M1 * ctr.z;
    ctr = make_uint4(hi1 ^ ctr.y ^ key.x, lo1, hi0 ^ ctr.w ^ key.y, lo0);
    key.x += W0;
    key.y += W1;
  }
  return ctr;
}

// fp32 -> bf16 by stochastic rounding: adding 16 random low bits before truncation rounds up with
// probability equal to the discarded fraction, so E[round(x)] = x. NaN and inf pass through the
// usual rounding (the addition would corrupt them).
__device__ __forceinline__ nv_bf16 bf16_stochastic(float x, uint32_t random) {
  uint32_t bits = __float_as_uint(x);
  if ((bits & 0x7f800000u) == 0x7f800000u) return __float2bfloat16_rn(x);
  bits += random & 0xffffu;
  return __ushort_as_bfloat16(static_cast<unsigned short>(bits >> 16));
}

}  // namespace hylo::cuda
