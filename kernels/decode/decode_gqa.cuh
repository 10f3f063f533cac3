// Decode for grouped-query attention (2 or more query heads per kv head), on tensor cores; also
// MHA at small batches (decode.cu, plan_for). Included by decode.cu only.
//
// A block takes up to kMmaHeads = 8 query heads of one kv head (larger groups take several blocks),
// so each k/v row is read once for all of them. Each of the kMmaWarps warps takes rounds of 16
// consecutive live keys in turn (round i of the block goes to warp i % kMmaWarps) and keeps its own
// online softmax over them; the warps merge at the end. A warp's k and v rows go by cp.async into
// its own shared buffer of Stages rounds (swizzled tiles, common/tiles.cuh): the next rounds
// are in flight while one is computed, with no register cost, and warps never wait for each other
// until the merge.
//
// The products are transposed against the training forward's: the round's 16 keys are the M side
// of mma.sync m16n8k16 and the heads its 8-wide N side, S^T = K Q^T (keys x heads) and
// O^T += V^T P^T (head dims x heads). A group's few heads as the M side were 16 zero-padded rows,
// and the products took twice the MMAs: S = Q K^T per 8 keys and O = P V per 8 dims, 32 per round
// at hd128 against 16 now. P^T passes from S^T's accumulators to O^T's B operand through one
// movmatrix per 8 keys, and a head's rescale falls on accumulator columns the thread computed
// itself. Against two heads per block in the MHA kernel's registers (each row read group / 2
// times, the repeats from L2), GQA steps at batch 64 ran 1.03-2.15x faster (experiments/results/
// decode/LOG.md).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/tiles.cuh"
#include "kernels/decode/decode_common.cuh"

namespace hylo::cuda::decode {

// Rounds of k/v rows each warp has in flight (the kernel's Stages), chosen by decode.cu from the
// grid (experiments/results/decode/LOG.md): 4 (130 KB of shared memory per block at hd128, 1 block per
// SM) when the grid fits one block per SM, else 3 (98 KB, 2 per SM). 3 was faster than 2 in runs
// of steps (GQA Hkv 4 batch 64 hd128 1.19x) and at most 2% slower per step; 4 was faster still in
// runs at one block per SM, and slower where it made two waves.
constexpr int kMmaStagesOneWave = 4, kMmaStages = 3;
// kMmaHeads: query heads per block, the n of m16n8k16; kMmaKeys: keys per warp round, its m.
constexpr int kMmaWarps = 4, kMmaThreads = kMmaWarps * 32, kMmaHeads = 8, kMmaKeys = 16;
constexpr int kMmaKeysPerStep = kMmaWarps * kMmaKeys;  // one round of every warp

template <int D, int Stages>
struct MmaLayout {  // dynamic shared memory, bytes: q tile, then per warp Stages stages of (k, v)
  static constexpr int kQTile = kMmaHeads * D * 2, kKvTile = kMmaKeys * D * 2, kStage = 2 * kKvTile;
  static constexpr uint32_t stage(int warp, int s) { return uint32_t(kQTile + (warp * Stages + s) * kStage); }
  static constexpr int kBytes = kQTile + kMmaWarps * Stages * kStage;
  // Floats per head row of the warps' merge; the 4 extra put the 32 lanes' stores in 32 banks.
  static constexpr int kMergeStride = D + 4;
  static_assert(kMmaWarps * kMmaHeads * kMergeStride * 4 <= kMmaWarps * Stages * kStage, "the merge reuses the stages");
};

// An 8 x 8 bf16 matrix in the C-fragment pattern (this thread: row g, columns 2c, 2c + 1),
// transposed across the warp into the same pattern.
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
  uint32_t y;
  asm("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

template <int D, int Stages>
__global__ void __launch_bounds__(kMmaThreads) decode_mma_kernel(const Params p) {
  using namespace attn;
  using L = MmaLayout<D, Stages>;
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ float red_m[kMmaWarps][kMmaHeads], red_l[kMmaWarps][kMmaHeads];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, c = lane % 4;
  const int split = blockIdx.x, b = blockIdx.z, chunk = blockIdx.y % p.chunks;
  const int hk = blockIdx.y / p.chunks, h0 = hk * p.group + chunk * kMmaHeads;
  const int heads = min(kMmaHeads, p.group - chunk * kMmaHeads);
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
      const uint32_t sK = s_base + L::stage(warp, st), sV = sK + L::kKvTile;
#pragma unroll
      for (int i = lane; i < kMmaKeys * kChunks; i += 32) {
        const int r = i / kChunks, ch = i % kChunks, j = jb + r;
        const bool inside = j < j1;
        const size_t off = inside ? size_t(p.live.slot(j)) * D + ch * 8 : 0;
        cp_async_16(sK + swizzled<kMmaKeys>(r, ch), k_S + off, inside ? 16 : 0);
        cp_async_16(sV + swizzled<kMmaKeys>(r, ch), v_S + off, inside ? 16 : 0);
      }
    }
    cp_async_commit();
  };
  auto round_start = [&](int i) { return j0 + (i * kMmaWarps + warp) * kMmaKeys; };

  // The first keys' loads go out before the wait on the previous kernel (decode.cu), q's after it
  // (zero rows past the group's heads).
  load_round(round_start(0), 0);
  cudaGridDependencySynchronize();
  for (int i = tid; i < kMmaHeads * kChunks; i += kMmaThreads) {
    const int r = i / kChunks, ch = i % kChunks;
    const bool inside = r < heads;
    cp_async_16(sQ + swizzled<kMmaHeads>(r, ch), p.q + ((size_t(b) * p.Hq + h0 + (inside ? r : 0)) * D + ch * 8),
                inside ? 16 : 0);
  }
  cp_async_commit();
#pragma unroll
  for (int st = 1; st < Stages; ++st) load_round(round_start(st), st);
  cp_async_wait_group<Stages - 1>();  // round 0 and q
  __syncthreads();                    // q from every thread

  // Q^T as the B fragments of every k-step (head dims 16 ks..), kept in registers for the step:
  // matrix i of ldmatrix is chunk 4 pr + i of the 8 head rows, b0 and b1 of k-steps 2 pr, 2 pr + 1.
  uint32_t qb[D / 16][2];
#pragma unroll
  for (int pr = 0; pr < D / 32; ++pr) {
    uint32_t r[4];
    ldmatrix_x4(r, sQ + swizzled<kMmaHeads>(lane & 7, 4 * pr + (lane >> 3)));
    qb[2 * pr][0] = r[0];
    qb[2 * pr][1] = r[1];
    qb[2 * pr + 1][0] = r[2];
    qb[2 * pr + 1][1] = r[3];
  }

  // This thread's heads 2c, 2c + 1 (index e): running max of raw scores, partial sums over its keys.
  float ot[D / 16][4], row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
  zero_acc(ot);
  for (int i = 0; round_start(i) < j1; ++i) {
    const int jb = round_start(i);
    const int st = i % Stages;
    const uint32_t sK = s_base + L::stage(warp, st), sV = sK + L::kKvTile;
    cp_async_wait_group<Stages - 1>();  // this round landed; the next ones may still be in flight
    __syncwarp();
    // S^T = K Q^T: keys jb + g (elements 0, 1) and jb + g + 8 (2, 3) against heads 2c, 2c + 1. Even
    // and odd k-steps in separate accumulators: two dependent chains of half the length.
    float s2[2][4];
    zero_acc(s2);
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      uint32_t a[4];
      load_frag_a<kMmaKeys>(a, sK, 0, ks, lane);
      mma_16816(s2[ks & 1], a, qb[ks][0], qb[ks][1]);
    }
    float s[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) s[e] = s2[0][e] + s2[1][e];
    if (jb + g >= j1) s[0] = s[1] = -INFINITY;
    if (jb + g + 8 >= j1) s[2] = s[3] = -INFINITY;

    // Online softmax per head, over the 16 keys held by the 8 lanes of this c.
    float corr[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float mx = fmaxf(row_max[e], fmaxf(s[e], s[2 + e]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
      // A head with nothing allowed yet keeps max -inf; subtracting 0 then keeps exp2(-inf) = 0.
      const float base = mx == -INFINITY ? 0.f : mx * p.scale_log2;
      corr[e] = fast_exp2(row_max[e] * p.scale_log2 - base);
      row_max[e] = mx;
      s[e] = fast_exp2(fmaf(s[e], p.scale_log2, -base));
      s[2 + e] = fast_exp2(fmaf(s[2 + e], p.scale_log2, -base));
      row_sum[e] = row_sum[e] * corr[e] + s[e] + s[2 + e];
    }

    // O^T += V^T P^T. P^T's 8 x 8 blocks (keys 0-7, then 8-15, x heads) transposed are the B
    // fragment (keys 2c.., head g); V^T's A fragment of dims 16 mt.. is the two-n-tile B loader's
    // registers in the order 0, 2, 1, 3.
    const uint32_t pb0 = movmatrix_trans(pack_bf16(s[0], s[1]));
    const uint32_t pb1 = movmatrix_trans(pack_bf16(s[2], s[3]));
#pragma unroll
    for (int mt = 0; mt < D / 16; ++mt) {
      uint32_t vb[4];
      load_frag_b_pair_trans<kMmaKeys>(vb, sV, 0, mt, lane);
      const uint32_t va[4] = {vb[0], vb[2], vb[1], vb[3]};
      ot[mt][0] *= corr[0];
      ot[mt][1] *= corr[1];
      ot[mt][2] *= corr[0];
      ot[mt][3] *= corr[1];
      mma_16816(ot[mt], va, pb0, pb1);
    }
    __syncwarp();                             // every lane's reads of this stage are done
    load_round(round_start(i + Stages), st);  // refill it
  }
  cp_async_wait_all();
  cudaTriggerProgrammaticLaunchCompletion();  // as in decode_kernel (decode_mha.cuh)

  // Merge the warps through the (now idle) stage buffers: O^T rows 16 mt + g and + 8, heads 2c + e.
  __syncthreads();
  auto red_acc = reinterpret_cast<float(*)[kMmaHeads][L::kMergeStride]>(smem + L::kQTile);
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    float sum = row_sum[e];
    sum += __shfl_xor_sync(0xffffffffu, sum, 4);
    sum += __shfl_xor_sync(0xffffffffu, sum, 8);
    sum += __shfl_xor_sync(0xffffffffu, sum, 16);
    if (g == 0) {
      red_m[warp][2 * c + e] = row_max[e] * p.scale_log2;  // scaled log2 units (Params)
      red_l[warp][2 * c + e] = sum;
    }
#pragma unroll
    for (int mt = 0; mt < D / 16; ++mt) {
      red_acc[warp][2 * c + e][16 * mt + g] = ot[mt][e];
      red_acc[warp][2 * c + e][16 * mt + g + 8] = ot[mt][2 + e];
    }
  }
  __syncthreads();
  merge_and_store<kMmaWarps, kMmaHeads, D, L::kMergeStride>(p, red_m, red_l, red_acc, heads, b, h0, split, tid,
                                                            kMmaThreads);
}

}  // namespace hylo::cuda::decode
