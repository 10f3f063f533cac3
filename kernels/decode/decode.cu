// Decode attention: memory-bound (each live k/v row is read once per step and used for one dot
// product and one axpy per query head), so the kernel is built around the loads.
//
// Thread block = 128 threads = kGroups lane groups of D/8 lanes; a lane group owns one key row at a
// time, each lane 8 dims (one 16-byte load of k, one of v). Per iteration (a round) every group
// issues up to U = KeysPerGroup<D> k and v loads before using any, and the block covers up to
// kStep = kGroups * U consecutive live keys (consecutive rows within a range: coalesced). A block's
// keys are cut into the fewest rounds of at most kStep and spread evenly over them: a round costs
// about its bytes at the memory's rate, but a last round of a few keys would cost a whole memory
// round trip for almost nothing (129 keys as 32+32+32+32+1 took 2.3 µs more than 128).
// Scores are reduced across the group with shuffles; each group keeps its own online softmax (max,
// sum, acc) for the GT query heads of its kv head; groups are merged through shared memory at the
// end.
// Grid = (splits, kv heads * head chunks, batch): a split takes a contiguous share of the live
// keys; with splits > 1 the block writes an unnormalised partial and decode_combine_kernel
// merges the splits (second pass). Both kernels are programmatic dependent launches (Hopper PDL)
// and let the next kernel launch before they end: the combine's blocks are scheduled while the
// split blocks merge and wait on the GPU for their results; and a decode kernel that follows a
// decode step (the next layer or token) issues its first key loads while the previous step
// drains, so back-to-back steps do not each pay a kernel-boundary gap and a cold memory pipe.
// What a decode kernel reads before its griddepcontrol.wait is only k and v of its first round of
// keys; it is a dependent launch only when no first round holds the last live key, whose slot the
// stream's previous kernel (the append) may be writing. q, out and the workspace wait.
//
// Legend: GT query heads per block (1 or 2, a divisor of the GQA group), U keys per lane group per
// iteration.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/attention/attention_common.cuh"
#include "kernels/common/common.cuh"
#include "kernels/decode/decode.h"

namespace hylo::cuda {
namespace decode {
namespace {

// Defaults from the sweep in experiments/results/decode.md; sweeps rebuild with the macros set.
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
template <int D> constexpr int kKeysPerGroup = D == 64 ? HYLO_DECODE_KEYS64 : HYLO_DECODE_KEYS128;
constexpr int kMaxSplits = 32;
constexpr int kBlocksPerSm = HYLO_DECODE_BLOCKS_PER_SM;  // split until about this many blocks per SM
#ifndef HYLO_DECODE_MMA_MIN_GROUP
#define HYLO_DECODE_MMA_MIN_GROUP 3
#endif
#ifndef HYLO_DECODE_MMA_BLOCKS_PER_SM
#define HYLO_DECODE_MMA_BLOCKS_PER_SM 1
#endif
constexpr int kMinMmaGroup = HYLO_DECODE_MMA_MIN_GROUP;        // GQA groups served by decode_mma_kernel
constexpr int kMmaBlocksPerSm = HYLO_DECODE_MMA_BLOCKS_PER_SM;  // its split target: fill the SMs once

struct Params {
  const __nv_bfloat16 *q, *k, *v;
  __nv_bfloat16* out;
  float* part_acc;  // (B, Hq, splits, D): unnormalised sums, in units of exp2(s - max)
  float2* part_ml;  // (B, Hq, splits): (max of the scaled log2 scores, sum of exp2(s - max))
  LiveSlots live;
  int Hq, Hkv, group, chunks, slots, keys, splits, keys_per_split;
  float scale_log2;  // log2(e) / sqrt(D): scores in log2 units, exp2 instead of exp
};

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

// The block's Parts partial softmax states of Rows query heads (h0..h0 + rows - 1 of sequence b)
// merged, each rescaled to the common max: the output rows, or with splits the split's partial
// (unnormalised sums, max, sum) for decode_combine_kernel. m holds maxima of scaled log2 scores
// (-inf for a part that saw no key), l the sums of exp2(score - max), acc the weighted v sums.
template <int Parts, int Rows, int D>
__device__ __forceinline__ void merge_and_store(const Params& p, const float (*m)[Rows], const float (*l)[Rows],
                                                const float (*acc)[Rows][D], int rows, int b, int h0, int split,
                                                int tid, int threads) {
  for (int idx = tid; idx < rows * D; idx += threads) {
    const int g = idx / D, d = idx % D;
    float M = -INFINITY;
#pragma unroll
    for (int r = 0; r < Parts; ++r) M = fmaxf(M, m[r][g]);
    float L = 0.f, A = 0.f;
#pragma unroll
    for (int r = 0; r < Parts; ++r) {
      const float w = exp2f(m[r][g] - M);  // 0 for a part that saw no key (M is finite)
      L = fmaf(l[r][g], w, L);
      A = fmaf(acc[r][g][d], w, A);
    }
    const size_t bh = size_t(b) * p.Hq + h0 + g;
    if (p.splits == 1) {
      p.out[bh * D + d] = __float2bfloat16(A / L);
    } else {
      const size_t row = bh * p.splits + split;
      p.part_acc[row * D + d] = A;
      if (d == 0) p.part_ml[row] = make_float2(M, L);
    }
  }
}

// One query head per block is held to the registers of kBlocksPerSm resident blocks (64 at 128
// threads), which the split choice assumes; unheld, the even rounds' bounds took it to 72 at hd128.
template <int D, int GT>
__global__ void __launch_bounds__(kThreads, GT == 1 ? kBlocksPerSm : 0) decode_kernel(const Params p) {
  constexpr int kLanes = D / 8, kGroups = kThreads / kLanes, U = kKeysPerGroup<D>, kStep = kGroups * U;
  __shared__ float red_m[kGroups][GT], red_l[kGroups][GT];
  __shared__ __align__(16) float red_acc[kGroups][GT][D];

  const int tid = threadIdx.x, grp = tid / kLanes, lane = tid % kLanes;
  const int split = blockIdx.x, b = blockIdx.z;
  const int hk = blockIdx.y / p.chunks, h0 = hk * p.group + (blockIdx.y % p.chunks) * GT;
  const int j0 = split * p.keys_per_split, j1 = min(p.keys, j0 + p.keys_per_split);
  const int rounds = max(1, (j1 - j0 + kStep - 1) / kStep), step = (j1 - j0 + rounds - 1) / rounds;

  const size_t head_row = (size_t(b) * p.Hkv + hk) * p.slots;  // first cache row of (b, hk)
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

  // The first keys' loads go out before the wait on the previous kernel (see the top), q's after
  // it. Converting q then waits for its loads, not for the keys'.
  load_keys(j0);
  cudaGridDependencySynchronize();
  uint4 q_raw[GT];
#pragma unroll
  for (int g = 0; g < GT; ++g) q_raw[g] = load16(p.q + (size_t(b) * p.Hq + h0 + g) * D + lane * 8);
  float q[GT][8];
#pragma unroll
  for (int g = 0; g < GT; ++g) {
    to_float8(q_raw[g], q[g]);
#pragma unroll
    for (int i = 0; i < 8; ++i) q[g][i] *= p.scale_log2;
  }
  float m[GT], l[GT], acc[GT][8];
#pragma unroll
  for (int g = 0; g < GT; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.f;
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[g][i] = 0.f;
  }

  for (int jb = j0; jb < j1; jb += step) {
    const int n = min(step, j1 - jb);
    float s[GT][U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float kf[8];
      to_float8(kr[u], kf);
#pragma unroll
      for (int g = 0; g < GT; ++g) {
        float dot = 0.f;
#pragma unroll
        for (int i = 0; i < 8; ++i) dot = fmaf(q[g][i], kf[i], dot);
        s[g][u] = dot;
      }
    }
#pragma unroll
    for (int off = kLanes / 2; off > 0; off >>= 1)
#pragma unroll
      for (int g = 0; g < GT; ++g)
#pragma unroll
        for (int u = 0; u < U; ++u) s[g][u] += __shfl_xor_sync(0xffffffffu, s[g][u], off);

    float pw[GT][U];
#pragma unroll
    for (int g = 0; g < GT; ++g) {
      float m_new = m[g];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (u * kGroups + grp >= n) s[g][u] = -INFINITY;
        m_new = fmaxf(m_new, s[g][u]);
      }
      // While nothing is valid yet m_new is -inf: use 0 so that exp2 gives 0, never NaN.
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      const float corr = exp2f(m[g] - m_use);
      float sum = 0.f;
#pragma unroll
      for (int u = 0; u < U; ++u) sum += (pw[g][u] = exp2f(s[g][u] - m_use));
      l[g] = l[g] * corr + sum;
      m[g] = m_new;
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[g][i] *= corr;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float vf[8];
      to_float8(vr[u], vf);
#pragma unroll
      for (int g = 0; g < GT; ++g)
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[g][i] = fmaf(pw[g][u], vf[i], acc[g][i]);
    }
    if (jb + step < j1) load_keys(jb + step);
  }

  // No loads left: the next kernel (the combine, or the next step's decode) may be scheduled now,
  // its first loads overlapping this grid's merges; its griddepcontrol.wait still waits for this
  // whole grid to finish and its writes to be visible. (Triggered at the block's start instead,
  // the next step's blocks take the SM slots and memory queues early: slower, experiments/results/
  // decode.md.) A no-op without a dependent launch.
  cudaTriggerProgrammaticLaunchCompletion();

  // Merge the groups: rescale each to the block's max and sum.
#pragma unroll
  for (int g = 0; g < GT; ++g) {
    if (lane == 0) {
      red_m[grp][g] = m[g];
      red_l[grp][g] = l[g];
    }
    float4* dst = reinterpret_cast<float4*>(&red_acc[grp][g][lane * 8]);
    dst[0] = make_float4(acc[g][0], acc[g][1], acc[g][2], acc[g][3]);
    dst[1] = make_float4(acc[g][4], acc[g][5], acc[g][6], acc[g][7]);
  }
  __syncthreads();
  merge_and_store<kGroups, GT, D>(p, red_m, red_l, red_acc, GT, b, h0, split, tid, kThreads);
}

// ---- GQA groups of 3+ heads: every head of a kv head in one block, on tensor cores ----------------
// The lane-group kernel holds q and an accumulator per head in registers, so it takes at most two
// heads per block and a group of 4 or 8 reads each k/v row 2 or 4 times (the repeats from L2).
// Here the group's heads are the 16 rows (zero-padded) of an mma.sync m16n8k16 product, as a
// query tile is in the training forward: S = Q K^T and O += P V on tensor cores, every k/v row read
// once per block. Each of the kMmaWarps warps takes rounds of 16 consecutive live keys in turn
// (round i of the block goes to warp i % kMmaWarps) and keeps its own online softmax over them; the
// warps merge at the end as the lane groups do. A warp's k and v rows go by cp.async into its own
// two-stage shared buffer (swizzled tiles, attention_common.cuh): the next round is in flight while
// one is computed, with no register cost, and warps never wait for each other until the merge.
constexpr int kMmaWarps = 4, kMmaThreads = kMmaWarps * 32, kMmaRows = 16;  // keys per warp round
constexpr int kMmaKeysPerStep = kMmaWarps * kMmaRows;                      // one round of every warp

template <int D>
struct MmaLayout {  // dynamic shared memory, bytes: q tile, then per warp two stages of (k, v)
  static constexpr int kTile = kMmaRows * D * 2;
  static constexpr int kStage = 2 * kTile;
  static constexpr uint32_t stage(int warp, int s) { return uint32_t(kTile + (warp * 2 + s) * kStage); }
  static constexpr int kBytes = kTile + kMmaWarps * 2 * kStage;
  static_assert(kMmaWarps * kMmaRows * D * 4 <= kMmaWarps * 2 * kStage, "the merge reuses the stages");
};

template <int D>
__global__ void __launch_bounds__(kMmaThreads) decode_mma_kernel(const Params p) {
  using namespace attn;
  using L = MmaLayout<D>;
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

  // As in decode_kernel: the first keys' loads go out before the wait on the previous kernel, q's
  // after it (zero rows past the group's heads).
  load_round(round_start(0), 0);
  cudaGridDependencySynchronize();
  for (int i = tid; i < kMmaRows * kChunks; i += kMmaThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const bool inside = r < heads;
    cp_async_16(sQ + swizzled<kMmaRows>(r, c), p.q + ((size_t(b) * p.Hq + h0 + (inside ? r : 0)) * D + c * 8),
                inside ? 16 : 0);
  }
  cp_async_commit();
  load_round(round_start(1), 1);
  cp_async_wait_group<1>();  // round 0 and q
  __syncthreads();           // q from every thread

  float o[D / 8][4], row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
  zero_acc(o);
  for (int i = 0; round_start(i) < j1; ++i) {
    const int jb = round_start(i);
    const uint32_t sK = s_base + L::stage(warp, i & 1), sV = sK + L::kTile;
    cp_async_wait_group<1>();  // this round landed; the next may still be in flight
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
    __syncwarp();                          // every lane's reads of this stage are done
    load_round(round_start(i + 2), i & 1);  // refill it
  }
  cp_async_wait_all();
  cudaTriggerProgrammaticLaunchCompletion();  // as in decode_kernel

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
      red_m[warp][g + 8 * half] = row_max[half] * p.scale_log2;  // scaled log2 units, as decode_kernel's
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

// Second pass of split-KV: one block of D threads per (b, query head).
template <int D>
__global__ void __launch_bounds__(D) decode_combine_kernel(const float* part_acc, const float2* part_ml,
                                                           __nv_bfloat16* out, int splits) {
  const size_t bh = blockIdx.x;
  const int d = threadIdx.x;
  cudaTriggerProgrammaticLaunchCompletion();  // the next step's decode may start its key loads
  cudaGridDependencySynchronize();            // the partials of decode_kernel, complete and visible
  float M = -INFINITY;
  for (int s = 0; s < splits; ++s) M = fmaxf(M, part_ml[bh * splits + s].x);
  float L = 0.f, A = 0.f;
  for (int s = 0; s < splits; ++s) {
    const float2 ml = part_ml[bh * splits + s];
    const float w = exp2f(ml.x - M);
    L = fmaf(ml.y, w, L);
    A = fmaf(part_acc[(bh * splits + s) * D + d], w, A);
  }
  out[bh * D + d] = __float2bfloat16(A / L);
}

// One 16-byte vector per thread: rows (b, kv head) of the new token go to `slot`; k then v.
__global__ void append_kernel(const uint4* k_new, const uint4* v_new, uint4* k_cache, uint4* v_cache, int rows,
                              int vecs, int slots, int slot) {
  // The decode after it may start its first keys' loads now: it is a dependent launch only when
  // those do not include the last live key, the one slot written here.
  cudaTriggerProgrammaticLaunchCompletion();
  const int64_t total = int64_t(rows) * vecs;
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool is_v = i >= total;
  if (is_v) i -= total;
  if (i >= total) return;
  const int64_t row = i / vecs, c = i % vecs;
  const int64_t dst = (row * slots + slot) * vecs + c;
  if (is_v)
    v_cache[dst] = v_new[i];
  else
    k_cache[dst] = k_new[i];
}

__global__ void move_kernel(uint4* k_cache, uint4* v_cache, int rows, int vecs, int slots, int src, int dst,
                            int count) {
  const int64_t per_row = int64_t(count) * vecs, total = int64_t(rows) * per_row;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / per_row, off = i % per_row;
    const int64_t base = row * slots * vecs;
    k_cache[base + dst * int64_t(vecs) + off] = k_cache[base + src * int64_t(vecs) + off];
    v_cache[base + dst * int64_t(vecs) + off] = v_cache[base + src * int64_t(vecs) + off];
  }
}

__global__ void delay_kernel(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

// Which kernel serves a shape and how it divides the work. Groups of kMinMmaGroup or more heads go
// to decode_mma_kernel (each k/v row read once per block of up to 16 heads). Smaller groups take
// decode_kernel with 2 query heads per block for an even group, else 1: every head holds q and an
// accumulator in registers there (4 heads took 161 registers at hd128, 3 blocks per SM; 8 took
// 245, 2), experiments/results/decode.md.
struct Plan {
  bool mma;
  int heads;          // query heads per block
  int chunks;         // blocks per (sequence, kv head, split)
  int keys_per_step;  // live keys a block covers per round of all its warps or lane groups
  int blocks_per_sm;  // the split target: about this many blocks per SM
};

Plan plan_for(const DecodeShape& s) {
  const int group = s.Hq / s.Hkv;
  if (group >= kMinMmaGroup)
    return {true, kMmaRows, (group + kMmaRows - 1) / kMmaRows, kMmaKeysPerStep, kMmaBlocksPerSm};
  const int heads = group % 2 == 0 ? 2 : 1;
  const int step = (kThreads / (s.D / 8)) * (s.D == 64 ? kKeysPerGroup<64> : kKeysPerGroup<128>);
  return {false, heads, group / heads, step, kBlocksPerSm};
}

// Read once: the split choice asks for it at every decode step (hylo drives one GPU per process).
int sm_count() {
  static const int sms = [] {
    int device = 0, count = 0;
    HYLO_CUDA_CHECK(cudaGetDevice(&device));
    HYLO_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
    return count;
  }();
  return sms;
}

// Splits asked for before empty ones are dropped: about the plan's blocks per SM, at least one
// block round of keys per split. Non-decreasing in keys, so it bounds the workspace.
int requested_splits(const DecodeShape& shape, int keys) {
  if (!decode_supports_head_dim(shape.D) || shape.Hkv <= 0 || keys <= 0) return 1;
  const Plan plan = plan_for(shape);
  const int64_t blocks = int64_t(shape.B) * shape.Hkv * plan.chunks;
  const int64_t splits = std::min<int64_t>({int64_t(sm_count()) * plan.blocks_per_sm / std::max<int64_t>(blocks, 1),
                                            keys / plan.keys_per_step, kMaxSplits});
  return int(std::max<int64_t>(splits, 1));
}

// Workspace of `splits` partials per (batch, query head): D sums plus (max, sum), fp32.
size_t partials_bytes(const DecodeShape& shape, int splits) {
  return size_t(shape.B) * shape.Hq * splits * (size_t(shape.D) + 2) * sizeof(float);
}

// Keys per split for `splits` requested splits, and the splits that then remain non-empty.
void split_keys(int keys, int& splits, int& keys_per_split) {
  keys_per_split = (keys + splits - 1) / splits;
  splits = (keys + keys_per_split - 1) / keys_per_split;
}

// Append and move copy whole 16-byte vectors: any head dim that is a multiple of 8.
void check_cache_shape(const DecodeShape& s) {
  HYLO_CUDA_REQUIRE(s.B > 0 && s.Hkv > 0 && s.slots > 0 && s.D > 0 && s.D % 8 == 0,
                    "kv cache: need positive sizes and D %% 8 == 0, got B=%d Hkv=%d slots=%d D=%d", s.B, s.Hkv,
                    s.slots, s.D);
}

// kernel<<<grid, threads, smem>>>(args...) on `stream`, a programmatic dependent launch if
// `dependent`. A failed launch is left to the caller's HYLO_CUDA_LAUNCH_CHECK, which names the kernel.
template <class... KernelParams, class... Args>
void launch(void (*kernel)(KernelParams...), bool dependent, dim3 grid, int threads, int smem, cudaStream_t stream,
            Args... args) {
  cudaLaunchAttribute pdl[1];
  pdl[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  pdl[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = dim3(unsigned(threads));
  config.dynamicSmemBytes = size_t(smem);
  config.stream = stream;
  config.attrs = pdl;
  config.numAttrs = dependent ? 1 : 0;
  (void)cudaLaunchKernelEx(&config, kernel, args...);  // its error is also cudaGetLastError's
}

template <int D>
void launch_for_dim(const Params& p, const Plan& plan, dim3 grid, cudaStream_t stream) {
  // The last split is one round, whose loads go out before the wait, when it has at most a step's keys.
  const bool dependent = p.keys - (p.splits - 1) * p.keys_per_split > plan.keys_per_step;
  if (plan.mma) {
    static const bool reserved = [] {  // above the 48 KB default at hd128; set once per process
      HYLO_CUDA_CHECK(cudaFuncSetAttribute(decode_mma_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           MmaLayout<D>::kBytes));
      return true;
    }();
    (void)reserved;
    launch(decode_mma_kernel<D>, dependent, grid, kMmaThreads, MmaLayout<D>::kBytes, stream, p);
    HYLO_CUDA_LAUNCH_CHECK("decode_mma_kernel");
  } else {
    if (plan.heads == 2)
      launch(decode_kernel<D, 2>, dependent, grid, kThreads, 0, stream, p);
    else
      launch(decode_kernel<D, 1>, dependent, grid, kThreads, 0, stream, p);
    HYLO_CUDA_LAUNCH_CHECK("decode_kernel");
  }
  if (p.splits > 1) {
    launch(decode_combine_kernel<D>, true, dim3(unsigned(p.Hq) * grid.z), D, 0, stream,
           static_cast<const float*>(p.part_acc), static_cast<const float2*>(p.part_ml), p.out, p.splits);
    HYLO_CUDA_LAUNCH_CHECK("decode_combine_kernel");
  }
}

void check_shape(const DecodeShape& s) {
  HYLO_CUDA_REQUIRE(s.B > 0 && s.Hq > 0 && s.Hkv > 0 && s.slots > 0,
                    "decode: sizes must be positive, got B=%d Hq=%d Hkv=%d slots=%d", s.B, s.Hq, s.Hkv, s.slots);
  HYLO_CUDA_REQUIRE(decode_supports_head_dim(s.D), "decode: head dim %d not supported (64 or 128)", s.D);
  HYLO_CUDA_REQUIRE(s.Hq % s.Hkv == 0, "decode: query heads %d not a multiple of kv heads %d", s.Hq, s.Hkv);
  HYLO_CUDA_REQUIRE(s.B <= 65535 && s.Hq <= 65535, "decode: batch %d or heads %d above 65535", s.B, s.Hq);
}

}  // namespace
}  // namespace decode

using namespace decode;

bool decode_supports_head_dim(int D) { return D == 64 || D == 128; }

int decode_num_splits(const DecodeShape& shape, int keys) {
  int splits = requested_splits(shape, keys), per = 0;
  if (keys > 0) split_keys(keys, splits, per);
  return splits;
}

size_t decode_workspace_bytes(const DecodeShape& shape, int max_keys) {
  const int splits = requested_splits(shape, max_keys);
  return splits <= 1 ? 0 : partials_bytes(shape, splits);
}

void decode_attention_forward(const DecodeShape& shape, const LiveSlots& live, const bf16* q_BHD,
                              const bf16* k_BHSD, const bf16* v_BHSD, bf16* out_BHD, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
  check_shape(shape);
  const int keys = live.keys();
  HYLO_CUDA_REQUIRE(keys > 0, "decode: no live key (a query always attends itself)");
  HYLO_CUDA_REQUIRE((live.older.size() == 0 || (live.older.begin >= 0 && live.older.end <= shape.slots)) &&
                        (live.newer.size() == 0 || (live.newer.begin >= 0 && live.newer.end <= shape.slots)),
                    "decode: live slots [%d, %d) + [%d, %d) outside the cache's %d slots", live.older.begin,
                    live.older.end, live.newer.begin, live.newer.end, shape.slots);
  HYLO_CUDA_REQUIRE(aligned16(q_BHD) && aligned16(k_BHSD) && aligned16(v_BHSD) && aligned16(out_BHD),
                    "decode: q, k, v and out must be 16-byte aligned");
  const int group = shape.Hq / shape.Hkv;
  const Plan plan = plan_for(shape);
  int splits = requested_splits(shape, keys), per = 0;
  split_keys(keys, splits, per);

  Params p{};
  p.q = reinterpret_cast<const __nv_bfloat16*>(q_BHD);
  p.k = reinterpret_cast<const __nv_bfloat16*>(k_BHSD);
  p.v = reinterpret_cast<const __nv_bfloat16*>(v_BHSD);
  p.out = reinterpret_cast<__nv_bfloat16*>(out_BHD);
  p.live = live;
  p.Hq = shape.Hq;
  p.Hkv = shape.Hkv;
  p.group = group;
  p.chunks = plan.chunks;
  p.slots = shape.slots;
  p.keys = keys;
  p.splits = splits;
  p.keys_per_split = per;
  p.scale_log2 = kLog2e / std::sqrt(float(shape.D));
  if (splits > 1) {
    const size_t partials = size_t(shape.B) * shape.Hq * splits;
    HYLO_CUDA_REQUIRE(workspace != nullptr && workspace_bytes >= partials_bytes(shape, splits),
                      "decode: workspace of %zu bytes too small for %d splits (decode_workspace_bytes)",
                      workspace_bytes, splits);
    p.part_acc = static_cast<float*>(workspace);
    p.part_ml = reinterpret_cast<float2*>(p.part_acc + partials * shape.D);
  }
  const dim3 grid(splits, shape.Hkv * p.chunks, shape.B);
  if (shape.D == 64)
    launch_for_dim<64>(p, plan, grid, stream);
  else
    launch_for_dim<128>(p, plan, grid, stream);
}

void kv_cache_append(const DecodeShape& shape, int slot, const bf16* k_BHD, const bf16* v_BHD, bf16* k_BHSD,
                     bf16* v_BHSD, cudaStream_t stream) {
  check_cache_shape(shape);
  HYLO_CUDA_REQUIRE(slot >= 0 && slot < shape.slots, "kv cache append: slot %d outside [0, %d)", slot, shape.slots);
  HYLO_CUDA_REQUIRE(aligned16(k_BHD) && aligned16(v_BHD) && aligned16(k_BHSD) && aligned16(v_BHSD),
                    "kv cache append: buffers must be 16-byte aligned");
  const int rows = shape.B * shape.Hkv, vecs = shape.D / 8;
  const int64_t threads = 2 * int64_t(rows) * vecs;
  append_kernel<<<unsigned((threads + 255) / 256), 256, 0, stream>>>(
      reinterpret_cast<const uint4*>(k_BHD), reinterpret_cast<const uint4*>(v_BHD), reinterpret_cast<uint4*>(k_BHSD),
      reinterpret_cast<uint4*>(v_BHSD), rows, vecs, shape.slots, slot);
  HYLO_CUDA_LAUNCH_CHECK("kv append_kernel");
}

void kv_cache_move(const DecodeShape& shape, int src, int dst, int count, bf16* k_BHSD, bf16* v_BHSD,
                   cudaStream_t stream) {
  check_cache_shape(shape);
  if (count == 0) return;
  HYLO_CUDA_REQUIRE(count > 0 && src >= 0 && dst >= 0 && src + count <= shape.slots && dst + count <= shape.slots &&
                        (src + count <= dst || dst + count <= src),
                    "kv cache move: rows [%d, %d) -> [%d, %d) invalid for %d slots", src, src + count, dst,
                    dst + count, shape.slots);
  HYLO_CUDA_REQUIRE(aligned16(k_BHSD) && aligned16(v_BHSD), "kv cache move: buffers must be 16-byte aligned");
  const int rows = shape.B * shape.Hkv, vecs = shape.D / 8;
  const int64_t total = int64_t(rows) * count * vecs;
  const int blocks = int(std::min<int64_t>((total + 255) / 256, int64_t(sm_count()) * 16));
  move_kernel<<<blocks, 256, 0, stream>>>(reinterpret_cast<uint4*>(k_BHSD), reinterpret_cast<uint4*>(v_BHSD), rows,
                                          vecs, shape.slots, src, dst, count);
  HYLO_CUDA_LAUNCH_CHECK("kv move_kernel");
}

void stream_delay(cudaStream_t stream, int microseconds) {
  delay_kernel<<<1, 1, 0, stream>>>(1000ull * unsigned(std::max(microseconds, 0)));
  HYLO_CUDA_LAUNCH_CHECK("delay_kernel");
}

}  // namespace hylo::cuda
