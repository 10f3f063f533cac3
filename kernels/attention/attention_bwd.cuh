// The backward's pieces shared by its two kernel families (attention_bwd_wgmma.cu for sm_90a,
// attention_bwd_mma.cu for the other targets) and its host entry (attention_bwd.cu).
//
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
#pragma once
#include <cuda_bf16.h>

#include "kernels/attention/attention_params.cuh"

namespace hylo::cuda::attn {

// Floats per row of BwdParams::rows: T padded to a multiple of 4 (16 bytes, which tile copies
// need for a row stride).
__host__ __device__ constexpr int padded_rows(int T) { return (T + 3) / 4 * 4; }

struct BwdParams : AttnInputs {
  const __nv_bfloat16 *out, *dout;
  const float* lse;
  __nv_bfloat16 *dq, *dk, *dv;
  // What the dQ pass hands dK/dV (the workspace): lse * log2(e), then D_i, each 2 x B x Hq rows of
  // padded_rows(T) floats, zero past T.
  float* rows;
#if HYLO_WGMMA
  CUtensorMap tm_dout, tm_dq, tm_dk, tm_dv, tm_rows;
#endif
  // Row of `rows` holding query head h, batch b: lse * log2(e) (which = 0) or D_i (which = 1); its
  // index (the tile copies' coordinate) and its first float.
  __device__ __forceinline__ int rows_row(int which, int b, int h) const { return (which * B + b) * Hq + h; }
  __device__ __forceinline__ float* row(int which, int b, int h) const {
    return rows + size_t(rows_row(which, b, h)) * padded_rows(T);
  }
};

// A key-tile block (dK, dV) of BN keys from n0 of kv head hk, batch b. It visits, for each query
// head of the kv head's group in turn, the query tiles m_first.. that see one of its keys (tiles of
// BM rows); QueryTile walks that order. The blocks take (batch, kv head) in the reverse of the
// grid's order, which is the dQ kernel's: dQ, which runs just before, ends with the last heads,
// and their Q, dO, K and V rows are still in L2 when dK/dV starts with them.
template <int D, int BN, int BM>
struct KeyBlock {
  int T, hk, b, n0, m_first, m_count, iters;
  struct QueryTile {
    int h, m0;  // query head, first row
  };

  __device__ __forceinline__ explicit KeyBlock(const BwdParams& p)
      : T(p.T), hk(gridDim.y - 1 - blockIdx.y), b(gridDim.z - 1 - blockIdx.z), n0(blockIdx.x * BN) {
    m_first = n0 / BM;
    m_count = last_query(p, min(n0 + BN - 1, T - 1)) / BM - m_first + 1;
    iters = p.group * m_count;
  }
  // Highest query that may see key s, clamped to the sequence.
  __device__ __forceinline__ int last_query(const BwdParams& p, int s) const {
    return int(min(p.mask.highest_query(s), int64_t(T - 1)));
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
    const float* src = p.row(which, b, q.h);
    cp_async_4(smem_u32((which ? dvec : lse2) + tid % BM), t < T ? src + t : src, t < T ? 4 : 0);
  }
};

// D_i = rowsum(dO * O) of a query block's rows [m0, m0 + BM), computed by the dQ kernel that owns
// them (it has the dO tile in shared memory already): two threads per row, each half of the head
// dim. Two steps, so that the O (and lse) reads from global memory are in flight while the block
// still waits for its dO tile: the constructor issues them (before the wait), finish() forms the
// dots (after the barrier). finish() writes D_i and lse * log2(e) to p.rows for the dK/dV kernel,
// which runs after dQ, and to dvec_smem and lse2_smem (BM floats each) for the block itself, whose
// threads need them for other rows than they read; padded rows get 0 (their O and lse are taken as
// 0, their dO is zero-filled).
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
                                         const unsigned char* do_tile, float* dvec_smem, float* lse2_smem) const {
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
      lse2_smem[r] = lse * kLog2e;
      if (t < padded_rows(p.T)) {
        p.row(0, blk.b, blk.h)[t] = lse * kLog2e;
        p.row(1, blk.b, blk.h)[t] = dot;
      }
    }
  }
};

// Launches dQ, then dK/dV (dQ also writes the rows dK/dV reads); defined, for D = 64 and 128, by the
// kernel family the build targets.
template <int D>
void launch_backward(const BwdParams& p, cudaStream_t stream);

}  // namespace hylo::cuda::attn
