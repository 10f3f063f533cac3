// Attention forward on warpgroup MMA (sm_90a), head dims 64 and 128, tiles in and O out by TMA
// (tma.cuh). Built only for sm_90a (HYLO_WGMMA); attention_fwd_mma.cu serves other targets.
#include <cuda_bf16.h>

#include <climits>
#include <cmath>

#include "kernels/attention/attention_fwd.cuh"
#include "kernels/attention/wgmma.cuh"

#if HYLO_WGMMA
namespace hylo::cuda::attn {
namespace {

// A block is two warpgroups, each the owner of 64 query rows (warp w of a warpgroup owns rows
// 16w..16w+15, its online-softmax state in registers), sharing the key tiles of the block's 128
// rows: every K and V tile comes from L2 once for 128 rows instead of once per 64. The two
// warpgroups never wait for each other. Each visits only its own key tiles; the buffers hold
// kFwdStages<D> K and as many V tiles, filled in the order of the block's walk (tile i of the walk
// in stage i % kFwdStages), and a buffer is refilled by whichever warp is the last of the tile's
// users to be done with it (a count per buffer in shared memory; its users are the 4 warps of each
// warpgroup whose rows see the tile). So a warpgroup waits only for bytes, never for the other
// warpgroup, unless it runs a whole pipeline ahead of it.
//
// S = Q K^T reads Q and K straight from the swizzled tiles (D / 16 k-steps); O += P V takes P from
// registers and V as an N-major B, one product per 64-column half of O. A warp whose rows see none
// of a tile still runs its warpgroup's products; its scores are masked to -inf like any disallowed
// pair.
//
// Shared memory: two Q tiles (one per warpgroup; each later carries its O out), the K and V
// stages, an mbarrier per tile buffer, the counts. hd128: 97 KB, 2 blocks (16 warps) per SM, which
// 128 registers per thread allow; hd64: 49 KB.
constexpr int kFwdThreads = 2 * kWgThreads, kFwdRows = 2 * kWgRows;
template <int D>
constexpr int kFwdStages = 2;
constexpr int kFwdMinBlocks = 2;
template <int D>
constexpr int kFwdBuffers = 2 + 2 * kFwdStages<D>;  // Q per warpgroup, then K and V stages
template <int D>
constexpr int kFwdSmem = 1024 /* alignment slack */ + kFwdBuffers<D> * (kWgTileBytes<D> + 8 /* mbarrier */) +
                         2 * kFwdStages<D> * 4 /* counts */ + 12 /* walk */;
static_assert(kFwdMinBlocks * (kFwdSmem<128> + 1024) <= 228 * 1024, "the forward's shared memory must fit 2 blocks per SM");

// Shared-memory words (32-bit) by address: the release counts.
__device__ __forceinline__ uint32_t shared_add(uint32_t addr, uint32_t v) {
  uint32_t old;
  asm volatile("atom.acq_rel.cta.shared::cta.add.u32 %0, [%1], %2;\n" : "=r"(old) : "r"(addr), "r"(v) : "memory");
  return old;
}
__device__ __forceinline__ uint32_t shared_load(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ void shared_store(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}

template <int D>
__global__ void __launch_bounds__(kFwdThreads, kFwdMinBlocks)
    attention_fwd_wgmma_kernel(const __grid_constant__ FwdParams p) {
  constexpr int BN = kWgRows, kTileBytes = kWgTileBytes<D>, S = kFwdStages<D>, kBuffers = kFwdBuffers<D>;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = smem_u32(align_smem_1024(smem_raw));
  const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31, warp = (tid >> 5) & 3, g = lane >> 2;
  const QueryBlock<D, kFwdRows, BN> blk(p);
  const int T = blk.T, walk_top = blk.n_last;

  // Buffers: Q of warpgroup 0 and 1, K stages, V stages; then their mbarriers in the same order,
  // a count per K stage and per V stage, and the walk's constants that only refills read (kept in
  // shared memory: registers are what the hd128 loop lacks).
  const uint32_t sQ = base + wg * kTileBytes;
  auto sK = [&](int s) { return base + (2 + s) * kTileBytes; };
  auto sV = [&](int s) { return base + (2 + S + s) * kTileBytes; };
  const uint32_t bars = base + kBuffers * kTileBytes, q_bar = bars + 8 * wg;
  auto k_bar = [&](int s) { return bars + 8 * (2 + s); };
  auto v_bar = [&](int s) { return bars + 8 * (2 + S + s); };
  auto k_count = [&](int s) { return bars + 8 * kBuffers + 4 * s; };
  auto v_count = [&](int s) { return bars + 8 * kBuffers + 4 * (S + s); };
  const uint32_t walk = bars + 8 * kBuffers + 4 * 2 * S;  // bottom, shared_from, kv head

  // The key tiles of warpgroup c's rows: from lowest_key of its first row up to its last row
  // (none for rows past T). lowest_key is non-decreasing, so warpgroup 0's tiles start the block's
  // walk at its bottom and warpgroup 1's end it at its top, and the two overlap or touch.
  auto tiles_from = [&](int c) {
    const int r0 = blk.m0 + c * kWgRows;
    return r0 < T ? p.mask.lowest_key(r0) / BN : INT_MAX;
  };
  const int lo = tiles_from(wg), hi = min(blk.m0 + wg * kWgRows + kWgRows - 1, T - 1) / BN;
  // A warpgroup walks from the walk's top down to its own lowest tile, waiting for and releasing
  // without math any tile above its rows (at most the top one, for warpgroup 0). So each warpgroup
  // sees every fill of a buffer in order, and a wait's parity (that of the phase in progress or the
  // one just before, as mbarrier waits require) always names the fill it means. A tile's users are
  // the 4 warps of each warpgroup whose walk reaches it.
  // (From the shared tile on, both warpgroups' walks reach every tile.)
  auto load_k = [&](int n, int s, int hk) {
    mbarrier_arrive_expect_bytes(k_bar(s), kTmaTileBytes<D>);
    load_head_tile<D>(p.tm_k, sK(s), n * BN, hk, blockIdx.z, k_bar(s));
  };
  auto load_v = [&](int n, int s, int hk) {
    mbarrier_arrive_expect_bytes(v_bar(s), kTmaTileBytes<D>);
    load_head_tile<D>(p.tm_v, sV(s), n * BN, hk, blockIdx.z, v_bar(s));
  };
  const int walk_bottom = blk.n_first;
  if (tid == 0) {
    for (int i = 0; i < kBuffers; ++i) mbarrier_init(bars + 8 * i, 1);
    for (int s = 0; s < 2 * S; ++s) shared_store(k_count(s), 0);
    shared_store(walk, walk_bottom);
    shared_store(walk + 4, max(tiles_from(0), tiles_from(1)));
    shared_store(walk + 8, blk.hk);
    mbarrier_init_fence();
    for (int c = 0; c < 2; ++c)
      if (blk.m0 + c * kWgRows < T) {
        mbarrier_arrive_expect_bytes(bars + 8 * c, kTmaTileBytes<D>);
        load_head_tile<D>(p.tm_q, base + c * kTileBytes, blk.m0 + c * kWgRows, blk.h, blk.b, bars + 8 * c);
      }
    for (int i = 0; i < S && walk_top - i >= walk_bottom; ++i) {
      load_k(walk_top - i, i, blk.hk);
      load_v(walk_top - i, i, blk.hk);
    }
  }
  __syncthreads();  // the mbarriers and counts are set up (no block-wide barrier follows)
  if (lo == INT_MAX) return;  // rows past T

  // Called by lane 0 of each warp once its warp is done with tile n's buffer in stage s: the last
  // of the tile's users refills the buffer with the tile S steps further down the walk. It resets
  // the count before its arrival on the buffer's mbarrier (a release), which every next user waits
  // on (an acquire) before counting.
  auto release = [&](uint32_t count, int n, auto refill) {
    const uint32_t users = n >= int(shared_load(walk + 4)) ? 8 : 4;
    if (shared_add(count, 1) == users - 1) {
      shared_store(count, 0);
      if (n - S >= int(shared_load(walk))) refill(n - S, int(shared_load(walk + 8)));
    }
  };
  // A buffer's fill f holds tile i = f * S + s of the walk and completes its mbarrier's phase f.

  const int w0 = blk.m0 + wg * kWgRows + warp * 16, w1 = w0 + 15;
  const int w1_lo = p.mask.lowest_key(w1);
  int row_lo[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) row_lo[half] = p.mask.lowest_key(w0 + g + 8 * half);

  float o_acc[D / 8][4];  // C tile j = output columns 8j..8j+7
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};  // max of raw scores; partial sum
  zero_acc(o_acc);

  mbarrier_wait(q_bar, 0);
  if (walk_top > hi) {  // the walk's top tile, above warpgroup 0's rows: its fill 0 of stage 0
    mbarrier_wait(k_bar(0), 0);
    mbarrier_wait(v_bar(0), 0);
    if (lane == 0) {
      release(k_count(0), walk_top, [&](int next, int hk) { load_k(next, 0, hk); });
      release(v_count(0), walk_top, [&](int next, int hk) { load_v(next, 0, hk); });
    }
  }
  for (int n = hi; n >= lo; --n) {
    const int i = walk_top - n, s = i % S;
    const uint32_t parity = (i / S) & 1;
    mbarrier_wait(k_bar(s), parity);
    const int n0 = n * BN;

    // S = Q K^T (raw scores, scaled inside exp2); the first k-step overwrites s_acc.
    float s_acc[BN / 8][4];
    uint32_t q_tile = sQ;
    asm volatile("" : "+r"(q_tile));  // its k-step descriptors formed here, not 8 registers held over the loop
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)
      wgmma_ss(s_acc, kmajor_desc<kWgRows>(q_tile, ks), kmajor_desc<BN>(sK(s), ks), ks > 0);
    wgmma_commit();
    wgmma_wait_all();
    if (lane == 0) release(k_count(s), n, [&](int next, int hk) { load_k(next, s, hk); });

    if (!(n0 + BN - 1 <= w0 && n0 >= w1_lo)) mask_scores(s_acc, w0, row_lo, n0, lane);
    online_softmax(s_acc, o_acc, row_max, row_sum, p.scale_log2);

    // O += P V, 16 keys per k-step: rows 16kk.. of the V tile read N-major, per 64-column half h
    // of V into C tiles 8h..8h+7 of O. The fence follows the rescaling of all of o_acc and the
    // P fragments, so it covers every register the products below read or write.
    uint32_t p_frag[BN / 16][4];
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) c_to_a(p_frag[kk], s_acc, kk);
    mbarrier_wait(v_bar(s), parity);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
      for (int h = 0; h < D / 64; ++h) wgmma_rs_bn(acc_half(o_acc, h), p_frag[kk], nmajor_desc<BN>(sV(s), kk, h));
    wgmma_commit();
    wgmma_wait_all();
    if (lane == 0) release(v_count(s), n, [&](int next, int hk) { load_v(next, s, hk); });
  }

  // Epilogue: finish the row sums across the quad, normalise, write lse, and O through this
  // warpgroup's Q tile (free once its warps are done reading it).
  float inv[2];
  finish_rows(row_max, row_sum, p.scale, p.lse + (size_t(blk.b) * p.Hq + blk.h) * T, w0, T, lane, inv);
  write_outputs_of([&] { warpgroup_sync(wg); }, (tid & (kWgThreads - 1)) == 0,
                   [&] { stage_rows<D>(sQ, o_acc, inv[0], inv[1], warp, lane); },
                   [&] { store_head_tile<D>(p.tm_out, sQ, blk.m0 + wg * kWgRows, blk.h, blk.b); });
}

}  // namespace

template <int D>
void launch_forward(const FwdParams& p, cudaStream_t stream) {
  launch_kernel<attention_fwd_wgmma_kernel<D>>(p, dim3(ceil_div(p.T, kFwdRows), p.Hq, p.B), kFwdThreads,
                                               kFwdSmem<D>, stream);
  HYLO_CUDA_LAUNCH_CHECK("attention_fwd_wgmma_kernel");
}
template void launch_forward<64>(const FwdParams&, cudaStream_t);
template void launch_forward<128>(const FwdParams&, cudaStream_t);

}  // namespace hylo::cuda::attn
#endif  // HYLO_WGMMA
