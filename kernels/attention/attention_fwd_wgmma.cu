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
template <int D>
constexpr int kWgFwdSmem = 1024 /* alignment slack */ + (1 + 2 * kWgFwdStages<D>) * (kWgTileBytes<D> + 8 /* mbarrier */);
template <int D>
constexpr int kWgFwdMinBlocks = D == 128 ? 4 : 3;
// An SM has 228 KB of shared memory, of which the runtime reserves 1 KB per resident block.
static_assert(kWgFwdMinBlocks<64> * (kWgFwdSmem<64> + 1024) <= 228 * 1024 &&
                  kWgFwdMinBlocks<128> * (kWgFwdSmem<128> + 1024) <= 228 * 1024,
              "the forward's shared memory must fit kWgFwdMinBlocks blocks per SM");

template <int D>
__global__ void __launch_bounds__(kWgThreads, kWgFwdMinBlocks<D>)
    attention_fwd_wgmma_kernel(const __grid_constant__ FwdParams p) {
  constexpr int BM = kWgRows, BN = kWgRows, kTileBytes = kWgTileBytes<D>;
  constexpr int kStages = kWgFwdStages<D>;
  constexpr bool kOne = kStages == 1;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = smem_u32(align_smem_1024(smem_raw));
  // Layout: Q, K stage 0 (, K stage 1), V stage 0 (, V stage 1); with one buffer every stage is it.
  const uint32_t sQ = base;
  auto sK = [&](int stage) { return base + (1 + (kOne ? 0 : stage)) * kTileBytes; };
  auto sV = [&](int stage) { return base + (1 + kStages + (kOne ? 0 : stage)) * kTileBytes; };

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2;
  const QueryBlock<D, BM, BN> blk(p);
  const int T = blk.T, m0 = blk.m0, n_first = blk.n_first, n_last = blk.n_last, hk = blk.hk;

  // Tiles come by the copy engine (thread 0 asks), each buffer with an mbarrier of its own, after
  // the tiles in the same order. Tile n is the i-th visited (i = n_last - n): K and V stage
  // i % kStages, that stage's (i / kStages)-th fill; a wait names the fill's parity.
  // Two stages: refills happen at the top of iteration n, after a barrier that says every warp is
  // done with tile n + 1's products: K(n - 1) and V(n - 1) into stage ^ 1, a tile ahead.
  // One buffer each: V(n) goes in at the top of iteration n (P V(n + 1) has read the buffer), its
  // load hidden under S(n) and the softmax; K(n - 1) after a barrier behind S(n), hidden under the
  // softmax and P V(n).
  constexpr int kBars = 1 + 2 * kStages;  // one per tile buffer
  const uint32_t q_bar = base + kBars * kTileBytes;
  auto k_bar = [&](int stage) { return q_bar + 8 * (1 + (kOne ? 0 : stage)); };
  auto v_bar = [&](int stage) { return q_bar + 8 * (1 + kStages + (kOne ? 0 : stage)); };
  auto fill_parity = [&](int i) { return uint32_t(kOne ? i & 1 : (i >> 1) & 1); };
  if (tid == 0) {
    for (int i = 0; i < kBars; ++i) mbarrier_init(q_bar + 8 * i, 1);
    mbarrier_init_fence();
  }
  auto load_k = [&](int n, int stage) {
    if (tid == 0) {
      mbarrier_arrive_expect_bytes(k_bar(stage), kTmaTileBytes<D>);
      load_head_tile<D>(p.tm_k, sK(stage), n * BN, hk, blk.b, k_bar(stage));
    }
  };
  auto load_v = [&](int n, int stage) {
    if (tid == 0) {
      mbarrier_arrive_expect_bytes(v_bar(stage), kTmaTileBytes<D>);
      load_head_tile<D>(p.tm_v, sV(stage), n * BN, hk, blk.b, v_bar(stage));
    }
  };
  if (tid == 0) {
    mbarrier_arrive_expect_bytes(q_bar, kTmaTileBytes<D>);
    load_head_tile<D>(p.tm_q, sQ, m0, blk.h, blk.b, q_bar);
  }
  load_k(n_last, 0);
  load_v(n_last, 0);
  // The barrier that shows the initialised mbarriers to the other threads comes after thread 0 has
  // issued the first copies (it initialised them itself), so those start a barrier earlier.
  __syncthreads();

  const int w0 = m0 + warp * 16, w1 = w0 + 15;
  const int w1_lo = p.mask.lowest_key(w1);
  int row_lo[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) row_lo[half] = p.mask.lowest_key(w0 + g + 8 * half);

  float o_acc[D / 8][4];  // C tile j = output columns 8j..8j+7
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};  // max of raw scores; partial sum
  zero_acc(o_acc);

  mbarrier_wait(q_bar, 0);
  int stage = 0;
  for (int n = n_last; n >= n_first; --n, stage ^= 1) {
    const int i = n_last - n;
    mbarrier_wait(k_bar(stage), fill_parity(i));
    __syncthreads();  // every warp is done with tile n + 1's products: the buffers below may be refilled
    if constexpr (kOne) {
      if (n < n_last) load_v(n, 0);
    } else if (n > n_first) {
      load_k(n - 1, stage ^ 1);
      load_v(n - 1, stage ^ 1);
    }
    const int n0 = n * BN;

    // S = Q K^T (raw scores, scaled inside exp2); the first k-step overwrites s_acc.
    float s_acc[BN / 8][4];
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)
      wgmma_ss(s_acc, kmajor_desc<BM>(sQ, ks), kmajor_desc<BN>(sK(stage), ks), ks > 0);
    wgmma_commit();
    wgmma_wait_all();
    if (kOne && n > n_first) {
      __syncthreads();  // every warp's S(n) has read the K buffer
      load_k(n - 1, 0);
    }

    if (!(n0 + BN - 1 <= w0 && n0 >= w1_lo)) mask_scores(s_acc, w0, row_lo, n0, lane);
    online_softmax(s_acc, o_acc, row_max, row_sum, p.scale_log2);

    // O += P V, 16 keys per k-step: rows 16kk.. of the V tile read N-major, per 64-column half h
    // of V into C tiles 8h..8h+7 of O. The fence follows the rescaling of all of o_acc and the
    // P fragments, so it covers every register the products below read or write.
    uint32_t p_frag[BN / 16][4];
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) c_to_a(p_frag[kk], s_acc, kk);
    mbarrier_wait(v_bar(stage), fill_parity(i));  // V(n)
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
  launch_kernel<attention_fwd_wgmma_kernel<D>>(p, dim3(ceil_div(p.T, kWgRows), p.Hq, p.B), kWgThreads,
                                               kWgFwdSmem<D>, stream);
  HYLO_CUDA_LAUNCH_CHECK("attention_fwd_wgmma_kernel");
}
template void launch_forward<64>(const FwdParams&, cudaStream_t);
template void launch_forward<128>(const FwdParams&, cudaStream_t);

}  // namespace hylo::cuda::attn
#endif  // HYLO_WGMMA
