// Attention backward, deterministic (no atomics), in two launches:
//   1. dq:   one block per (query tile, head, batch), the forward's structure: D_i = rowsum(dO * O)
//      of its rows first (written out for dkdv with lse * log2(e): BwdParams::rows), then
//      recompute P from the saved lse, dP = dO V^T, dS = P * (dP - D_i), dQ += dS K.
//   2. dkdv: one block per (key tile, kv head, batch). Each warp owns 16 * kMTiles keys and
//      computes the transposed products S^T = K Q^T and dP^T = V dO^T, so P^T and dS^T land in
//      registers in exactly the A-fragment layout that dV += P^T dO and dK += dS^T Q need. All
//      query heads of the kv head's group are visited in a fixed order: GQA needs no reduction.
// The dq pass recomputes S and dP once more than an atomic dQ would; what it buys is a
// bit-reproducible result (SPEC §3) without a T x T workspace. Computing D_i inside dq (which has
// the dO tile in shared memory anyway) saves a launch and a pass over dO. In sm_90a builds both
// head dims run the wgmma versions (same structure, one warpgroup per 64 keys or queries, tiles in
// and outputs out by TMA); the mma.sync kernels serve the other targets.
//
// Legend: BM query rows per tile, BN keys per tile, D head dim; tensors as in attention.h.
#include <cuda_bf16.h>

#include <cmath>
#include <type_traits>

#include "kernels/attention/attention.h"
#include "kernels/attention/attention_common.cuh"
#include "kernels/attention/tma.cuh"
#include "kernels/attention/wgmma.cuh"

namespace hylo::cuda {
namespace attn {
namespace {

struct BwdParams {
  const __nv_bfloat16 *q, *k, *v, *out, *dout;
  const float* lse;
  __nv_bfloat16 *dq, *dk, *dv;
  // What the dQ pass hands dK/dV (the workspace): lse * log2(e), then D_i, each (B, Hq, T_pad),
  // rows padded to a multiple of 4 floats (16 bytes, which tile copies need) and zero past T.
  float* rows;
  int B, T, T_pad, Hq, Hkv, group;
  AttnMask mask;
  float scale, scale_log2;
#if HYLO_WGMMA
  // 64-row tile copies (tma.cuh); read in place (__grid_constant__)
  CUtensorMap tm_q, tm_k, tm_v, tm_dout, tm_dq, tm_dk, tm_dv, tm_rows;
#endif
  // Row of p.rows holding query head h, batch b: lse * log2(e) (which = 0) or D_i (which = 1).
  __device__ __forceinline__ int rows_row(int which, int b, int h) const { return (which * B + b) * Hq + h; }
};

// A key-tile block (dK, dV) of BN keys from n0 of kv head hk, batch b. It visits, for each query
// head of the kv head's group in turn, the query tiles m_first.. that see one of its keys (tiles of
// BM rows); QueryTile walks that order.
template <int D, int BN, int BM>
struct KeyBlock {
  int T, hk, b, n0, m_first, m_count, iters;
  struct QueryTile {
    int h, m0;  // query head, first row
  };

  __device__ __forceinline__ explicit KeyBlock(const BwdParams& p)
      : T(p.T), hk(blockIdx.y), b(blockIdx.z), n0(blockIdx.x * BN) {
    m_first = n0 / BM;
    m_count = last_query(p, min(n0 + BN - 1, T - 1)) / BM - m_first + 1;
    iters = p.group * m_count;
  }
  // Highest query that may see key s, clamped to the sequence.
  __device__ __forceinline__ int last_query(const BwdParams& p, int s) const {
    return int(min(attn_highest_query(p.mask, s), int64_t(T - 1)));
  }
  __device__ __forceinline__ QueryTile first_query_tile(const BwdParams& p) const {
    return {hk * p.group, m_first * BM};
  }
  __device__ __forceinline__ void advance(QueryTile& q) const {
    q.m0 += BM;
    if (q.m0 == (m_first + m_count) * BM) {
      q.m0 = m_first * BM;
      ++q.h;
    }
  }
  // This kv head's first element in (B, T, Hkv, D) tensors, and their row stride.
  __device__ __forceinline__ size_t kv_offset(const BwdParams& p) const { return (size_t(b) * T * p.Hkv + hk) * D; }
  __device__ __forceinline__ static size_t kv_stride(const BwdParams& p) { return size_t(p.Hkv) * D; }

  template <int kThreads>
  __device__ __forceinline__ void load_kv(const BwdParams& p, uint32_t sK, uint32_t sV, int tid) const {
    load_tile<BN, D, kThreads>(sK, p.k + kv_offset(p), kv_stride(p), n0, T, tid);
    load_tile<BN, D, kThreads>(sV, p.v + kv_offset(p), kv_stride(p), n0, T, tid);
  }
  // cp.async of a query tile's Q and dO tiles and its lse * log2(e) and D_i rows (zeros past T).
  template <int kThreads>
  __device__ __forceinline__ void load_queries(const BwdParams& p, QueryTile q, uint32_t sQ, uint32_t sdO,
                                               float* lse2, float* dvec, int tid) const {
    static_assert(kThreads == 2 * BM, "one lse or D_i value per thread");
    const size_t head_off = (size_t(b) * T * p.Hq + q.h) * D, q_stride = size_t(p.Hq) * D;
    load_tile<BM, D, kThreads>(sQ, p.q + head_off, q_stride, q.m0, T, tid);
    load_tile<BM, D, kThreads>(sdO, p.dout + head_off, q_stride, q.m0, T, tid);
    const int which = tid / BM, t = q.m0 + tid % BM;
    const float* src = p.rows + size_t(p.rows_row(which, b, q.h)) * p.T_pad;
    cp_async_4(smem_u32((which ? dvec : lse2) + tid % BM), t < T ? src + t : src, t < T ? 4 : 0);
  }
};

// D_i = rowsum(dO * O) of a query block's rows [m0, m0 + BM), computed by the dQ kernel that owns
// them (it has the dO tile in shared memory already): two threads per row, each half of the head
// dim. Two steps, so that the O reads from global memory are in flight while the block still waits
// for its dO tile: the constructor issues them (before the wait), finish() forms the dots (after
// the barrier). finish() writes D_i and lse * log2(e) to p.rows for the dK/dV kernel, which runs
// after dQ, and D_i to dvec_smem (BM floats) for the block itself; padded rows get 0 (their O and
// lse are taken as 0, their dO is zero-filled).
template <int kThreads, int D, int BM, int BN>
struct BlockRowDots {
  static_assert(kThreads == 2 * BM, "two threads per row");
  int r, part, t;
  uint4 o[D / 16];  // this thread's half of row t of O
  float lse;        // row t's lse (read by part 0)

  __device__ __forceinline__ BlockRowDots(const BwdParams& p, const QueryBlock<D, BM, BN>& blk, int tid)
      : r(tid >> 1), part(tid & 1), t(blk.m0 + (tid >> 1)) {
    const uint4* src = reinterpret_cast<const uint4*>(p.out + blk.q_off + size_t(t) * blk.q_stride) + part * (D / 16);
#pragma unroll
    for (int k = 0; k < D / 16; ++k) o[k] = t < p.T ? src[k] : make_uint4(0, 0, 0, 0);
    lse = part == 0 && t < p.T ? p.lse[(size_t(blk.b) * p.Hq + blk.h) * p.T + t] : 0.f;
  }

  __device__ __forceinline__ void finish(const BwdParams& p, const QueryBlock<D, BM, BN>& blk,
                                         const unsigned char* do_tile, float* dvec_smem) const {
    float dot = 0.f;
#pragma unroll
    for (int k = 0; k < D / 16; ++k) {
      const uint4 d4 = *reinterpret_cast<const uint4*>(do_tile + swizzled<BM>(r, part * (D / 16) + k));
      const __nv_bfloat162* o2 = reinterpret_cast<const __nv_bfloat162*>(&o[k]);
      const __nv_bfloat162* d2 = reinterpret_cast<const __nv_bfloat162*>(&d4);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 of = __bfloat1622float2(o2[i]), df = __bfloat1622float2(d2[i]);
        dot = fmaf(of.x, df.x, fmaf(of.y, df.y, dot));
      }
    }
    dot += __shfl_xor_sync(0xffffffffu, dot, 1);
    if (part == 0) {
      dvec_smem[r] = dot;
      if (t < p.T_pad) {
        p.rows[size_t(p.rows_row(0, blk.b, blk.h)) * p.T_pad + t] = lse * kLog2e;
        p.rows[size_t(p.rows_row(1, blk.b, blk.h)) * p.T_pad + t] = dot;
      }
    }
  }
};

#if !HYLO_WGMMA  // mma.sync: targets other than sm_90a
// ---- dK, dV over key tiles ----------------------------------------------------------------------
// kWarps warps of 16 * kMTiles keys; query tiles of kBlockM rows, consumed 16 queries at a time so
// that only a 16-query slab of S^T and dP^T is live and the registers go to the dK/dV accumulators.
// K and V fragments are re-read from shared memory for every slab: the v3 sweep in
// experiments/results/attention.md found that faster than holding them in registers, and 16 keys
// per warp faster than 32 (which spills), at both head dims.
template <int W, int MT, int BM, int MinBlocks>
struct DkvTile {
  static constexpr int kWarps = W, kMTiles = MT, kBlockM = BM, kMinBlocks = MinBlocks;
};
template <int D> struct DkvTraits;
template <> struct DkvTraits<64> : DkvTile<4, 1, 64, 2> {};
template <> struct DkvTraits<128> : DkvTile<4, 1, 64, 2> {};

template <int D>
__global__ void __launch_bounds__(DkvTraits<D>::kWarps * 32, DkvTraits<D>::kMinBlocks)
    attention_bwd_dkdv_kernel(const BwdParams p) {
  using Tr = DkvTraits<D>;
  constexpr int kThreads = Tr::kWarps * 32, MT = Tr::kMTiles, kWarpKeys = 16 * MT;
  constexpr int BN = Tr::kWarps * kWarpKeys, BM = Tr::kBlockM;
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
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) dk_acc[mt][nt][i] = dv_acc[mt][nt][i] = 0.f;

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
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) st[mt][nt][i] = dpt[mt][nt][i] = 0.f;
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
          mma_16816(st[mt][0], ka, qb[0], qb[1]);
          mma_16816(st[mt][1], ka, qb[2], qb[3]);
          mma_16816(dpt[mt][0], va, dob[0], dob[1]);
          mma_16816(dpt[mt][1], va, dob[2], dob[3]);
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
          mma_16816(dv_acc[mt][2 * np], pa[mt], dob[0], dob[1]);
          mma_16816(dv_acc[mt][2 * np + 1], pa[mt], dob[2], dob[3]);
          mma_16816(dk_acc[mt][2 * np], dsa[mt], qb[0], qb[1]);
          mma_16816(dk_acc[mt][2 * np + 1], dsa[mt], qb[2], qb[3]);
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

#else  // HYLO_WGMMA
// ---- dK, dV on warpgroup MMA (sm_90a), head dims 64 and 128 -----------------------------------
// The structure of attention_bwd_dkdv_kernel with one warpgroup per 64 keys (warp w owns keys
// 16w..16w+15, as there) and query tiles of 64 taken whole: S^T = K Q^T and dP^T = V dO^T read
// K, V, Q and dO straight from the swizzled tiles; dV += P^T dO and dK += dS^T Q take P^T and dS^T
// from registers and dO, Q as N-major B (one product per 64-column half of dV, dK). The mma.sync
// version re-reads every operand through ldmatrix into registers, which made shared memory its
// bottleneck.
// Shared memory of both backward wgmma kernels: 6 tiles, 4 rows of per-query floats, 3 mbarriers,
// alignment slack: 50 KB at hd64, 98 KB at hd128.
template <int D>
constexpr int kWgBwdSmem = 1024 + 6 * kWgTileBytes<D> + 4 * kWgRows * 4 + 3 * 8;

// Registers at hd128 (2 blocks of 128 threads: up to 255): dK and dV are 128 accumulator floats
// per thread, S^T and dP^T another 64 while the scores are live; P^T and dS^T leave them as 32
// A-fragment registers before the dV/dK products, and the score accumulators start each tile
// overwritten (wgmma_ss, accumulate = false), so they are dead across those products. That is still
// close to the cap (ptxas 13.0 stays spill-free down to about 240), hence the mask applied before
// the exponentials below and load_tile's running source pointer. hd64 fits 3 blocks (168
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
#pragma unroll
  for (int j = 0; j < D / 8; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) dk_acc[j][i] = dv_acc[j][i] = 0.f;

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

  // dK and dV leave through the K and V tiles, free now. dS was taken w.r.t. the scaled scores:
  // dK picks up the scale once here.
  __syncthreads();  // every warp is done reading K and V
  stage_rows<D>(sK, dk_acc, p.scale, p.scale, warp, lane);
  stage_rows<D>(sV, dv_acc, 1.f, 1.f, warp, lane);
  fence_proxy_async();
  __syncthreads();
  if (tid == 0) {
    store_head_tile<D>(p.tm_dk, sK, n0, blk.hk, blk.b);
    store_head_tile<D>(p.tm_dv, sV, n0, blk.hk, blk.b);
  }
}
#endif  // HYLO_WGMMA

#if !HYLO_WGMMA  // mma.sync: targets other than sm_90a
// ---- dQ over query tiles ------------------------------------------------------------------------
// The forward's structure without the online softmax (lse is known): kWarps warps of 16 * kMTiles
// query rows with Q and dO fragments in registers; key tiles of kBlockN consumed 16 keys at a time.
// Shapes from the same sweep (hd64: 8 warps x 16 rows beat 4 x 32).
template <int D> struct DqTraits;
template <> struct DqTraits<64> : QueryTiling<8, 1, 64, 2> {};
template <> struct DqTraits<128> : QueryTiling<4, 1, 64, 2> {};

template <int D>
__global__ void __launch_bounds__(DqTraits<D>::kWarps * 32, DqTraits<D>::kMinBlocks)
    attention_bwd_dq_kernel(const BwdParams p) {
  using Tr = DqTraits<D>;
  constexpr int kThreads = Tr::kWarps * 32, MT = Tr::kMTiles, kWarpRows = 16 * MT;
  constexpr int BM = Tr::kWarps * kWarpRows, BN = Tr::kBlockN;
  constexpr int kQBytes = BM * D * 2, kTileBytes = BN * D * 2;
  extern __shared__ __align__(128) unsigned char smem[];
  // Layout: Q, dO (BM x D); then per stage K, V (BN x D); then BM floats of D_i.
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
  const int w0_lo = int(p.mask.lowest_key(w0)), w1_lo = int(p.mask.lowest_key(w1));
  int row[MT][2], row_lo[MT][2];
  float row_lse2[MT][2], row_dvec[MT][2];  // lse * log2(e), D_i; zeros on padded rows (their dS is 0)
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int t = w0 + mt * 16 + g + 8 * half;
      row[mt][half] = t;
      row_lo[mt][half] = int(p.mask.lowest_key(t));
      const size_t idx = (size_t(blk.b) * p.Hq + blk.h) * T + t;
      row_lse2[mt][half] = t < T ? p.lse[idx] * kLog2e : 0.f;
    }
  cp_async_wait_group<1>();  // Q and dO have landed; K and V may still be in flight
  __syncthreads();
  dots.finish(p, blk, smem + kQBytes, s_dvec);
  __syncthreads();
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) row_dvec[mt][half] = s_dvec[warp * kWarpRows + mt * 16 + g + 8 * half];

  uint32_t q_frag[MT][D / 16][4], do_frag[MT][D / 16][4];
  float dq_acc[MT][D / 8][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) dq_acc[mt][nt][i] = 0.f;

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
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) s_acc[mt][nt][i] = dp_acc[mt][nt][i] = 0.f;
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        uint32_t kb[4], vb[4];
        load_frag_b_pair<BN>(kb, k_tile, ch * 16, ks, lane);
        load_frag_b_pair<BN>(vb, v_tile, ch * 16, ks, lane);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_16816(s_acc[mt][0], q_frag[mt][ks], kb[0], kb[1]);
          mma_16816(s_acc[mt][1], q_frag[mt][ks], kb[2], kb[3]);
          mma_16816(dp_acc[mt][0], do_frag[mt][ks], vb[0], vb[1]);
          mma_16816(dp_acc[mt][1], do_frag[mt][ks], vb[2], vb[3]);
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
            if (needs_mask && (s < row_lo[mt][half] || s > row[mt][half])) pr = 0.f;
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
        for (int mt = 0; mt < MT; ++mt) {
          mma_16816(dq_acc[mt][2 * np], dsa[mt], kb[0], kb[1]);
          mma_16816(dq_acc[mt][2 * np + 1], dsa[mt], kb[2], kb[3]);
        }
      }
    }
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
    store_rows<D>(p.dq + blk.q_off, blk.q_stride, w0 + mt * 16, T, dq_acc[mt], p.scale, p.scale, lane);
}

#else  // HYLO_WGMMA
// ---- dQ on warpgroup MMA (sm_90a), head dims 64 and 128 ---------------------------------------
// attention_bwd_dq_kernel's structure with one warpgroup per 64 queries (warp w owns rows
// 16w..16w+15) and key tiles of 64 taken whole: S = Q K^T and dP = dO V^T read Q, dO, K and V from
// the swizzled tiles; dQ += dS K takes dS from registers and K as an N-major B (one product per
// 64-column half of dQ). Blocks per SM: hd64 3 (<= 170 registers); hd128 2, which its 98 KB of
// shared memory allows anyway.
template <int D>
constexpr int kWgDqMinBlocks = D == 64 ? 3 : 2;

template <int D>
__global__ void __launch_bounds__(kWgThreads, kWgDqMinBlocks<D>)
    attention_bwd_dq_wgmma_kernel(const __grid_constant__ BwdParams p) {
  constexpr int BM = kWgRows, BN = kWgRows, kThreads = kWgThreads, kTileBytes = kWgTileBytes<D>;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = align_smem_1024(smem_raw);
  const uint32_t base = smem_u32(smem);
  // Layout: Q, dO; then per stage K, V; then BM floats of D_i; then the mbarriers of the tile
  // copies: Q and dO, then one per K, V stage.
  const uint32_t sQ = base, sdO = base + kTileBytes;
  auto sK = [&](int stage) { return base + (2 + 2 * stage) * kTileBytes; };
  auto sV = [&](int stage) { return sK(stage) + kTileBytes; };
  float* s_dvec = reinterpret_cast<float*>(smem + 6 * kTileBytes);
  const uint32_t q_bar = smem_u32(s_dvec + 4 * BM);
  auto kv_bar = [&](int stage) { return q_bar + 8 * (1 + stage); };

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
  const QueryBlock<D, BM, BN> blk(p);
  const int T = blk.T, m0 = blk.m0, n_first = blk.n_first, n_last = blk.n_last, hk = blk.h / p.group;

  // All tiles come by the copy engine; thread 0 asks for them.
  if (tid == 0) {
    for (int i = 0; i < 3; ++i) mbarrier_init(q_bar + 8 * i, 1);
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
  const int w1_lo = int(p.mask.lowest_key(w1));
  int row[2], row_lo[2];
  float row_lse2[2], row_dvec[2];  // lse * log2(e), D_i; zeros on padded rows (their dS is 0)
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int t = w0 + g + 8 * half;
    row[half] = t;
    row_lo[half] = int(p.mask.lowest_key(t));
    row_lse2[half] = t < T ? p.lse[(size_t(blk.b) * p.Hq + blk.h) * T + t] : 0.f;  // times log2(e) below
  }

  mbarrier_wait(q_bar, 0);  // Q and dO have landed; K and V may still be in flight
  dots.finish(p, blk, smem + kTileBytes, s_dvec);
  __syncthreads();
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    row_dvec[half] = s_dvec[warp * 16 + g + 8 * half];  // 0 on padded rows
    // Only here, after the waits, so that the lse reads' latency hides under the tile copies'
    // (scaled next to the read, the first use stalled on it: a tenth of the kernel's stalls).
    row_lse2[half] *= kLog2e;
  }

  float dq_acc[D / 8][4];  // C tile j = head-dim columns 8j..8j+7
#pragma unroll
  for (int j = 0; j < D / 8; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) dq_acc[j][i] = 0.f;

  // dQ += dS K, 16 keys per k-step: rows 16kk.. of the K tile read N-major, per 64-column half h
  // into C tiles 8h..8h+7 of dQ. As in dK/dV, a tile's product is issued in the next iteration,
  // ahead of that tile's S and dP, and waited for inside it.
  uint32_t dsa[BN / 16][4];  // dS of the previous tile (its K in stage ^ 1) as A fragments
  auto issue_dq = [&](uint32_t k_tile) {
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
      for (int h = 0; h < D / 64; ++h) wgmma_rs_bn(acc_half(dq_acc, h), dsa[kk], nmajor_desc<BN>(k_tile, kk, h));
    wgmma_commit();
  };
  // Key tile n (its K, V in `stage`); the first is peeled off as in dK/dV.
  auto tile = [&](auto with_prev, int n, int stage) {
    mbarrier_wait(kv_bar(stage), ((n_last - n) >> 1) & 1);  // K(n), V(n): the stage's (n_last - n) / 2-th fill
    const int n0 = n * BN;
    const uint32_t k_tile = sK(stage), v_tile = sV(stage);

    // S = Q K^T and dP = dO V^T over D / 16 k-steps (the first overwrites), in commit groups of
    // their own so that P is computed while dP still runs.
    float s_acc[BN / 8][4], dp_acc[BN / 8][4];
    wgmma_fence();
    if constexpr (decltype(with_prev)::value) issue_dq(sK(stage ^ 1));
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) wgmma_ss(s_acc, kmajor_desc<BM>(sQ, ks), kmajor_desc<BN>(k_tile, ks), ks > 0);
    wgmma_commit();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)
      wgmma_ss(dp_acc, kmajor_desc<BM>(sdO, ks), kmajor_desc<BN>(v_tile, ks), ks > 0);
    wgmma_commit();
    wgmma_wait<2>();  // the previous tile's dQ product is done; S, dP may still run
    __syncthreads();  // ... in every warp: K, V stage ^ 1 may be refilled
    if (n > n_first) load_kv(n - 1, stage ^ 1);
    wgmma_wait<1>();  // S is done; dP may still run

    // Disallowed pairs get S = -inf, so P = exp(S * scale - lse) is exactly 0 (lse is finite; padded
    // rows use 0). A separate masking pass, taken only by tiles that cross a mask edge, keeps the
    // compares off every other tile: inline, they were most of this kernel's integer work (ALU the
    // busiest pipe in Nsight Compute). Then dS = P (dP - D_i).
    if (!(n0 + BN - 1 <= w0 && n0 >= w1_lo)) {
#pragma unroll
      for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int half = i >> 1, s = n0 + j * 8 + 2 * c + (i & 1);
          if (s < row_lo[half] || s > row[half]) s_acc[j][i] = -INFINITY;
        }
    }
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
  tile(std::false_type{}, n_last, 0);
  for (int n = n_last - 1; n >= n_first; --n) tile(std::true_type{}, n, (n_last - n) & 1);
  wgmma_fence();
  issue_dq(sK((n_last - n_first) & 1));
  wgmma_wait_all();

  // dQ leaves through the Q tile, free now.
  __syncthreads();  // every warp is done reading Q
  stage_rows<D>(sQ, dq_acc, p.scale, p.scale, warp, lane);
  fence_proxy_async();
  __syncthreads();
  if (tid == 0) store_head_tile<D>(p.tm_dq, sQ, m0, blk.h, blk.b);
}
#endif  // HYLO_WGMMA

template <int D>
void launch_backward(const BwdParams& p, cudaStream_t stream) {
  // dQ first: it also writes the D_i that dK/dV reads.
#if HYLO_WGMMA
  constexpr int kSmem = kWgBwdSmem<D>;
  reserve_smem<attention_bwd_dq_wgmma_kernel<D>>(kSmem);
  attention_bwd_dq_wgmma_kernel<D><<<dim3(ceil_div(p.T, kWgRows), p.Hq, p.B), kWgThreads, kSmem, stream>>>(p);
  HYLO_CUDA_LAUNCH_CHECK("attention_bwd_dq_kernel");
  reserve_smem<attention_bwd_dkdv_wgmma_kernel<D>>(kSmem);
  attention_bwd_dkdv_wgmma_kernel<D><<<dim3(ceil_div(p.T, kWgRows), p.Hkv, p.B), kWgThreads, kSmem, stream>>>(p);
  HYLO_CUDA_LAUNCH_CHECK("attention_bwd_dkdv_kernel");
#else
  {
    using Tr = DqTraits<D>;
    constexpr int BM = Tr::kWarps * 16 * Tr::kMTiles, kSmem = (2 * BM + 4 * Tr::kBlockN) * D * 2 + BM * 4;
    reserve_smem<attention_bwd_dq_kernel<D>>(kSmem);
    attention_bwd_dq_kernel<D><<<dim3(ceil_div(p.T, BM), p.Hq, p.B), Tr::kWarps * 32, kSmem, stream>>>(p);
    HYLO_CUDA_LAUNCH_CHECK("attention_bwd_dq_kernel");
  }
  {
    using Tr = DkvTraits<D>;
    constexpr int BN = Tr::kWarps * 16 * Tr::kMTiles, kSmem = (2 * BN + 4 * Tr::kBlockM) * D * 2 + 4 * Tr::kBlockM * 4;
    reserve_smem<attention_bwd_dkdv_kernel<D>>(kSmem);
    attention_bwd_dkdv_kernel<D><<<dim3(ceil_div(p.T, BN), p.Hkv, p.B), Tr::kWarps * 32, kSmem, stream>>>(p);
    HYLO_CUDA_LAUNCH_CHECK("attention_bwd_dkdv_kernel");
  }
#endif
}

}  // namespace
}  // namespace attn

// Rows of the lse * log2(e) and D_i workspace: T padded to a multiple of 4 floats (tile copies
// need 16-byte row strides).
static int padded_rows(int T) { return (T + 3) / 4 * 4; }

size_t attention_backward_workspace_bytes(const AttnShape& shape) {
  const size_t bytes = 2 * size_t(shape.B) * shape.Hq * padded_rows(shape.T) * sizeof(float);
  return (bytes + 255) / 256 * 256;
}

void attention_backward(const AttnShape& shape, const AttnMask& mask, const bf16* q, const bf16* k,
                        const bf16* v, const bf16* out, const float* lse, const bf16* dout, bf16* dq,
                        bf16* dk, bf16* dv, void* workspace, cudaStream_t stream) {
  check_attention_args(shape, mask);
  HYLO_CUDA_REQUIRE(attention_supports_head_dim(shape.D),
                    "attention_backward (CUDA): head dim %d unsupported (64 or 128)", shape.D);
  HYLO_CUDA_REQUIRE(workspace != nullptr, "attention_backward (CUDA): needs a workspace of %zu bytes",
                    attention_backward_workspace_bytes(shape));
  attn::BwdParams p;
  p.q = reinterpret_cast<const __nv_bfloat16*>(q);
  p.k = reinterpret_cast<const __nv_bfloat16*>(k);
  p.v = reinterpret_cast<const __nv_bfloat16*>(v);
  p.out = reinterpret_cast<const __nv_bfloat16*>(out);
  p.dout = reinterpret_cast<const __nv_bfloat16*>(dout);
  p.lse = lse;
  p.dq = reinterpret_cast<__nv_bfloat16*>(dq);
  p.dk = reinterpret_cast<__nv_bfloat16*>(dk);
  p.dv = reinterpret_cast<__nv_bfloat16*>(dv);
  p.rows = static_cast<float*>(workspace);
  p.B = shape.B;
  p.T = shape.T;
  p.T_pad = padded_rows(shape.T);
  p.Hq = shape.Hq;
  p.Hkv = shape.Hkv;
  p.group = shape.Hq / shape.Hkv;
  p.mask = mask;
  p.scale = 1.f / std::sqrt(float(shape.D));
  p.scale_log2 = p.scale * kLog2e;
#if HYLO_WGMMA
  p.tm_q = attn::make_head_tile_map(q, shape.B, shape.T, shape.Hq, shape.D);
  p.tm_k = attn::make_head_tile_map(k, shape.B, shape.T, shape.Hkv, shape.D);
  p.tm_v = attn::make_head_tile_map(v, shape.B, shape.T, shape.Hkv, shape.D);
  p.tm_dout = attn::make_head_tile_map(dout, shape.B, shape.T, shape.Hq, shape.D);
  p.tm_dq = attn::make_head_tile_map(dq, shape.B, shape.T, shape.Hq, shape.D);
  p.tm_dk = attn::make_head_tile_map(dk, shape.B, shape.T, shape.Hkv, shape.D);
  p.tm_dv = attn::make_head_tile_map(dv, shape.B, shape.T, shape.Hkv, shape.D);
  p.tm_rows = attn::make_row_map(p.rows, 2 * shape.B * shape.Hq, p.T_pad);
#endif
  if (shape.D == 64)
    attn::launch_backward<64>(p, stream);
  else
    attn::launch_backward<128>(p, stream);
}

}  // namespace hylo::cuda
