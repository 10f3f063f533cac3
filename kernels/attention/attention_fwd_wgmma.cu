// Attention forward on warpgroup MMA (sm_90a), head dims 64 and 128, tiles in and O out by TMA
// (tma.cuh). Built only for sm_90a (HYLO_WGMMA); attention_fwd_mma.cu serves other targets.
#include <cuda_bf16.h>

#include <cmath>

#include "kernels/attention/attention_fwd.cuh"
#include "kernels/attention/wgmma.cuh"

#if HYLO_WGMMA
namespace hylo::cuda::attn {
namespace {

// Warpgroup MMA (sm_90a), head dims 64 and 128: one warpgroup per 64 queries (warp w owns rows
// 16w..16w+15, its online-softmax state in registers), key tiles of 64. S = Q K^T reads Q
// and K straight from the swizzled tiles (D / 16 k-steps); O += P V takes P from registers and V as
// an N-major B, one product per 64-column half of O. A warp whose rows see none of a tile still
// runs the warpgroup's products; its scores are masked to -inf like any disallowed pair.
//
// Shared memory: Q, then kWgFwdStages<D> K buffers and as many V buffers (each 64 x D, whole KB),
// an mbarrier per buffer and alignment slack. The kernel is latency bound (Nsight Compute: issue
// slots ~41% busy at 8 warps per SM), so the buffers are sized for resident blocks:
//   hd128 (16 KB tiles) keeps one K and one V buffer: 49 KB, 4 blocks (16 warps) per SM, which its
//   125 registers just allow (two stages of both: 81 KB, 2 blocks; one V buffer: 65 KB, 3).
//   The price: K(n - 1) can be loaded only once every warp's S(n) has read the buffer (a barrier
//   after S), and V(n) only once P V(n + 1) has, so their loads hide under part of an iteration.
//   hd64 (8 KB tiles) keeps two stages of both: its 41 KB fit 5 blocks per SM, as many as its
//   registers (91) allow, so single buffers would win it no block and only shorten the prefetch.
template <int D>
constexpr int kWgFwdStages = D == 128 ? 1 : 2;
// Tile buffers: Q and kWgFwdStages<D> each of K and V; an mbarrier per buffer and a counter per K
// and V buffer (the pair protocol below).
template <int D>
constexpr int kWgFwdSmem = 1024 /* alignment slack */ + (1 + 2 * kWgFwdStages<D>) * (kWgTileBytes<D> + 8) +
                           2 * kWgFwdStages<D> * 4;
template <int D>
constexpr int kWgFwdMinBlocks = D == 128 ? 4 : 3;
// An SM has 228 KB of shared memory, of which the runtime reserves 1 KB per resident block.
static_assert(kWgFwdMinBlocks<64> * (kWgFwdSmem<64> + 1024) <= 228 * 1024 &&
                  kWgFwdMinBlocks<128> * (kWgFwdSmem<128> + 1024) <= 228 * 1024,
              "the forward's shared memory must fit kWgFwdMinBlocks blocks per SM");

// Blocks run in pairs (clusters of 2, tma.cuh): rank 0 owns query tile 2k + 1, rank 1 tile 2k of
// the same head. The key tiles both visit ("shared": from the upper's first to the lower's last)
// are read from L2 once and copied into both blocks; the upper's diagonal tile(s) above and the
// lower's tiles below are each block's own. pbb(512, 128) and swa(512) read 22 and 10 tiles per
// pair where single blocks read 39/4 and 18. Past an odd tile count the upper rank is padding: it
// exits, and the lower works alone.
template <int D>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(kWgThreads, kWgFwdMinBlocks<D>)
    attention_fwd_wgmma_kernel(const __grid_constant__ FwdParams p) {
  constexpr int BM = kWgRows, BN = kWgRows, kTileBytes = kWgTileBytes<D>;
  constexpr int kStages = kWgFwdStages<D>;
  constexpr bool kOne = kStages == 1;
  static_assert(BM == BN, "a pair's tiles 2k, 2k + 1 are key tiles 2k, 2k + 1");
  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = smem_u32(align_smem_1024(smem_raw));
  // Layout: Q, K stage 0 (, K stage 1), V stage 0 (, V stage 1); with one buffer every stage is it.
  const uint32_t sQ = base;
  auto sK = [&](int stage) { return base + (1 + (kOne ? 0 : stage)) * kTileBytes; };
  auto sV = [&](int stage) { return base + (1 + kStages + (kOne ? 0 : stage)) * kTileBytes; };

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2;
  const QueryBlock<D, BM, BN> blk(p);
  const int T = blk.T, m0 = blk.m0, n_first = blk.n_first, n_last = blk.n_last, hk = blk.hk;
  if (m0 >= T) return;  // padding of an odd tile count (the partner knows: `paired` below)
  const uint32_t rank = cluster_rank();
  const bool paired = (rank ? m0 + BM : m0) < T;
  // Shared key tiles [shared_lo, shared_hi] (empty when unpaired).
  const int shared_lo = !paired ? 1 : rank ? p.mask.lowest_key(m0 + BM) / BN : n_first;
  const int shared_hi = !paired ? 0 : rank ? n_last : n_last - 1;

  // Tiles come by the copy engine, each buffer with an mbarrier of its own, after the tiles in the
  // same order. Key tile n goes to stage n % kStages (the same buffer in both blocks of a pair), as
  // that stage's ((n_last - n) / kStages)-th fill of this block; a wait names the fill's parity.
  // Two stages: refills happen at the top of iteration n, after a barrier that says every warp is
  // done with tile n + 1's products: K(n - 1) and V(n - 1) into stage ^ 1, a tile ahead.
  // One buffer each: V(n) goes in at the top of iteration n (P V(n + 1) has read the buffer), its
  // load hidden under S(n) and the softmax; K(n - 1) after a barrier behind S(n), hidden under the
  // softmax and P V(n).
  constexpr int kBars = 1 + 2 * kStages;  // one per tile buffer
  const uint32_t q_bar = base + kBars * kTileBytes;
  auto k_bar = [&](int stage) { return q_bar + 8 * (1 + (kOne ? 0 : stage)); };
  auto v_bar = [&](int stage) { return q_bar + 8 * (1 + kStages + (kOne ? 0 : stage)); };
  // The K and V buffers' counters (used in rank 0's copy) follow the mbarriers, in the same order.
  auto count_of = [&](uint32_t full_bar) { return q_bar + 8 * kBars + (full_bar - q_bar - 8) / 2; };
  auto fill_parity = [&](int n) { return uint32_t(((n_last - n) / kStages) & 1); };
  if (tid == 0) {
    for (int i = 0; i < kBars; ++i) mbarrier_init(q_bar + 8 * i, 1);
    for (int i = 0; i < 2 * kStages; ++i) asm volatile("st.shared.u32 [%0], 0;\n" ::"r"(q_bar + 8 * kBars + 4 * i));
    mbarrier_init_fence();
  }
  // A fill of a K or V buffer with key tile n, in two steps by thread 0 once this block's warps are
  // done with the buffer. claim: announce the bytes on this block's mbarrier and settle who copies
  // the tile: this block its own tiles; a shared tile the block that frees its buffer second (its
  // count finds the other's), into both. Neither block waits for the other: the first goes on with
  // its products and meets the tile at its mbarrier. The count is a round trip to rank 0's shared
  // memory, so the loop below issues a product between claim and copy.
  auto claim = [&](uint32_t full_bar, int n) -> uint32_t {  // the blocks to copy to, as a cluster mask
    if (tid != 0) return 0;
    mbarrier_arrive_expect_bytes(full_bar, kTmaTileBytes<D>);
    if (n < shared_lo || n > shared_hi) return 1u << rank;
    return (atomic_inc_in(count_of(full_bar), 0) & 1) ? 3u : 0u;
  };
  auto copy = [&](const CUtensorMap& map, uint32_t buf, uint32_t full_bar, int n, uint32_t to_blocks) {
    if (to_blocks) load_head_tile_to<D>(map, buf, n * BN, hk, blk.b, full_bar, uint16_t(to_blocks));
  };
  if (tid == 0) {
    mbarrier_arrive_expect_bytes(q_bar, kTmaTileBytes<D>);
    load_head_tile<D>(p.tm_q, sQ, m0, blk.h, blk.b, q_bar);
  }
  // The partner's mbarriers and counters must be initialised before a copy or count reaches them.
  // Only thread 0 wrote them, so only it pays for the release fence; the barrier itself is relaxed.
  // Without a partner, the barrier shows the initialised mbarriers to this block's threads.
  if (paired) {
    if (tid == 0) fence_cluster();
    cluster_arrive_relaxed();
    cluster_wait();
  } else {
    __syncthreads();
  }
  {
    const uint32_t k_to = claim(k_bar(n_last & 1), n_last), v_to = claim(v_bar(n_last & 1), n_last);
    copy(p.tm_k, sK(n_last & 1), k_bar(n_last & 1), n_last, k_to);
    copy(p.tm_v, sV(n_last & 1), v_bar(n_last & 1), n_last, v_to);
  }

  const int w0 = m0 + warp * 16, w1 = w0 + 15;
  const int w1_lo = p.mask.lowest_key(w1);
  int row_lo[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) row_lo[half] = p.mask.lowest_key(w0 + g + 8 * half);

  float o_acc[D / 8][4];  // C tile j = output columns 8j..8j+7
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};  // max of raw scores; partial sum
#pragma unroll
  for (int j = 0; j < D / 8; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) o_acc[j][i] = 0.f;

  mbarrier_wait(q_bar, 0);
  for (int n = n_last; n >= n_first; --n) {
    const int stage = n & 1;
    mbarrier_wait(k_bar(stage), fill_parity(n));
    __syncthreads();  // every warp is done with tile n + 1's products: the buffers below may be refilled
    uint32_t k_to = 0, v_to = 0;
    if constexpr (kOne) {
      if (n < n_last) v_to = claim(v_bar(0), n);
    } else if (n > n_first) {
      k_to = claim(k_bar(stage ^ 1), n - 1);
      v_to = claim(v_bar(stage ^ 1), n - 1);
    }
    const int n0 = n * BN;

    // S = Q K^T (raw scores, scaled inside exp2); the first k-step overwrites s_acc.
    float s_acc[BN / 8][4];
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)
      wgmma_ss(s_acc, kmajor_desc<BM>(sQ, ks), kmajor_desc<BN>(sK(stage), ks), ks > 0);
    wgmma_commit();
    if constexpr (kOne) {
      copy(p.tm_v, sV(0), v_bar(0), n, v_to);
    } else {
      copy(p.tm_k, sK(stage ^ 1), k_bar(stage ^ 1), n - 1, k_to);
      copy(p.tm_v, sV(stage ^ 1), v_bar(stage ^ 1), n - 1, v_to);
    }
    wgmma_wait_all();
    if (kOne && n > n_first) {
      __syncthreads();  // every warp's S(n) has read the K buffer
      k_to = claim(k_bar(0), n - 1);
    }

    if (!(n0 + BN - 1 <= w0 && n0 >= w1_lo)) mask_scores(s_acc, w0, row_lo, n0, lane);
    online_softmax(s_acc, o_acc, row_max, row_sum, p.scale_log2);

    // O += P V, 16 keys per k-step: rows 16kk.. of the V tile read N-major, per 64-column half h
    // of V into C tiles 8h..8h+7 of O. The fence follows the rescaling of all of o_acc and the
    // P fragments, so it covers every register the products below read or write.
    uint32_t p_frag[BN / 16][4];
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) c_to_a(p_frag[kk], s_acc, kk);
    if constexpr (kOne) copy(p.tm_k, sK(0), k_bar(0), n - 1, k_to);
    mbarrier_wait(v_bar(stage), fill_parity(n));  // V(n)
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
      for (int h = 0; h < D / 64; ++h) wgmma_rs_bn(acc_half(o_acc, h), p_frag[kk], nmajor_desc<BN>(sV(stage), kk, h));
    wgmma_commit();
    wgmma_wait_all();
  }

  // Epilogue: finish the row sums across the quad, normalise, write lse, and O through the Q tile
  // (free once every warp is done reading it).
  float inv[2];
  finish_rows(row_max, row_sum, p.scale, p.lse + (size_t(blk.b) * p.Hq + blk.h) * T, w0, T, lane, inv);
  write_outputs([&] { stage_rows<D>(sQ, o_acc, inv[0], inv[1], warp, lane); },
                [&] { store_head_tile<D>(p.tm_out, sQ, m0, blk.h, blk.b); });
}

}  // namespace

template <int D>
void launch_forward(const FwdParams& p, cudaStream_t stream) {
  launch_kernel<attention_fwd_wgmma_kernel<D>>(p, dim3(2 * ceil_div(p.T, 2 * kWgRows), p.Hq, p.B), kWgThreads,
                                               kWgFwdSmem<D>, stream, "attention_fwd_wgmma_kernel");
}
template void launch_forward<64>(const FwdParams&, cudaStream_t);
template void launch_forward<128>(const FwdParams&, cudaStream_t);

}  // namespace hylo::cuda::attn
#endif  // HYLO_WGMMA
