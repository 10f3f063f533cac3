// Decode for multi-head attention on tensor cores with no shared-memory staging: each thread loads
// k and v rows from global memory straight into mma.sync fragments. Included by decode.cu only.
//
// Thread block = 2 warps, one (sequence, head). A warp takes up to 16 consecutive live keys per
// round; the block's keys are cut into the fewest rounds of at most 32, spread evenly over rounds
// and warps (as decode_mha.cuh does, for the same reason: a round costs a memory round trip).
// - S = Q K^T with q's row repeated as all 16 rows of A and the round's keys as N (two n-tiles of
//   8). A dot product does not care in which order it takes the dims, as long as q and k take them
//   in the same order: so a thread's B fragments for k-steps 2s and 2s + 1 are one 16-byte load,
//   dims 32 s + 8 c .. + 8 of key row g (n-tile 0) and g + 8 (n-tile 1), and its A fragments one
//   16-byte load of q at the same dims. A thread then holds the scores of keys 2c, 2c + 1 and
//   8 + 2c, 9 + 2c: exactly the B fragment (P^T) of the next product, with no shuffle.
// - O^T += V^T P^T: head dims as M (D / 16 m-tiles), keys as K. The thread loads the v rows of its
//   four keys at dims D/8 g .. + D/8; two byte permutes make each A register (one dim, two keys).
//   Dim D/8 g + 2 mt is row g of m-tile mt and dim + 1 its row g + 8. Every column of O^T is the
//   same head.
// Against the lane groups' fp32 dot products and shuffles, a round costs about a fifth of the
// instructions; p goes to the product in bf16, as in the training kernels.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention/attention_common.cuh"
#include "kernels/decode/decode_common.cuh"

namespace hylo::cuda::decode {

constexpr int kFragWarps = 2, kFragThreads = kFragWarps * 32, kFragKeys = 16;
constexpr int kFragKeysPerStep = kFragWarps * kFragKeys;  // one round of the block
constexpr int kFragBlocksPerSm = 8;  // batch 64 at H 16 (1024 blocks) in one wave

template <int D>
__global__ void __launch_bounds__(kFragThreads, kFragBlocksPerSm) decode_frag_kernel(const Params p) {
  using namespace attn;
  constexpr int kSlots = D / 32;    // 16-byte k loads per key row and thread; q loads
  constexpr int kVLoads = D / 64;   // 16-byte v loads per key row and thread
  constexpr int kMTiles = D / 16;
  __shared__ float red_m[kFragWarps][1], red_l[kFragWarps][1];
  __shared__ __align__(16) float red_acc[kFragWarps][1][D];

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, c = lane % 4;
  const int h = blockIdx.y, b = blockIdx.z, keys = p.keys;
  const int rounds = max(1, (keys + kFragKeysPerStep - 1) / kFragKeysPerStep);
  const int step = (keys + rounds - 1) / rounds, per_warp = (step + kFragWarps - 1) / kFragWarps;

  const size_t head_row = (size_t(b) * p.Hkv + h) * p.slots;
  const __nv_bfloat16* k_S = p.k + head_row * D + 8 * c;
  const __nv_bfloat16* v_S = p.v + head_row * D + (D / 8) * g;
  // This warp's keys of the round from jb on: [w0, w0 + n).
  auto warp_keys = [&](int jb, int& w0) {
    w0 = jb + warp * per_warp;
    return max(0, min(min(per_warp, jb + step - w0), keys - w0));
  };
  uint4 kr[2][kSlots], vr[4][kVLoads];  // k of keys g, g + 8; v of keys 2c, 2c + 1, 2c + 8, 2c + 9
  // Keys past the warp's n load the row of its last key (of the block's first, when it has none)
  // instead of zeros: no selects, fewer registers. Their scores are masked, so their v rows, live
  // and finite, meet p = 0.
  auto load_keys = [&](int jb) {
    int w0;
    const int n = warp_keys(jb, w0);
    auto row_of = [&](int key) { return unsigned(p.live.slot(n > 0 ? w0 + min(key, n - 1) : 0)) * D; };
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      const unsigned row = row_of(g + 8 * t);
#pragma unroll
      for (int s = 0; s < kSlots; ++s) kr[t][s] = __ldg(reinterpret_cast<const uint4*>(k_S + row + 32 * s));
    }
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      const unsigned row = row_of(2 * c + (t & 1) + 8 * (t >> 1));
#pragma unroll
      for (int s = 0; s < kVLoads; ++s) vr[t][s] = __ldg(reinterpret_cast<const uint4*>(v_S + row + 8 * s));
    }
  };

  // As decode_kernel: the first keys' loads before the wait on the previous kernel, q's after it.
  load_keys(0);
  cudaGridDependencySynchronize();
  // q waits in shared memory and is read again every round: 4 * kSlots registers fewer (hd128
  // spilled with q held in them).
  __shared__ __align__(16) __nv_bfloat16 q_sm[D];
  if (tid < D / 8)
    reinterpret_cast<uint4*>(q_sm)[tid] = __ldg(reinterpret_cast<const uint4*>(p.q + (size_t(b) * p.Hq + h) * D) + tid);
  __syncthreads();

  float ot[kMTiles][4], m = -INFINITY, l = 0.f;
  zero_acc(ot);
  for (int jb = 0; jb < keys; jb += step) {
    int w0;
    const int n = warp_keys(jb, w0);
    float st[2][4];
    zero_acc(st);
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      const uint4 q = *reinterpret_cast<const uint4*>(&q_sm[32 * s + 8 * c]);
      const uint32_t a_lo[4] = {q.x, q.x, q.y, q.y}, a_hi[4] = {q.z, q.z, q.w, q.w};
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        mma_16816(st[t], a_lo, kr[t][s].x, kr[t][s].y);
        mma_16816(st[t], a_hi, kr[t][s].z, kr[t][s].w);
      }
    }
    // Scores of keys 8t + 2c + e (all 16 rows of S are the same; elements 0, 1 are row g's).
    float sc[2][2];
    float mx = m;
#pragma unroll
    for (int t = 0; t < 2; ++t)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        sc[t][e] = 8 * t + 2 * c + e < n ? st[t][e] : -INFINITY;
        mx = fmaxf(mx, sc[t][e]);
      }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    // While nothing is valid yet mx is -inf: subtract 0 so that exp2 gives 0, never NaN.
    const float base = mx == -INFINITY ? 0.f : mx * p.scale_log2;
    const float corr = fast_exp2(m * p.scale_log2 - base);
    m = mx;
    float pr[2][2];
#pragma unroll
    for (int t = 0; t < 2; ++t)
#pragma unroll
      for (int e = 0; e < 2; ++e) pr[t][e] = fast_exp2(fmaf(sc[t][e], p.scale_log2, -base));
    l = l * corr + (pr[0][0] + pr[0][1]) + (pr[1][0] + pr[1][1]);  // this thread's keys; summed over c at the end
    const uint32_t pb0 = pack_bf16(pr[0][0], pr[0][1]), pb1 = pack_bf16(pr[1][0], pr[1][1]);
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      const int s = mt / 4;
      auto word = [&](int t) {
        const uint4& v = vr[t][s];
        return mt % 4 == 0 ? v.x : mt % 4 == 1 ? v.y : mt % 4 == 2 ? v.z : v.w;
      };
      const uint32_t a[4] = {__byte_perm(word(0), word(1), 0x5410), __byte_perm(word(0), word(1), 0x7632),
                             __byte_perm(word(2), word(3), 0x5410), __byte_perm(word(2), word(3), 0x7632)};
      // Elements 1 and 3 repeat 0 and 2 (another column of the same head) and are never read.
      ot[mt][0] *= corr;
      ot[mt][2] *= corr;
      mma_16816(ot[mt], a, pb0, pb1);
    }
    if (jb + step < keys) load_keys(jb + step);
  }
  cudaTriggerProgrammaticLaunchCompletion();  // as in decode_kernel (decode_mha.cuh)

  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  if (lane == 0) {
    red_m[warp][0] = m * p.scale_log2;  // scaled log2 units (Params)
    red_l[warp][0] = l;
  }
  if (c == 0) {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
      *reinterpret_cast<float2*>(&red_acc[warp][0][(D / 8) * g + 2 * mt]) = make_float2(ot[mt][0], ot[mt][2]);
  }
  __syncthreads();
  merge_and_store<kFragWarps, 1, D>(p, red_m, red_l, red_acc, 1, b, h, 0, tid, kFragThreads);
}

}  // namespace hylo::cuda::decode
