// Attention backward on warpgroup MMA (sm_90a), head dims 64 and 128: the dK/dV and dQ kernels of
// attention_bwd.cuh's scheme with one warpgroup per 64 keys or queries, tiles in and outputs out by
// TMA (tma.cuh). Built only for sm_90a (HYLO_WGMMA); attention_bwd_mma.cu serves other targets.
#include <cuda_bf16.h>

#include <cmath>
#include <type_traits>

#include "kernels/attention/attention_bwd.cuh"
#include "kernels/attention/wgmma.cuh"

#if HYLO_WGMMA
namespace hylo::cuda::attn {
namespace {

// ---- dK, dV on warpgroup MMA (sm_90a), head dims 64 and 128 -----------------------------------
// The structure of attention_bwd_dkdv_kernel with one warpgroup per 64 keys (warp w owns keys
// 16w..16w+15, as there) and query tiles of 64 taken whole: S^T = K Q^T and dP^T = V dO^T read
// K, V, Q and dO straight from the swizzled tiles; dV += P^T dO and dK += dS^T Q take P^T and dS^T
// from registers and dO, Q as N-major B (one product per 64-column half of dV, dK). The mma.sync
// version re-reads every operand through ldmatrix into registers, which made shared memory its
// bottleneck.
// Shared memory of the dK/dV kernel: 6 tiles, 4 rows of per-query floats, 3 mbarriers, alignment
// slack: 50 KB at hd64, 98 KB at hd128.
template <int D>
constexpr int kWgDkvSmem = 1024 + 6 * kWgTileBytes<D> + 4 * kWgRows * 4 + 3 * 8;

// Registers at hd128 (2 blocks of 128 threads: up to 255): dK and dV are 128 accumulator floats
// per thread, S^T and dP^T another 64 while the scores are live; P^T and dS^T leave them as 32
// A-fragment registers that live into the next tile's iteration (its dV/dK products), and the
// score accumulators start each tile overwritten (wgmma_ss, accumulate = false). That is close to
// the cap (251), hence the mask applied before the exponentials below and dP^T issued only once the
// previous products are done (see the tile loop). hd64 fits 3 blocks (160
// registers, no spills): 12 warps per SM hide more of the latency that bounds this kernel
// (Nsight Compute: ~0.55 eligible warps per scheduler at 2 blocks), -3..9% backward time.
template <int D>
constexpr int kWgDkvMinBlocks = D == 64 ? 3 : 2;

template <int D>
__global__ void __launch_bounds__(kWgThreads, kWgDkvMinBlocks<D>)
    attention_bwd_dkdv_wgmma_kernel(const __grid_constant__ BwdParams p) {
  constexpr int BN = kWgRows, BM = kWgRows, kTileBytes = kWgTileBytes<D>;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = align_smem_1024(smem_raw);
  const uint32_t base = smem_u32(smem);
  // Layout: K, V; per stage Q, dO; then per stage lse, D_i (BM floats each); then the mbarriers of
  // the tile copies: K and V, then one per Q, dO stage.
  const uint32_t sK = base, sV = base + kTileBytes;
  auto sQ = [&](int stage) { return base + (2 + 2 * stage) * kTileBytes; };
  auto sdO = [&](int stage) { return sQ(stage) + kTileBytes; };
  float* vec_base = reinterpret_cast<float*>(smem + 6 * kTileBytes);
  auto sLse = [&](int stage) { return vec_base + stage * 2 * BM; };
  auto sDvec = [&](int stage) { return vec_base + stage * 2 * BM + BM; };
  const uint32_t kv_bar = smem_u32(vec_base + 4 * BM);
  auto q_bar = [&](int stage) { return kv_bar + 8 * (1 + stage); };

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
  const KeyBlock<D, BN, BM> blk(p);
  const int T = blk.T, n0 = blk.n0, iters = blk.iters;
  auto last_query = [&](int s) { return blk.last_query(p, s); };

  if (tid == 0) {
    for (int i = 0; i < 3; ++i) mbarrier_init(kv_bar + 8 * i, 1);
    mbarrier_init_fence();
  }
  // Everything comes by the copy engine; thread 0 asks. A query tile is its Q and dO tiles and its
  // lse * log2(e) and D_i rows (p.rows), on one mbarrier per stage.
  // ahead: the next query tile to load; the tile lambda below gets the one being worked on.
  typename KeyBlock<D, BN, BM>::QueryTile ahead = blk.first_query_tile(p), cur = ahead;
  auto load_q_tile = [&](int stage) {
    if (tid == 0) {
      mbarrier_arrive_expect_bytes(q_bar(stage), 2 * kTmaTileBytes<D> + 2 * kTmaRowBytes);
      load_head_tile<D>(p.tm_q, sQ(stage), ahead.m0, ahead.h, blk.b, q_bar(stage));
      load_head_tile<D>(p.tm_dout, sdO(stage), ahead.m0, ahead.h, blk.b, q_bar(stage));
      load_row(p.tm_rows, smem_u32(sLse(stage)), ahead.m0, p.rows_row(0, blk.b, ahead.h), q_bar(stage));
      load_row(p.tm_rows, smem_u32(sDvec(stage)), ahead.m0, p.rows_row(1, blk.b, ahead.h), q_bar(stage));
    }
    blk.advance(ahead);
  };
  if (tid == 0) {
    mbarrier_arrive_expect_bytes(kv_bar, 2 * kTmaTileBytes<D>);
    load_head_tile<D>(p.tm_k, sK, n0, blk.hk, blk.b, kv_bar);
    load_head_tile<D>(p.tm_v, sV, n0, blk.hk, blk.b, kv_bar);
  }
  load_q_tile(0);
  // The barrier that shows the initialised mbarriers to the other threads comes after thread 0 has
  // issued the first copies (it initialised them itself), so those start a barrier earlier.
  __syncthreads();

  // This warp's keys [wk0, wk1]; per thread the last query allowed for each of its two key rows.
  const int wk0 = n0 + warp * 16, wk1 = wk0 + 15;
  const int wk0_hi = last_query(wk0);
  int key_row[2], key_hi[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    key_row[half] = wk0 + g + 8 * half;
    key_hi[half] = last_query(key_row[half]);
  }

  float dk_acc[D / 8][4], dv_acc[D / 8][4];  // C tile j = head-dim columns 8j..8j+7
  zero_acc(dk_acc);
  zero_acc(dv_acc);

  // dV += P^T dO and dK += dS^T Q, 16 queries per k-step: rows 16kk.. of the dO / Q tile read
  // N-major, per 64-column half h into C tiles 8h..8h+7 of dV / dK.
  uint32_t pa[BM / 16][4], dsa[BM / 16][4];  // P^T, dS^T of the previous tile as A fragments
  auto issue_dv_dk = [&](uint32_t q_tile, uint32_t do_tile) {
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk)
#pragma unroll
      for (int h = 0; h < D / 64; ++h) {
        wgmma_rs_bn(acc_half(dv_acc, h), pa[kk], nmajor_desc<BM>(do_tile, kk, h));
        wgmma_rs_bn(acc_half(dk_acc, h), dsa[kk], nmajor_desc<BM>(q_tile, kk, h));
      }
    wgmma_commit();
  };

  // Query tile `it` (its Q, dO in `stage`). A tile's dV/dK products are issued in the next tile's
  // iteration (with_prev), ahead of its S^T and dP^T, so the tensor cores run all three back to
  // back while the threads pass the barrier and refill the stage; every product is waited for in
  // the iteration that issues it. ptxas serializes all wgmma of a kernel where one stays in flight
  // across a loop's back edge, or where one is issued under a runtime condition; hence the first
  // tile peeled off (with_prev is a compile-time flag) and the last tile's products after the loop.
  // No tile of the loop is skipped: every query tile in the range sees one of the block's keys.
  auto tile = [&](auto with_prev, int it, int stage) {
    mbarrier_wait(q_bar(stage), (it >> 1) & 1);  // query tile it: the (it / 2)-th fill of the stage
    const int m0 = cur.m0;
    const uint32_t q_tile = sQ(stage), do_tile = sdO(stage);

    // S^T = K Q^T and dP^T = V dO^T: rows = keys, columns = the tile's 64 queries; the head dim is
    // the reduction, D / 16 k-steps (the first overwrites). Separate commit groups, so that P^T is
    // computed while dP^T is still running on the tensor cores. dP^T is issued only once the
    // previous tile's products are done: its accumulators then take the registers of their A
    // fragments (with both live, hd128 spilled and hd64 did not fit 3 blocks per SM).
    float st[BM / 8][4], dpt[BM / 8][4];
    wgmma_fence();
    if constexpr (decltype(with_prev)::value) issue_dv_dk(sQ(stage ^ 1), sdO(stage ^ 1));
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) wgmma_ss(st, kmajor_desc<BN>(sK, ks), kmajor_desc<BM>(q_tile, ks), ks > 0);
    wgmma_commit();
    wgmma_wait<1>();  // the previous tile's dV/dK are done; S^T may still run
    __syncthreads();  // ... in every warp: stage ^ 1 may be refilled
    if (it + 1 < iters) load_q_tile(stage ^ 1);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) wgmma_ss(dpt, kmajor_desc<BN>(sV, ks), kmajor_desc<BM>(do_tile, ks), ks > 0);
    wgmma_commit();
    wgmma_wait<1>();  // S^T is done; dP^T may still run

    // Disallowed pairs get S^T = -inf, so P^T and dS^T are exactly 0 (exp2(-inf - lse) = 0: lse is
    // finite, every query sees at least itself and padded queries load 0). Masking before the
    // exponentials, as the forward does, rather than selecting 0 after them keeps one copy of the
    // exponential code: the selects made ptxas spill at hd128.
    if (!(m0 >= wk1 && m0 + BM - 1 <= wk0_hi)) {
#pragma unroll
      for (int j = 0; j < BM / 8; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int half = i >> 1, t = m0 + j * 8 + 2 * c + (i & 1);
          if (t < key_row[half] || t > key_hi[half]) st[j][i] = -INFINITY;
        }
    }

    // P^T = exp(S^T * scale - lse) while dP^T may still run, then dS^T = P^T (dP^T - D_i); both
    // leave as A fragments for the next iteration's products.
    const float* lse_tile = sLse(stage);
    const float* dvec_tile = sDvec(stage);
#pragma unroll
    for (int j = 0; j < BM / 8; ++j) {
      const float2 lse2 = *reinterpret_cast<const float2*>(lse_tile + j * 8 + 2 * c);
#pragma unroll
      for (int i = 0; i < 4; ++i)
        st[j][i] = fast_exp2(fmaf(st[j][i], p.scale_log2, -((i & 1) ? lse2.y : lse2.x)));  // lse2 = lse * log2(e)
    }
    wgmma_wait_all();
#pragma unroll
    for (int j = 0; j < BM / 8; ++j) {
      const float2 dv2 = *reinterpret_cast<const float2*>(dvec_tile + j * 8 + 2 * c);
#pragma unroll
      for (int i = 0; i < 4; ++i) dpt[j][i] = st[j][i] * (dpt[j][i] - ((i & 1) ? dv2.y : dv2.x));
    }
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk) {
      c_to_a(pa[kk], st, kk);
      c_to_a(dsa[kk], dpt, kk);
    }
  };
  mbarrier_wait(kv_bar, 0);
  tile(std::false_type{}, 0, 0);
  for (int it = 1; it < iters; ++it) {
    blk.advance(cur);
    tile(std::true_type{}, it, it & 1);
  }
  wgmma_fence();
  issue_dv_dk(sQ((iters - 1) & 1), sdO((iters - 1) & 1));
  wgmma_wait_all();

  // dK and dV leave through the K and V tiles (free once every warp is done reading them). dS was
  // taken w.r.t. the scaled scores: dK picks up the scale once here.
  write_outputs(
      [&] {
        stage_rows<D>(sK, dk_acc, p.scale, p.scale, warp, lane);
        stage_rows<D>(sV, dv_acc, 1.f, 1.f, warp, lane);
      },
      [&] {
        store_head_tile<D>(p.tm_dk, sK, n0, blk.hk, blk.b);
        store_head_tile<D>(p.tm_dv, sV, n0, blk.hk, blk.b);
      });
}

// ---- dQ on warpgroup MMA (sm_90a), head dims 64 and 128 ---------------------------------------
// attention_bwd_dq_kernel's structure with one warpgroup per 64 queries (warp w owns rows
// 16w..16w+15) and key tiles of 64 taken whole: S = Q K^T and dP = dO V^T read Q, dO, K and V from
// the swizzled tiles; dQ += dS K takes dS from registers and K as an N-major B (one product per
// 64-column half of dQ). 3 blocks per SM at both head dims (<= 168 registers). The K and V tiles:
//   hd64 (8 KB tiles): two stages, so that a tile's dQ product runs in the next iteration, ahead of
//   its S and dP, and the next tiles load a whole iteration ahead: 50 KB.
//   hd128 (16 KB tiles): one K and one V buffer (Q, dO, K, V: 66 KB; two stages, 98 KB, fit only 2
//   blocks per SM). The price: each tile's products run back to back, the dQ product waited for
//   in its own iteration, and K(n - 1), V(n - 1) load only after it, so every tile's first loads
//   wait on the copy engine; the third block per SM is there to cover that wait.
template <int D>
constexpr int kWgDqStages = D == 128 ? 1 : 2;
template <int D>
constexpr int kWgDqBars = 1 + kWgDqStages<D>;  // Q and dO, then one per K, V stage
template <int D>
constexpr int kWgDqSmem = 1024 + (2 + 2 * kWgDqStages<D>) * kWgTileBytes<D> + 4 * kWgRows * 4 + kWgDqBars<D> * 8;
constexpr int kWgDqMinBlocks = 3;
static_assert(kWgDqMinBlocks * (kWgDqSmem<64> + 1024) <= 228 * 1024 &&
                  kWgDqMinBlocks * (kWgDqSmem<128> + 1024) <= 228 * 1024,
              "the dQ kernel's shared memory must fit kWgDqMinBlocks blocks per SM");

template <int D>
__global__ void __launch_bounds__(kWgThreads, kWgDqMinBlocks)
    attention_bwd_dq_wgmma_kernel(const __grid_constant__ BwdParams p) {
  constexpr int BM = kWgRows, BN = kWgRows, kThreads = kWgThreads, kTileBytes = kWgTileBytes<D>;
  constexpr int kStages = kWgDqStages<D>;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = align_smem_1024(smem_raw);
  const uint32_t base = smem_u32(smem);
  // Layout: Q, dO; then per stage K, V; then BM floats of D_i and BM of lse * log2(e); then the
  // mbarriers of the tile copies: Q and dO, then one per K, V stage.
  const uint32_t sQ = base, sdO = base + kTileBytes;
  auto sK = [&](int stage) { return base + (2 + 2 * stage) * kTileBytes; };
  auto sV = [&](int stage) { return sK(stage) + kTileBytes; };
  float* s_dvec = reinterpret_cast<float*>(smem + (2 + 2 * kStages) * kTileBytes);
  const uint32_t q_bar = smem_u32(s_dvec + 4 * BM);
  auto kv_bar = [&](int stage) { return q_bar + 8 * (1 + stage); };

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2;
  const QueryBlock<D, BM, BN> blk(p);
  const int T = blk.T, m0 = blk.m0, n_first = blk.n_first, n_last = blk.n_last, hk = blk.hk;

  // All tiles come by the copy engine; thread 0 asks for them.
  if (tid == 0) {
    for (int i = 0; i < kWgDqBars<D>; ++i) mbarrier_init(q_bar + 8 * i, 1);
    mbarrier_init_fence();
  }
  auto load_kv = [&](int n, int stage) {
    if (tid == 0) {
      mbarrier_arrive_expect_bytes(kv_bar(stage), 2 * kTmaTileBytes<D>);
      load_head_tile<D>(p.tm_k, sK(stage), n * BN, hk, blk.b, kv_bar(stage));
      load_head_tile<D>(p.tm_v, sV(stage), n * BN, hk, blk.b, kv_bar(stage));
    }
  };
  if (tid == 0) {
    mbarrier_arrive_expect_bytes(q_bar, 2 * kTmaTileBytes<D>);
    load_head_tile<D>(p.tm_q, sQ, m0, blk.h, blk.b, q_bar);
    load_head_tile<D>(p.tm_dout, sdO, m0, blk.h, blk.b, q_bar);
  }
  load_kv(n_last, 0);
  // The barrier that shows the initialised mbarriers to the other threads comes after thread 0 has
  // issued the first copies (it initialised them itself), so those start a barrier earlier.
  __syncthreads();

  // Global reads of O (for D_i) and lse first, so they are in flight during the wait for dO.
  const BlockRowDots<kThreads, D, BM, BN> dots(p, blk, tid);
  const int w0 = m0 + warp * 16, w1 = w0 + 15;
  const int w1_lo = p.mask.lowest_key(w1);
  int row_lo[2];  // the lowest key of this thread's rows w0 + g, w0 + g + 8
#pragma unroll
  for (int half = 0; half < 2; ++half) row_lo[half] = p.mask.lowest_key(w0 + g + 8 * half);

  mbarrier_wait(q_bar, 0);  // Q and dO have landed; K and V may still be in flight
  dots.finish(p, blk, smem + kTileBytes, s_dvec, s_dvec + BM);
  __syncthreads();
  float row_lse2[2], row_dvec[2];  // lse * log2(e), D_i; zeros on padded rows (their dS is 0)
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    row_dvec[half] = s_dvec[warp * 16 + g + 8 * half];
    row_lse2[half] = s_dvec[BM + warp * 16 + g + 8 * half];
  }

  float dq_acc[D / 8][4];  // C tile j = head-dim columns 8j..8j+7
  zero_acc(dq_acc);

  // dQ += dS K, 16 keys per k-step: rows 16kk.. of the K tile read N-major, per 64-column half h
  // into C tiles 8h..8h+7 of dQ. With two stages, as in dK/dV, a tile's product is issued in the
  // next iteration, ahead of that tile's S and dP, and waited for inside it; with one, in its own.
  uint32_t dsa[BN / 16][4];  // dS of the tile whose product is next, as A fragments
  auto issue_dq = [&](uint32_t k_tile) {
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
      for (int h = 0; h < D / 64; ++h) wgmma_rs_bn(acc_half(dq_acc, h), dsa[kk], nmajor_desc<BN>(k_tile, kk, h));
    wgmma_commit();
  };
  // Disallowed pairs get S = -inf, so P = exp(S * scale - lse) is exactly 0 (lse is finite; padded
  // rows use 0). A separate masking pass, taken only by tiles that cross a mask edge, keeps the
  // compares off every other tile: inline, they were most of this kernel's integer work (ALU the
  // busiest pipe in Nsight Compute). P is computed while dP may still run; then, with dP done,
  // dS = P (dP - D_i), which leaves as A fragments.
  auto scores_to_ds = [&](float (&s_acc)[BN / 8][4], float (&dp_acc)[BN / 8][4], int n0) {
    if (!(n0 + BN - 1 <= w0 && n0 >= w1_lo)) mask_scores(s_acc, w0, row_lo, n0, lane);
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) s_acc[j][i] = fast_exp2(fmaf(s_acc[j][i], p.scale_log2, -row_lse2[i >> 1]));
    wgmma_wait_all();
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) dp_acc[j][i] = s_acc[j][i] * (dp_acc[j][i] - row_dvec[i >> 1]);
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) c_to_a(dsa[kk], dp_acc, kk);
  };
  // S = Q K^T and dP = dO V^T over D / 16 k-steps (the first overwrites), in commit groups of their
  // own so that P is computed while dP still runs.
  auto issue_s_dp = [&](float (&s_acc)[BN / 8][4], float (&dp_acc)[BN / 8][4], uint32_t k_tile, uint32_t v_tile) {
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) wgmma_ss(s_acc, kmajor_desc<BM>(sQ, ks), kmajor_desc<BN>(k_tile, ks), ks > 0);
    wgmma_commit();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)
      wgmma_ss(dp_acc, kmajor_desc<BM>(sdO, ks), kmajor_desc<BN>(v_tile, ks), ks > 0);
    wgmma_commit();
  };

  if constexpr (kStages == 1) {
    // Key tile n in the one K, V buffer (its (n_last - n)-th fill): products back to back, then the
    // buffer is refilled with tile n - 1.
    for (int n = n_last; n >= n_first; --n) {
      mbarrier_wait(kv_bar(0), (n_last - n) & 1);
      float s_acc[BN / 8][4], dp_acc[BN / 8][4];
      wgmma_fence();
      issue_s_dp(s_acc, dp_acc, sK(0), sV(0));
      wgmma_wait<1>();  // S is done; dP may still run
      scores_to_ds(s_acc, dp_acc, n * BN);
      wgmma_fence();
      issue_dq(sK(0));
      wgmma_wait_all();
      __syncthreads();  // every warp is done with K(n) and V(n)
      if (n > n_first) load_kv(n - 1, 0);
    }
  } else {
    // Key tile n (its K, V in `stage`); the first is peeled off as in dK/dV.
    auto tile = [&](auto with_prev, int n, int stage) {
      mbarrier_wait(kv_bar(stage), ((n_last - n) >> 1) & 1);  // K(n), V(n): the stage's (n_last - n) / 2-th fill
      float s_acc[BN / 8][4], dp_acc[BN / 8][4];
      wgmma_fence();
      if constexpr (decltype(with_prev)::value) issue_dq(sK(stage ^ 1));
      issue_s_dp(s_acc, dp_acc, sK(stage), sV(stage));
      wgmma_wait<2>();  // the previous tile's dQ product is done; S, dP may still run
      __syncthreads();  // ... in every warp: K, V stage ^ 1 may be refilled
      if (n > n_first) load_kv(n - 1, stage ^ 1);
      wgmma_wait<1>();  // S is done; dP may still run
      scores_to_ds(s_acc, dp_acc, n * BN);
    };
    tile(std::false_type{}, n_last, 0);
    for (int n = n_last - 1; n >= n_first; --n) tile(std::true_type{}, n, (n_last - n) & 1);
    wgmma_fence();
    issue_dq(sK((n_last - n_first) & 1));
    wgmma_wait_all();
  }

  // dQ leaves through the Q tile (free once every warp is done reading it).
  write_outputs([&] { stage_rows<D>(sQ, dq_acc, p.scale, p.scale, warp, lane); },
                [&] { store_head_tile<D>(p.tm_dq, sQ, m0, blk.h, blk.b); });
}

}  // namespace

template <int D>
void launch_backward(const BwdParams& p, cudaStream_t stream) {
  // dQ first: it also writes the rows that dK/dV reads.
  const int tiles = ceil_div(p.T, kWgRows);
  launch_kernel<attention_bwd_dq_wgmma_kernel<D>>(p, dim3(tiles, p.Hq, p.B), kWgThreads, kWgDqSmem<D>, stream);
  HYLO_CUDA_LAUNCH_CHECK("attention_bwd_dq_wgmma_kernel");
  launch_kernel<attention_bwd_dkdv_wgmma_kernel<D>>(p, dim3(tiles, p.Hkv, p.B), kWgThreads, kWgDkvSmem<D>, stream);
  HYLO_CUDA_LAUNCH_CHECK("attention_bwd_dkdv_wgmma_kernel");
}
template void launch_backward<64>(const BwdParams&, cudaStream_t);
template void launch_backward<128>(const BwdParams&, cudaStream_t);

}  // namespace hylo::cuda::attn
#endif  // HYLO_WGMMA
