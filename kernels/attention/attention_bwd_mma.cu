// Attention backward on mma.sync (targets other than sm_90a), head dims 64 and 128: the dK/dV and
// dQ kernels of attention_bwd.cuh's scheme with cp.async tile loads and register fragments.
#include <cuda_bf16.h>

#include <cmath>

#include "kernels/attention/attention_bwd.cuh"

#if !HYLO_WGMMA
namespace hylo::cuda::attn {
namespace {

// ---- dK, dV over key tiles ----------------------------------------------------------------------
// Warps of 16 * kMTiles keys; query tiles of kOtherTile rows, consumed 16 queries at a time so that
// only a 16-query slab of S^T and dP^T is live and the registers go to the dK/dV accumulators.
// K and V fragments are re-read from shared memory for every slab: the v3 sweep in
// experiments/results/attention/LOG.md found that faster than holding them in registers, and 16 keys
// per warp faster than 32 (which spills), at both head dims: one tiling serves both.
using DkvTiling = WarpTiling<4, 1, 64, 2>;

template <int D>
__global__ void __launch_bounds__(DkvTiling::kWarps * 32, DkvTiling::kMinBlocks)
    attention_bwd_dkdv_kernel(const BwdParams p) {
  using Tr = DkvTiling;
  constexpr int kThreads = Tr::kWarps * 32, MT = Tr::kMTiles, kWarpKeys = 16 * MT;
  constexpr int BN = Tr::kWarps * kWarpKeys, BM = Tr::kOtherTile;
  constexpr int kKvBytes = BN * D * 2, kQBytes = BM * D * 2;
  extern __shared__ __align__(128) unsigned char smem[];
  // Layout: K, V (BN x D); per stage: Q, dO (BM x D); then per stage: lse, D_i (BM floats).
  const uint32_t sK = smem_u32(smem), sV = sK + kKvBytes;
  auto sQ = [&](int stage) { return sK + 2 * kKvBytes + stage * 2 * kQBytes; };
  auto sdO = [&](int stage) { return sQ(stage) + kQBytes; };
  float* vec_base = reinterpret_cast<float*>(smem + 2 * kKvBytes + 4 * kQBytes);
  auto sLse = [&](int stage) { return vec_base + stage * 2 * BM; };
  auto sDvec = [&](int stage) { return vec_base + stage * 2 * BM + BM; };

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
  const KeyBlock<D, BN, BM> blk(p);
  const int T = blk.T, n0 = blk.n0, iters = blk.iters;
  auto last_query = [&](int s) { return blk.last_query(p, s); };

  // ahead: the next query tile to load; cur: the one being worked on.
  typename KeyBlock<D, BN, BM>::QueryTile ahead = blk.first_query_tile(p), cur = ahead;
  auto load_q_tile = [&](int stage) {
    blk.template load_queries<kThreads>(p, ahead, sQ(stage), sdO(stage), sLse(stage), sDvec(stage), tid);
    blk.advance(ahead);
  };
  blk.template load_kv<kThreads>(p, sK, sV, tid);
  load_q_tile(0);
  cp_async_commit();

  // This warp's keys [wk0, wk1]; per thread the last query allowed for each of its key rows.
  const int wk0 = n0 + warp * kWarpKeys, wk1 = wk0 + kWarpKeys - 1;
  const int wk0_hi = last_query(wk0), wk1_hi = last_query(wk1);
  int key_row[MT][2], key_hi[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      key_row[mt][half] = wk0 + mt * 16 + g + 8 * half;
      key_hi[mt][half] = last_query(key_row[mt][half]);
    }

  float dk_acc[MT][D / 8][4], dv_acc[MT][D / 8][4];
  zero_acc(dk_acc);
  zero_acc(dv_acc);

  int stage = 0;
  for (int it = 0; it < iters; ++it, stage ^= 1, blk.advance(cur)) {
    cp_async_wait_all();
    __syncthreads();
    if (it + 1 < iters) {
      load_q_tile(stage ^ 1);
      cp_async_commit();
    }
    const int m0 = cur.m0;
    // Warp-uniform skip when none of the warp's keys is seen by any of the tile's queries.
    if (wk0 >= T || m0 + BM - 1 < wk0 || m0 > wk1_hi) continue;
    const uint32_t q_tile = sQ(stage), do_tile = sdO(stage);
    const float* lse_tile = sLse(stage);
    const float* dvec_tile = sDvec(stage);

#pragma unroll
    for (int ch = 0; ch < BM / 16; ++ch) {
      const int q0 = m0 + ch * 16;
      if (q0 + 15 < wk0 || q0 > wk1_hi) continue;  // no allowed pair in this 16-query slab
      const bool needs_mask = !(q0 >= wk1 && q0 + 15 <= wk0_hi);

      // S^T = K Q^T and dP^T = V dO^T for the slab: rows = keys, columns = 16 queries.
      float st[MT][2][4], dpt[MT][2][4];
      zero_acc(st);
      zero_acc(dpt);
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        uint32_t qb[4], dob[4];
        load_frag_b_pair<BM>(qb, q_tile, ch * 16, ks, lane);
        load_frag_b_pair<BM>(dob, do_tile, ch * 16, ks, lane);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          uint32_t ka[4], va[4];
          load_frag_a<BN>(ka, sK, warp * kWarpKeys + mt * 16, ks, lane);
          load_frag_a<BN>(va, sV, warp * kWarpKeys + mt * 16, ks, lane);
          mma_16816_x2(st[mt][0], st[mt][1], ka, qb);
          mma_16816_x2(dpt[mt][0], dpt[mt][1], va, dob);
        }
      }

      // P^T = exp(S^T * scale - lse) (lse2 = lse * log2(e)), then dS^T = P^T (dP^T - D_i);
      // disallowed pairs give 0.
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const int col0 = ch * 16 + nt * 8 + 2 * c;
        const float2 lse2 = *reinterpret_cast<const float2*>(lse_tile + col0);
        const float2 dv2 = *reinterpret_cast<const float2*>(dvec_tile + col0);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int half = i >> 1, col = i & 1, t = m0 + col0 + col;
            float pr = fast_exp2(fmaf(st[mt][nt][i], p.scale_log2, -(col ? lse2.y : lse2.x)));
            if (needs_mask && (t < key_row[mt][half] || t > key_hi[mt][half])) pr = 0.f;
            st[mt][nt][i] = pr;
            dpt[mt][nt][i] = pr * (dpt[mt][nt][i] - (col ? dv2.y : dv2.x));
          }
      }

      // dV += P^T dO and dK += dS^T Q, the A operands straight from registers.
      uint32_t pa[MT][4], dsa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        c_to_a(pa[mt], st[mt], 0);
        c_to_a(dsa[mt], dpt[mt], 0);
      }
#pragma unroll
      for (int np = 0; np < D / 16; ++np) {
        uint32_t dob[4], qb[4];
        load_frag_b_pair_trans<BM>(dob, do_tile, ch * 16, np, lane);
        load_frag_b_pair_trans<BM>(qb, q_tile, ch * 16, np, lane);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_16816_x2(dv_acc[mt][2 * np], dv_acc[mt][2 * np + 1], pa[mt], dob);
          mma_16816_x2(dk_acc[mt][2 * np], dk_acc[mt][2 * np + 1], dsa[mt], qb);
        }
      }
    }
  }

  // dS was taken w.r.t. the scaled scores: dK picks up the scale once here.
  __nv_bfloat16* dk_head = p.dk + blk.kv_offset(p);
  __nv_bfloat16* dv_head = p.dv + blk.kv_offset(p);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    store_rows<D>(dk_head, blk.kv_stride(p), wk0 + mt * 16, T, dk_acc[mt], p.scale, p.scale, lane);
    store_rows<D>(dv_head, blk.kv_stride(p), wk0 + mt * 16, T, dv_acc[mt], 1.f, 1.f, lane);
  }
}

// ---- dQ over query tiles ------------------------------------------------------------------------
// The forward's structure without the online softmax (lse is known): kWarps warps of 16 * kMTiles
// query rows with Q and dO fragments in registers; key tiles of kOtherTile consumed 16 keys at a time.
// Shapes from the same sweep (hd64: 8 warps x 16 rows beat 4 x 32).
template <int D> struct DqTraits;
template <> struct DqTraits<64> : WarpTiling<8, 1, 64, 2> {};
template <> struct DqTraits<128> : WarpTiling<4, 1, 64, 2> {};

template <int D>
__global__ void __launch_bounds__(DqTraits<D>::kWarps * 32, DqTraits<D>::kMinBlocks)
    attention_bwd_dq_kernel(const BwdParams p) {
  using Tr = DqTraits<D>;
  constexpr int kThreads = Tr::kWarps * 32, MT = Tr::kMTiles, kWarpRows = 16 * MT;
  constexpr int BM = Tr::kWarps * kWarpRows, BN = Tr::kOtherTile;
  constexpr int kQBytes = BM * D * 2, kTileBytes = BN * D * 2;
  extern __shared__ __align__(128) unsigned char smem[];
  // Layout: Q, dO (BM x D); then per stage K, V (BN x D); then BM floats of D_i and BM of
  // lse * log2(e).
  const uint32_t sQ = smem_u32(smem), sdO = sQ + kQBytes;
  auto sK = [&](int stage) { return sQ + 2 * kQBytes + stage * 2 * kTileBytes; };
  auto sV = [&](int stage) { return sK(stage) + kTileBytes; };
  float* s_dvec = reinterpret_cast<float*>(smem + 2 * kQBytes + 4 * kTileBytes);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
  const QueryBlock<D, BM, BN> blk(p);
  const int T = blk.T, m0 = blk.m0, n_first = blk.n_first, n_last = blk.n_last;

  load_tile<BM, D, kThreads>(sQ, p.q + blk.q_off, blk.q_stride, m0, T, tid);
  load_tile<BM, D, kThreads>(sdO, p.dout + blk.q_off, blk.q_stride, m0, T, tid);
  cp_async_commit();
  blk.template load_kv<kThreads>(p, n_last, sK(0), sV(0), tid);
  cp_async_commit();
  // Global reads of O (for D_i) and lse first, so they are in flight during the wait for dO.
  const BlockRowDots<kThreads, D, BM, BN> dots(p, blk, tid);
  const int w0 = m0 + warp * kWarpRows, w1 = w0 + kWarpRows - 1;
  const int w0_lo = p.mask.lowest_key(w0), w1_lo = p.mask.lowest_key(w1);
  // This thread's rows are w0 + mt * 16 + g + 8 * half; row_lo holds their lowest keys.
  int row_lo[MT][2];
  float row_lse2[MT][2], row_dvec[MT][2];  // lse * log2(e), D_i; zeros on padded rows (their dS is 0)
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) row_lo[mt][half] = p.mask.lowest_key(w0 + mt * 16 + g + 8 * half);
  cp_async_wait_group<1>();  // Q and dO have landed; K and V may still be in flight
  __syncthreads();
  dots.finish(p, blk, smem + kQBytes, s_dvec, s_dvec + BM);
  __syncthreads();
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      row_dvec[mt][half] = s_dvec[warp * kWarpRows + mt * 16 + g + 8 * half];
      row_lse2[mt][half] = s_dvec[BM + warp * kWarpRows + mt * 16 + g + 8 * half];
    }

  uint32_t q_frag[MT][D / 16][4], do_frag[MT][D / 16][4];
  float dq_acc[MT][D / 8][4];
  zero_acc(dq_acc);

  int stage = 0;
  for (int n = n_last; n >= n_first; --n, stage ^= 1) {
    cp_async_wait_all();
    __syncthreads();
    if (n > n_first) {
      blk.template load_kv<kThreads>(p, n - 1, sK(stage ^ 1), sV(stage ^ 1), tid);
      cp_async_commit();
    }
    if (n == n_last) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks) {
          load_frag_a<BM>(q_frag[mt][ks], sQ, warp * kWarpRows + mt * 16, ks, lane);
          load_frag_a<BM>(do_frag[mt][ks], sdO, warp * kWarpRows + mt * 16, ks, lane);
        }
    }
    const int n0 = n * BN;
    if (w0 >= T || n0 > w1 || n0 + BN - 1 < w0_lo) continue;
    const uint32_t k_tile = sK(stage), v_tile = sV(stage);

#pragma unroll
    for (int ch = 0; ch < BN / 16; ++ch) {
      const int k0 = n0 + ch * 16;
      if (k0 > w1 || k0 + 15 < w0_lo) continue;  // no allowed pair in this 16-key slab
      const bool needs_mask = !(k0 + 15 <= w0 && k0 >= w1_lo);

      float s_acc[MT][2][4], dp_acc[MT][2][4];
      zero_acc(s_acc);
      zero_acc(dp_acc);
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        uint32_t kb[4], vb[4];
        load_frag_b_pair<BN>(kb, k_tile, ch * 16, ks, lane);
        load_frag_b_pair<BN>(vb, v_tile, ch * 16, ks, lane);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_16816_x2(s_acc[mt][0], s_acc[mt][1], q_frag[mt][ks], kb);
          mma_16816_x2(dp_acc[mt][0], dp_acc[mt][1], do_frag[mt][ks], vb);
        }
      }

      // P = exp(S * scale - lse); dS = P (dP - D_i); disallowed pairs give 0.
      uint32_t dsa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int half = i >> 1, s = k0 + nt * 8 + 2 * c + (i & 1);
            float pr = fast_exp2(fmaf(s_acc[mt][nt][i], p.scale_log2, -row_lse2[mt][half]));
            if (needs_mask && (s < row_lo[mt][half] || s > w0 + mt * 16 + g + 8 * half)) pr = 0.f;
            dp_acc[mt][nt][i] = pr * (dp_acc[mt][nt][i] - row_dvec[mt][half]);
          }
        c_to_a(dsa[mt], dp_acc[mt], 0);
      }

      // dQ += dS K: K as the B operand (k = key, n = head dim), read transposed.
#pragma unroll
      for (int np = 0; np < D / 16; ++np) {
        uint32_t kb[4];
        load_frag_b_pair_trans<BN>(kb, k_tile, ch * 16, np, lane);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
          mma_16816_x2(dq_acc[mt][2 * np], dq_acc[mt][2 * np + 1], dsa[mt], kb);
      }
    }
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
    store_rows<D>(p.dq + blk.q_off, blk.q_stride, w0 + mt * 16, T, dq_acc[mt], p.scale, p.scale, lane);
}

}  // namespace

template <int D>
void launch_backward(const BwdParams& p, cudaStream_t stream) {
  // dQ first: it also writes the rows that dK/dV reads.
  {
    using Tr = DqTraits<D>;
    constexpr int BM = Tr::kWarps * 16 * Tr::kMTiles, kSmem = (2 * BM + 4 * Tr::kOtherTile) * D * 2 + 2 * BM * 4;
    launch_kernel<attention_bwd_dq_kernel<D>>(p, dim3(ceil_div(p.T, BM), p.Hq, p.B), Tr::kWarps * 32, kSmem, stream);
    HYLO_CUDA_LAUNCH_CHECK("attention_bwd_dq_kernel");
  }
  {
    using Tr = DkvTiling;
    constexpr int BN = Tr::kWarps * 16 * Tr::kMTiles, kSmem = (2 * BN + 4 * Tr::kOtherTile) * D * 2 + 4 * Tr::kOtherTile * 4;
    launch_kernel<attention_bwd_dkdv_kernel<D>>(p, dim3(ceil_div(p.T, BN), p.Hkv, p.B), Tr::kWarps * 32, kSmem, stream);
    HYLO_CUDA_LAUNCH_CHECK("attention_bwd_dkdv_kernel");
  }
}
template void launch_backward<64>(const BwdParams&, cudaStream_t);
template void launch_backward<128>(const BwdParams&, cudaStream_t);

}  // namespace hylo::cuda::attn
#endif  // !HYLO_WGMMA
