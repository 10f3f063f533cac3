// Attention forward on mma.sync (targets other than sm_90a), head dims 64 and 128: cp.async tile
// loads, register fragments.
#include <cuda_bf16.h>

#include <cmath>

#include "kernels/attention/attention_fwd.cuh"

#if !HYLO_WGMMA
namespace hylo::cuda::attn {
namespace {

// Tiling (WarpTiling: warps of query rows, key tiles of kOtherTile): hd128 needs twice the
// registers per row, so 16 rows per warp. The shapes are the fastest of the v3 sweep in
// experiments/results/attention/LOG.md.
template <int D> struct FwdTraits;
template <> struct FwdTraits<64> : WarpTiling<4, 2, 64, 2> {};
template <> struct FwdTraits<128> : WarpTiling<4, 1, 64, 2> {};

template <int D>
__global__ void __launch_bounds__(FwdTraits<D>::kWarps * 32, FwdTraits<D>::kMinBlocks)
    attention_fwd_kernel(const FwdParams p) {
  using Tr = FwdTraits<D>;
  constexpr int kThreads = Tr::kWarps * 32, kMTiles = Tr::kMTiles, BN = Tr::kOtherTile;
  constexpr int kWarpRows = 16 * kMTiles, BM = Tr::kWarps * kWarpRows;
  constexpr int kTileBytes = BN * D * 2;
  extern __shared__ __align__(128) unsigned char smem[];
  // Layout: Q (BM x D), then K stage 0, V stage 0, K stage 1, V stage 1 (BN x D each).
  const uint32_t sQ = smem_u32(smem);
  auto sK = [&](int stage) { return sQ + BM * D * 2 + stage * 2 * kTileBytes; };
  auto sV = [&](int stage) { return sK(stage) + kTileBytes; };

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2;
  const QueryBlock<D, BM, BN> blk(p);
  const int T = blk.T, m0 = blk.m0, n_first = blk.n_first, n_last = blk.n_last;

  load_tile<BM, D, kThreads>(sQ, p.q + blk.q_off, blk.q_stride, m0, T, tid);
  blk.template load_kv<kThreads>(p, n_last, sK(0), sV(0), tid);
  cp_async_commit();

  // This warp's rows and, per thread, the allowed key range [row_lo, row] of its two rows per m-tile.
  const int w0 = m0 + warp * kWarpRows, w1 = w0 + kWarpRows - 1;
  const int w0_lo = p.mask.lowest_key(w0), w1_lo = p.mask.lowest_key(w1);
  int row_lo[kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) row_lo[mt][half] = p.mask.lowest_key(w0 + mt * 16 + g + 8 * half);

  uint32_t q_frag[kMTiles][D / 16][4];
  float o_acc[kMTiles][D / 8][4];
  float row_max[kMTiles][2], row_sum[kMTiles][2];  // max of raw scores; this thread's partial sum
  zero_acc(o_acc);
  zero_acc(row_sum);
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) row_max[mt][0] = row_max[mt][1] = -INFINITY;

  int stage = 0;
  for (int n = n_last; n >= n_first; --n, stage ^= 1) {
    cp_async_wait_all();
    __syncthreads();  // tile n visible to all; everyone done with stage^1 from the previous step
    if (n > n_first) {
      blk.template load_kv<kThreads>(p, n - 1, sK(stage ^ 1), sV(stage ^ 1), tid);
      cp_async_commit();
    }
    if (n == n_last) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks) load_frag_a<BM>(q_frag[mt][ks], sQ, warp * kWarpRows + mt * 16, ks, lane);
    }
    const int n0 = n * BN;
    // Warp-uniform: no allowed pair (all keys after the rows, or before the lowest key) -> skip.
    if (w0 >= T || n0 > w1 || n0 + BN - 1 < w0_lo) continue;
    const bool needs_mask = !(n0 + BN - 1 <= w0 && n0 >= w1_lo);

    // S = Q K^T for this warp's rows (raw scores, scaled inside exp2).
    float s_acc[kMTiles][BN / 8][4];
    zero_acc(s_acc);
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)
#pragma unroll
      for (int np = 0; np < BN / 16; ++np) {
        uint32_t kb[4];
        load_frag_b_pair<BN>(kb, sK(stage), np * 16, ks, lane);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt)
          mma_16816_x2(s_acc[mt][2 * np], s_acc[mt][2 * np + 1], q_frag[mt][ks], kb);
      }

#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      if (needs_mask) mask_scores(s_acc[mt], w0 + mt * 16, row_lo[mt], n0, lane);
      online_softmax(s_acc[mt], o_acc[mt], row_max[mt], row_sum[mt], p.scale_log2);
    }

    // O += P V, P straight from the score registers.
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      uint32_t p_frag[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) c_to_a(p_frag[mt], s_acc[mt], kk);
#pragma unroll
      for (int np = 0; np < D / 16; ++np) {
        uint32_t vb[4];
        load_frag_b_pair_trans<BN>(vb, sV(stage), kk * 16, np, lane);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt)
          mma_16816_x2(o_acc[mt][2 * np], o_acc[mt][2 * np + 1], p_frag[mt], vb);
      }
    }
  }

  // Epilogue: finish the row sums across the quad, normalise, write out and lse.
  __nv_bfloat16* out_head = p.out + blk.q_off;
  float* lse_row = p.lse + (size_t(blk.b) * p.Hq + blk.h) * T;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    float inv[2];
    finish_rows(row_max[mt], row_sum[mt], p.scale, lse_row, w0 + mt * 16, T, lane, inv);
    store_rows<D>(out_head, blk.q_stride, w0 + mt * 16, T, o_acc[mt], inv[0], inv[1], lane);
  }
}

}  // namespace

template <int D>
void launch_forward(const FwdParams& p, cudaStream_t stream) {
  using Tr = FwdTraits<D>;
  constexpr int kThreads = Tr::kWarps * 32, BM = Tr::kWarps * 16 * Tr::kMTiles;
  constexpr int kSmem = (BM + 4 * Tr::kOtherTile) * D * 2;
  launch_kernel<attention_fwd_kernel<D>>(p, dim3(ceil_div(p.T, BM), p.Hq, p.B), kThreads, kSmem, stream);
  HYLO_CUDA_LAUNCH_CHECK("attention_fwd_kernel");
}
template void launch_forward<64>(const FwdParams&, cudaStream_t);
template void launch_forward<128>(const FwdParams&, cudaStream_t);

}  // namespace hylo::cuda::attn
#endif  // !HYLO_WGMMA
