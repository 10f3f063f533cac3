// Decode for multi-head attention (one query head per kv head) at batches that fill the GPU
// without splitting much; smaller ones go to decode_gqa.cuh's kernel (decode.cu, plan_for).
// Memory-bound: each live k/v row is read once per step and used for one dot product and one
// axpy, so the kernel is built around the loads. Included by decode.cu only.
//
// Thread block = 128 threads = kGroups lane groups of D/8 lanes, one query head; a lane group owns
// one key row at a time, each lane 8 dims (one 16-byte load of k, one of v). Per iteration (a
// round) every group issues up to U = KeysPerGroup<D> k and v loads before using any, and the
// block covers up to kStep = kGroups * U consecutive live keys (consecutive rows within a range:
// coalesced). A block's keys are cut into the fewest rounds of at most kStep and spread evenly over
// them: a round costs about its bytes at the memory's rate, but a last round of a few keys would
// cost a whole memory round trip for almost nothing (129 keys as 32+32+32+32+1 took 2.3 µs more
// than 128). Scores are reduced across the group with shuffles; each group keeps its own online
// softmax (max, sum, acc); groups are merged through shared memory at the end. q and the
// accumulator live in registers, which is why GQA groups go to decode_gqa.cuh instead: with q and
// an accumulator per head, 2 heads took 96 registers, 4 took 161, 8 took 245.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/decode/decode_common.cuh"

namespace hylo::cuda::decode {

// Defaults from the sweep in experiments/results/decode/LOG.md; sweeps rebuild with the macros set.
#ifndef HYLO_DECODE_KEYS64
#define HYLO_DECODE_KEYS64 2
#endif
#ifndef HYLO_DECODE_KEYS128
#define HYLO_DECODE_KEYS128 4
#endif
#ifndef HYLO_DECODE_BLOCKS_PER_SM
#define HYLO_DECODE_BLOCKS_PER_SM 8
#endif
constexpr int kThreads = 128;
// Keys per lane group per iteration: the k and v loads each lane has in flight.
template <int D>
constexpr int kKeysPerGroup = D == 64 ? HYLO_DECODE_KEYS64 : HYLO_DECODE_KEYS128;
template <int D>
constexpr int kMhaKeysPerStep = kThreads / (D / 8) * kKeysPerGroup<D>;  // one round of the block
constexpr int kBlocksPerSm = HYLO_DECODE_BLOCKS_PER_SM;  // resident blocks per SM (its launch bounds)

__device__ __forceinline__ uint4 load16(const __nv_bfloat16* p) {
  return __ldg(reinterpret_cast<const uint4*>(p));  // ld.global.nc.v4: read-only path
}

__device__ __forceinline__ void to_float8(const uint4& raw, float (&f)[8]) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    // bf16 -> f32 is a 16-bit shift: low half is element 2i, high half element 2i+1.
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

// Held to the registers of kBlocksPerSm resident blocks (64 at 128 threads): batch 64 at H 16
// (1024 blocks) then runs in one wave; unheld, the even rounds' bounds took it to 72 at hd128.
template <int D>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) decode_kernel(const Params p) {
  constexpr int kLanes = D / 8, kGroups = kThreads / kLanes, U = kKeysPerGroup<D>, kStep = kGroups * U;
  __shared__ float red_m[kGroups][1], red_l[kGroups][1];
  __shared__ __align__(16) float red_acc[kGroups][1][D];

  const int tid = threadIdx.x, grp = tid / kLanes, lane = tid % kLanes;
  const int h = blockIdx.y, b = blockIdx.z;
  const int j0 = 0, j1 = p.keys;  // the plan never splits this kernel (decode.cu)
  const int rounds = max(1, (j1 - j0 + kStep - 1) / kStep), step = (j1 - j0 + rounds - 1) / rounds;

  const size_t head_row = (size_t(b) * p.Hkv + h) * p.slots;  // first cache row of (b, h)
  const __nv_bfloat16* k_S = p.k + head_row * D + lane * 8;
  const __nv_bfloat16* v_S = p.v + head_row * D + lane * 8;
  // This group's k and v rows of the round from jb on (zeros past the round's end).
  uint4 kr[U], vr[U];
  auto load_keys = [&](int jb) {
    const int n = min(step, j1 - jb);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int j = jb + u * kGroups + grp;
      if (u * kGroups + grp < n) {
        const size_t row = size_t(p.live.slot(j)) * D;
        kr[u] = load16(k_S + row);
        vr[u] = load16(v_S + row);
      } else {
        kr[u] = vr[u] = make_uint4(0, 0, 0, 0);
      }
    }
  };

  // The first keys' loads go out before the wait on the previous kernel (decode.cu), q's after it.
  // Converting q then waits for its loads, not for the keys'.
  load_keys(j0);
  cudaGridDependencySynchronize();
  const uint4 q_raw = load16(p.q + (size_t(b) * p.Hq + h) * D + lane * 8);
  float q[8];
  to_float8(q_raw, q);
#pragma unroll
  for (int i = 0; i < 8; ++i) q[i] *= p.scale_log2;
  float m = -INFINITY, l = 0.f, acc[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) acc[i] = 0.f;

  for (int jb = j0; jb < j1; jb += step) {
    const int n = min(step, j1 - jb);
    float s[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float kf[8];
      to_float8(kr[u], kf);
      float dot = 0.f;
#pragma unroll
      for (int i = 0; i < 8; ++i) dot = fmaf(q[i], kf[i], dot);
      s[u] = dot;
    }
#pragma unroll
    for (int off = kLanes / 2; off > 0; off >>= 1)
#pragma unroll
      for (int u = 0; u < U; ++u) s[u] += __shfl_xor_sync(0xffffffffu, s[u], off);

    float pw[U];
    float m_new = m;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (u * kGroups + grp >= n) s[u] = -INFINITY;
      m_new = fmaxf(m_new, s[u]);
    }
    // While nothing is valid yet m_new is -inf: use 0 so that exp2 gives 0, never NaN.
    const float m_use = m_new == -INFINITY ? 0.f : m_new;
    const float corr = exp2f(m - m_use);
    float sum = 0.f;
#pragma unroll
    for (int u = 0; u < U; ++u) sum += (pw[u] = exp2f(s[u] - m_use));
    l = l * corr + sum;
    m = m_new;
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i] *= corr;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float vf[8];
      to_float8(vr[u], vf);
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] = fmaf(pw[u], vf[i], acc[i]);
    }
    if (jb + step < j1) load_keys(jb + step);
  }

  // No loads left: the next kernel (the combine, or the next step's decode) may be scheduled now,
  // its first loads overlapping this grid's merges; its griddepcontrol.wait still waits for this
  // whole grid to finish and its writes to be visible. (Triggered at the block's start instead,
  // the next step's blocks take the SM slots and memory queues early: slower, experiments/results/
  // decode/LOG.md.) A no-op without a dependent launch.
  cudaTriggerProgrammaticLaunchCompletion();

  // Merge the groups: rescale each to the block's max and sum.
  if (lane == 0) {
    red_m[grp][0] = m;
    red_l[grp][0] = l;
  }
  float4* dst = reinterpret_cast<float4*>(&red_acc[grp][0][lane * 8]);
  dst[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
  dst[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
  __syncthreads();
  merge_and_store<kGroups, 1, D>(p, red_m, red_l, red_acc, 1, b, h, 0, tid, kThreads);
}

}  // namespace hylo::cuda::decode
