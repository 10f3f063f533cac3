// Decode for grouped-query attention (2 or more query heads per kv head), on tensor cores; also
// MHA at small batches (decode.cu, plan_for). Included by decode.cu only.
//
// The group's heads are the 16 rows (zero-padded; larger groups take blocks of 16 heads) of an
// mma.sync m16n8k16 product, as a query tile is in the training forward: S = Q K^T and O += P V on
// tensor cores, every k/v row read once per block for all its heads. Each of the kMmaWarps warps
// takes rounds of 16 consecutive live keys in turn (round i of the block goes to warp
// i % kMmaWarps) and keeps its own online softmax over them; the warps merge at the end. A warp's k
// and v rows go by cp.async into its own shared buffer of Stages rounds (swizzled tiles,
// attention_common.cuh): the next rounds are in flight while one is computed, with no register
// cost, and warps never wait for each other until the merge. Against two heads per block in the MHA
// kernel's registers (each row read group / 2 times, the repeats from L2), GQA steps at batch 64
// ran 1.03-2.15x faster (experiments/results/decode.md).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention/attention_common.cuh"
#include "kernels/decode/decode_common.cuh"

namespace hylo::cuda::decode {

#ifndef HYLO_DECODE_MMA_BLOCKS_PER_SM
#define HYLO_DECODE_MMA_BLOCKS_PER_SM 1
#endif
// Rounds of k/v rows each warp has in flight (the kernel's Stages), chosen by decode.cu from the
// grid (experiments/results/decode.md): 4 (132 KB of shared memory per block at hd128, 1 block per
// SM) when the grid fits one block per SM, else 3 (100 KB, 2 per SM). 3 was faster than 2 in runs
// of steps (GQA Hkv 4 batch 64 hd128 1.19x) and at most 2% slower per step; 4 was faster still in
// runs at one block per SM, and slower where it made two waves.
constexpr int kMmaStagesOneWave = 4, kMmaStages = 3;
// kMmaRows: the 16 rows of an m16n8k16 product, query heads in a block and keys in a warp's round.
constexpr int kMmaWarps = 4, kMmaThreads = kMmaWarps * 32, kMmaRows = 16;
constexpr int kMmaKeysPerStep = kMmaWarps * kMmaRows;                      // one round of every warp
// Split target: splits only until every SM has a block (2, 3 or 4 per SM measured slower: the
// combine costs more than the longer key chains).
constexpr int kMmaBlocksPerSm = HYLO_DECODE_MMA_BLOCKS_PER_SM;

template <int D, int Stages>
struct MmaLayout {  // dynamic shared memory, bytes: q tile, then per warp Stages stages of (k, v)
  static constexpr int kTile = kMmaRows * D * 2;
  static constexpr int kStage = 2 * kTile;
  static constexpr uint32_t stage(int warp, int s) { return uint32_t(kTile + (warp * Stages + s) * kStage); }
  static constexpr int kBytes = kTile + kMmaWarps * Stages * kStage;
  static_assert(kMmaWarps * kMmaRows * D * 4 <= kMmaWarps * Stages * kStage, "the merge reuses the stages");
};

template <int D, int Stages>
__global__ void __launch_bounds__(kMmaThreads) decode_mma_kernel(const Params p) {
  using namespace attn;
  using L = MmaLayout<D, Stages>;
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ float red_m[kMmaWarps][kMmaRows], red_l[kMmaWarps][kMmaRows];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int split = blockIdx.x, b = blockIdx.z, chunk = blockIdx.y % p.chunks;
  const int hk = blockIdx.y / p.chunks, h0 = hk * p.group + chunk * kMmaRows;
  const int heads = min(kMmaRows, p.group - chunk * kMmaRows);
  const int j0 = split * p.keys_per_split, j1 = min(p.keys, j0 + p.keys_per_split);
  const size_t head_row = (size_t(b) * p.Hkv + hk) * p.slots;
  const __nv_bfloat16 *k_S = p.k + head_row * D, *v_S = p.v + head_row * D;
  const uint32_t s_base = smem_u32(smem), sQ = s_base;

  // cp.async of the k and v rows of keys [jb, jb + 16) into stage st (zeros past the split's end);
  // 16 lanes read each 2 * D-byte row. Always one commit group per call, empty or not, so that the
  // wait below counts rounds.
  constexpr int kChunks = D / 8;
  auto load_round = [&](int jb, int st) {
    if (jb < j1) {
      const uint32_t sK = s_base + L::stage(warp, st), sV = sK + L::kTile;
#pragma unroll
      for (int i = lane; i < kMmaRows * kChunks; i += 32) {
        const int r = i / kChunks, c = i % kChunks, j = jb + r;
        const bool inside = j < j1;
        const size_t off = inside ? size_t(p.live.slot(j)) * D + c * 8 : 0;
        cp_async_16(sK + swizzled<kMmaRows>(r, c), k_S + off, inside ? 16 : 0);
        cp_async_16(sV + swizzled<kMmaRows>(r, c), v_S + off, inside ? 16 : 0);
      }
    }
    cp_async_commit();
  };
  auto round_start = [&](int i) { return j0 + (i * kMmaWarps + warp) * kMmaRows; };

  // The first keys' loads go out before the wait on the previous kernel (decode.cu), q's after it
  // (zero rows past the group's heads).
  load_round(round_start(0), 0);
  cudaGridDependencySynchronize();
  for (int i = tid; i < kMmaRows * kChunks; i += kMmaThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const bool inside = r < heads;
    cp_async_16(sQ + swizzled<kMmaRows>(r, c), p.q + ((size_t(b) * p.Hq + h0 + (inside ? r : 0)) * D + c * 8),
                inside ? 16 : 0);
  }
  cp_async_commit();
#pragma unroll
  for (int st = 1; st < Stages; ++st) load_round(round_start(st), st);
  cp_async_wait_group<Stages - 1>();  // round 0 and q
  __syncthreads();                    // q from every thread

  float o[D / 8][4], row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
  zero_acc(o);
  for (int i = 0; round_start(i) < j1; ++i) {
    const int jb = round_start(i);
    const int st = i % Stages;
    const uint32_t sK = s_base + L::stage(warp, st), sV = sK + L::kTile;
    cp_async_wait_group<Stages - 1>();  // this round landed; the next ones may still be in flight
    __syncwarp();
    float sc[2][4];
    zero_acc(sc);
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      uint32_t a[4], kb[4];
      load_frag_a<kMmaRows>(a, sQ, 0, ks, lane);
      load_frag_b_pair<kMmaRows>(kb, sK, 0, ks, lane);
      mma_16816_x2(sc[0], sc[1], a, kb);
    }
#pragma unroll
    for (int t = 0; t < 2; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (jb + t * 8 + 2 * (lane & 3) + (e & 1) >= j1) sc[t][e] = -INFINITY;
    online_softmax<2, D / 8>(sc, o, row_max, row_sum, p.scale_log2);
    uint32_t pa[4];
    c_to_a<2>(pa, sc, 0);
#pragma unroll
    for (int np = 0; np < D / 16; ++np) {
      uint32_t vb[4];
      load_frag_b_pair_trans<kMmaRows>(vb, sV, 0, np, lane);
      mma_16816_x2(o[2 * np], o[2 * np + 1], pa, vb);
    }
    __syncwarp();                             // every lane's reads of this stage are done
    load_round(round_start(i + Stages), st);  // refill it
  }
  cp_async_wait_all();
  cudaTriggerProgrammaticLaunchCompletion();  // as in decode_kernel (decode_mha.cuh)

  // Merge the warps through the (now idle) stage buffers: rows g and g + 8 of this thread.
  __syncthreads();
  auto red_acc = reinterpret_cast<float(*)[kMmaRows][D]>(smem + L::kTile);
  const int g = lane / 4, c = lane % 4;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float sum = row_sum[half];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if (c == 0) {
      red_m[warp][g + 8 * half] = row_max[half] * p.scale_log2;  // scaled log2 units (Params)
      red_l[warp][g + 8 * half] = sum;
    }
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt)
      *reinterpret_cast<float2*>(&red_acc[warp][g + 8 * half][nt * 8 + 2 * c]) =
          make_float2(o[nt][2 * half], o[nt][2 * half + 1]);
  }
  __syncthreads();
  merge_and_store<kMmaWarps, kMmaRows, D>(p, red_m, red_l, red_acc, heads, b, h0, split, tid, kMmaThreads);
}

}  // namespace hylo::cuda::decode
