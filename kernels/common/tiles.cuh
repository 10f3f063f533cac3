// Tensor-core tile building blocks shared by the attention and decode kernels: mma.sync m16n8k16 bf16 fragments, ldmatrix,
// XOR-swizzled shared-memory tiles (the one tile layout of every kernel, wgmma and mma.sync alike)
// with their cp.async loads (the wgmma kernels load the same tiles by TMA, attention/tma.cuh), and the
// host-side launch checks.
//
// Fragment vocabulary (PTX ISA, "Matrix fragments for mma.m16n8k16"), lane = 4 * g + c
// (g = lane / 4 is the "group", c = lane % 4 the thread in group):
//   A 16x16 (row-major, 4 regs of bf16x2): a0 = (g, 2c..2c+1), a1 = (g+8, 2c..), a2 = (g, 2c+8..),
//     a3 = (g+8, 2c+8..).
//   B 16x8 (k x n, 2 regs): b0 = (k 2c..2c+1, n g), b1 = (k 2c+8.., n g).
//   C 16x8 fp32 (4 floats): c0,c1 = (g, 2c..2c+1), c2,c3 = (g+8, 2c..2c+1).
// Two adjacent C tiles (16 x 16 columns) hold exactly the A fragment of the same 16 x 16 block, so a
// softmax result feeds the next product from registers, never through shared memory.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/common/common.cuh"
#include "attn/shape.h"

namespace hylo::cuda::attn {

// An mma.sync kernel's shape: kWarps warps of 16 * kMTiles rows each (query rows in the forward and
// dQ, keys in dK/dV), the other side (keys, or queries) in tiles of kOtherTile, kMinBlocks resident
// blocks per SM (the register cap).
template <int W, int MT, int OtherTile, int MinBlocks>
struct WarpTiling {
  static constexpr int kWarps = W, kMTiles = MT, kOtherTile = OtherTile, kMinBlocks = MinBlocks;
};

// ---- tensor-core and data-movement primitives --------------------------------------------------

// c += a * b, bf16 inputs, fp32 accumulators.
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The same A against two adjacent n-tiles: c0 += a * (b[0], b[1]) and c1 += a * (b[2], b[3]), the
// register order of the load_frag_b_pair loaders below.
__device__ __forceinline__ void mma_16816_x2(float (&c0)[4], float (&c1)[4], const uint32_t (&a)[4],
                                             const uint32_t (&b)[4]) {
  mma_16816(c0, a, b[0], b[1]);
  mma_16816(c1, a, b[2], b[3]);
}

// Sets every float of an accumulator array (any shape) to 0.
template <class Acc>
__device__ __forceinline__ void zero_acc(Acc& acc) {
  float* f = reinterpret_cast<float*>(&acc);
#pragma unroll
  for (int i = 0; i < int(sizeof(Acc) / sizeof(float)); ++i) f[i] = 0.f;
}

// Four 8x8 bf16 matrices; lane i gives the row address of matrix i / 8, row i % 8; register j
// receives matrix j in the C-fragment pattern (row g, columns 2c, 2c+1).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr)
               : "memory");
}
// Same, each 8x8 matrix transposed: register j holds (rows 2c, 2c+1; column g) of matrix j.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr)
               : "memory");
}

// 16-byte global -> shared copy that bypasses L1; src_bytes = 0 writes zeros (tails past T).
__device__ __forceinline__ void cp_async_16(uint32_t smem_addr, const void* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr), "l"(gmem), "r"(src_bytes)
               : "memory");
}
// 4-byte variant for fp32 rows (lse, D_i) whose starts are not 16-byte aligned for arbitrary T.
__device__ __forceinline__ void cp_async_4(uint32_t smem_addr, const void* gmem, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr), "l"(gmem), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most `Pending` of this thread's committed cp.async groups are still in flight
// (groups complete in commit order).
template <int Pending>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { cp_async_wait_group<0>(); }

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 2^x in one MUFU instruction (exp2f adds range fix-ups we do not need: inputs are <= 0 or -inf,
// and flushing denormal probabilities to zero is harmless next to bf16 rounding).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Two floats -> bf16x2 in one register, the first in the low half (the lower column).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// ---- shared-memory tiles -----------------------------------------------------------------------
// A tile of R rows x D bf16 columns is stored as D / 64 column halves (for D = 128: columns 0..63,
// then 64..127), each an R x 64 row-major region of 128-byte rows at byte offset half * R * 128;
// inside a half, 16-byte chunk c of row r sits at chunk c ^ (r % 8). For D = 64 that is one plain
// row-major tile.
// Why halves: a 64-column half with this XOR is exactly Hopper's 128-byte swizzle atom (8 rows x
// 128 B) repeated down the rows, so wgmma reads it straight from shared memory (wgmma.cuh); 256-byte
// rows are no canonical wgmma layout. The mma.sync kernels use the same tiles: ldmatrix reads one
// chunk from each of 8 consecutive rows of one half, 128 bytes apart, and the XOR spreads those
// over all 32 banks (without it all 8 sit in the same 4 banks).
// R must be a multiple of 8 so that every half starts on a whole atom (R * 128 = n * 1024 bytes).
template <int R>
__host__ __device__ __forceinline__ constexpr uint32_t swizzled(int row, int chunk) {
  static_assert(R % 8 == 0, "a half tile must hold whole 8-row swizzle atoms");
  return uint32_t((chunk >> 3) * (R * 128) + row * 128 + (((chunk & 7) ^ (row & 7)) << 4));
}
// Spot checks of the arithmetic (D = 64 is the former row-major layout; chunk 9 of a 64-row tile
// is chunk 1 of the second half, 8 KB in).
static_assert(swizzled<64>(3, 5) == 3 * 128 + ((5 ^ 3) << 4));
static_assert(swizzled<64>(10, 9) == 64 * 128 + 10 * 128 + ((1 ^ 2) << 4));
static_assert(swizzled<32>(0, 15) == 32 * 128 + (7 << 4));

// cp.async rows [row0, row0 + R) of a (.., T, H, D) head slice into a swizzled tile; rows >= T are
// zero-filled, so padded queries and keys contribute exact zeros, never NaN. Thread i copies chunk
// i % (D / 8) of rows i / (D / 8) + k * kRowsPerPass: each row is one contiguous global read, and
// every 8 consecutive threads write the 8 chunks of one 128-byte row of one half (no bank
// conflicts). The source pointer advances by kRowsPerPass rows per pass instead of being formed
// from (row0 + r) * row_stride: that form let the compiler hoist one 64-bit r * row_stride per pass
// out of the kernels' tile loops, registers their hd128 versions cannot spare.
template <int R, int D, int kThreads>
__device__ __forceinline__ void load_tile(uint32_t smem_tile, const __nv_bfloat16* head_base, size_t row_stride,
                                          int row0, int T, int tid) {
  static_assert(D % 64 == 0, "tiles are made of 64-column halves");
  constexpr int kChunksPerRow = D / 8, kRowsPerPass = kThreads / kChunksPerRow;
  static_assert(kThreads % kChunksPerRow == 0 && R % kRowsPerPass == 0, "tile rows must split evenly over the block");
  const int r0 = tid / kChunksPerRow, c = tid % kChunksPerRow;
  const __nv_bfloat16* src = head_base + size_t(row0 + r0) * row_stride + c * 8;  // read only for rows < T
  const size_t step = size_t(kRowsPerPass) * row_stride;
#pragma unroll
  for (int k = 0; k < R / kRowsPerPass; ++k, src += step) {
    const int r = r0 + k * kRowsPerPass;
    const bool inside = row0 + r < T;
    cp_async_16(smem_tile + swizzled<R>(r, c), inside ? src : head_base, inside ? 16 : 0);
  }
}

// The fragment loaders take R, the tile's row count (which places the second half of a D = 128
// tile); the head dim itself only bounds kstep / npair. Columns 16 * kstep.. are chunks 2 * kstep
// and 2 * kstep + 1, always inside one half.

// A fragment (16 x 16 at rows row0.., columns 16 * kstep..) of a swizzled tile, row-major use.
template <int R>
__device__ __forceinline__ void load_frag_a(uint32_t (&a)[4], uint32_t smem_tile, int row0, int kstep, int lane) {
  // Matrices: (rows 0-7, k 0-7) a0, (rows 8-15, k 0-7) a1, (rows 0-7, k 8-15) a2, (rows 8-15, k 8-15) a3.
  const int row = row0 + (lane & 7) + (((lane >> 3) & 1) << 3);
  ldmatrix_x4(a, smem_tile + swizzled<R>(row, kstep * 2 + (lane >> 4)));
}

// B fragments of two adjacent n-tiles when the tile holds B^T row-major (rows = n, columns = k):
// the keys of S = Q K^T. r[0], r[1] = b0, b1 of n-tile row0..row0+7; r[2], r[3] of row0+8..row0+15.
template <int R>
__device__ __forceinline__ void load_frag_b_pair(uint32_t (&r)[4], uint32_t smem_tile, int row0, int kstep,
                                                 int lane) {
  const int row = row0 + (lane & 7) + ((lane >> 4) << 3);
  ldmatrix_x4(r, smem_tile + swizzled<R>(row, kstep * 2 + ((lane >> 3) & 1)));
}

// B fragments of two adjacent n-tiles when the tile holds B row-major (rows = k, columns = n):
// the values of O = P V. k rows row0..row0+15, n columns 16 * npair..; r[0], r[1] = b0, b1 of
// columns 16 * npair + 0..7, r[2], r[3] of + 8..15.
template <int R>
__device__ __forceinline__ void load_frag_b_pair_trans(uint32_t (&r)[4], uint32_t smem_tile, int row0, int npair,
                                                       int lane) {
  const int row = row0 + (lane & 7) + (((lane >> 3) & 1) << 3);
  ldmatrix_x4_trans(r, smem_tile + swizzled<R>(row, npair * 2 + (lane >> 4)));
}

// The A fragment of k-step j (columns 16j..16j+15) from C tiles 2j and 2j+1, rounded to bf16.
template <int N>
__device__ __forceinline__ void c_to_a(uint32_t (&a)[4], const float (&c)[N][4], int j) {
  a[0] = pack_bf16(c[2 * j][0], c[2 * j][1]);
  a[1] = pack_bf16(c[2 * j][2], c[2 * j][3]);
  a[2] = pack_bf16(c[2 * j + 1][0], c[2 * j + 1][1]);
  a[3] = pack_bf16(c[2 * j + 1][2], c[2 * j + 1][3]);
}

// Writes a warp's 16 x D fp32 accumulator block times `scale` as bf16 rows row0.. of a
// (.., T, H, D) head slice; rows >= T are dropped. Each quad writes 16 contiguous bytes per row.
template <int D>
__device__ __forceinline__ void store_rows(__nv_bfloat16* head_base, size_t row_stride, int row0, int T,
                                           const float (&acc)[D / 8][4], float scale_lo, float scale_hi,
                                           int lane) {
  const int g = lane >> 2, c = lane & 3;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = row0 + g + 8 * half;
    if (row >= T) continue;
    const float s = half ? scale_hi : scale_lo;
    __nv_bfloat16* dst = head_base + size_t(row) * row_stride + 2 * c;
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt)
      *reinterpret_cast<uint32_t*>(dst + nt * 8) = pack_bf16(acc[nt][2 * half] * s, acc[nt][2 * half + 1] * s);
  }
}

// ---- one warp's 16 query rows -------------------------------------------------------------------
// A warp's rows t0..t0+15 in C-tile layout (mma.sync's m-tile and wgmma's per-warp share alike):
// this thread holds rows t0 + g (elements 0, 1 of each C tile) and t0 + g + 8 (elements 2, 3).

// Scores of the rows against keys n0.. (N C tiles): pairs outside [row_lo[half], row] become -inf,
// so their probabilities are exactly 0.
template <int N>
__device__ __forceinline__ void mask_scores(float (&s)[N][4], int t0, const int (&row_lo)[2], int n0, int lane) {
  const int g = lane >> 2, c = lane & 3;
#pragma unroll
  for (int j = 0; j < N; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int half = i >> 1, t = t0 + g + 8 * half, key = n0 + j * 8 + 2 * c + (i & 1);
      if (key < row_lo[half] || key > t) s[j][i] = -INFINITY;
    }
}

// One online-softmax step: raw scores s become exp2(s * scale_log2 - running max), this thread's
// partial row sums take them in, and the output accumulator o (ND C tiles) is rescaled when the
// running max (of raw scores) grows.
template <int N, int ND>
__device__ __forceinline__ void online_softmax(float (&s)[N][4], float (&o)[ND][4], float (&row_max)[2],
                                               float (&row_sum)[2], float scale_log2) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float mx = row_max[half];
#pragma unroll
    for (int j = 0; j < N; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * half], s[j][2 * half + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    // A row with nothing allowed yet keeps max -inf; subtracting 0 then keeps exp2(-inf) = 0.
    const float base = mx == -INFINITY ? 0.f : mx * scale_log2;
    const float correction = fast_exp2(row_max[half] * scale_log2 - base);
    row_max[half] = mx;
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < N; ++j) {
      float* sv = &s[j][2 * half];
      sv[0] = fast_exp2(fmaf(sv[0], scale_log2, -base));
      sv[1] = fast_exp2(fmaf(sv[1], scale_log2, -base));
      sum += sv[0] + sv[1];
    }
    row_sum[half] = row_sum[half] * correction + sum;
#pragma unroll
    for (int j = 0; j < ND; ++j) {
      o[j][2 * half] *= correction;
      o[j][2 * half + 1] *= correction;
    }
  }
}

// The rows done: row sums finished across the quad, lse (natural log, of the scaled scores)
// written for rows < T, and the factors that normalise the output returned (0 for an empty row).
__device__ __forceinline__ void finish_rows(const float (&row_max)[2], const float (&row_sum)[2], float scale,
                                            float* lse_row, int t0, int T, int lane, float (&inv)[2]) {
  const int g = lane >> 2, c = lane & 3;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float sum = row_sum[half];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    inv[half] = sum > 0.f ? 1.f / sum : 0.f;
    const int t = t0 + g + 8 * half;
    if (c == 0 && t < T) lse_row[t] = row_max[half] * scale + logf(sum);
  }
}

// ---- the work of one query-tile block ----------------------------------------------------------
// Forward and dQ blocks own BM rows from m0 of query head h (kv head hk), batch b, and visit key
// tiles n_last down to n_first: those holding a key some of the rows may see. Blocks are numbered
// so that the longest rows start first (the causal tail balances). Params: FwdParams or BwdParams.
template <int D, int BM, int BN>
struct QueryBlock {
  int T, h, hk, b, m0, n_first, n_last;
  size_t q_stride, kv_stride, q_off, kv_off;  // first element of this head in (B, T, H, D)

  template <class Params>
  __device__ __forceinline__ explicit QueryBlock(const Params& p)
      : T(p.T), h(blockIdx.y), hk(p.per_group(h)), b(blockIdx.z), m0((gridDim.x - 1 - blockIdx.x) * BM),
        q_stride(size_t(p.Hq) * D), kv_stride(size_t(p.Hkv) * D),
        q_off((size_t(blockIdx.z) * p.T * p.Hq + blockIdx.y) * D), kv_off((size_t(blockIdx.z) * p.T * p.Hkv + hk) * D) {
    n_first = p.mask.lowest_key(m0) / BN;
    n_last = min(m0 + BM - 1, T - 1) / BN;
  }
  // cp.async of key tile n's K and V rows (zeros past T).
  template <int kThreads, class Params>
  __device__ __forceinline__ void load_kv(const Params& p, int n, uint32_t sK, uint32_t sV, int tid) const {
    load_tile<BN, D, kThreads>(sK, p.k + kv_off, kv_stride, n * BN, T, tid);
    load_tile<BN, D, kThreads>(sV, p.v + kv_off, kv_stride, n * BN, T, tid);
  }
};

// ---- host side ---------------------------------------------------------------------------------

// Raises Kernel's dynamic shared memory limit to `smem` bytes on its first call; the limit stays set
// for the process (hylo drives one GPU per process).
template <auto Kernel>
void reserve_smem(int smem) {
  static const bool reserved = [smem] {
    HYLO_CUDA_CHECK(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    return true;
  }();
  (void)reserved;
}

// Launches Kernel(p): blocks of `threads`, `smem` bytes of dynamic shared memory. The caller checks
// the launch (HYLO_CUDA_LAUNCH_CHECK, which names the call site).
template <auto Kernel, class Params>
void launch_kernel(const Params& p, dim3 grid, int threads, int smem, cudaStream_t stream) {
  reserve_smem<Kernel>(smem);
  Kernel<<<grid, threads, smem, stream>>>(p);
}

}  // namespace hylo::cuda::attn
