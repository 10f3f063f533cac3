// Hopper warpgroup MMA (wgmma, sm_90a) for the attention kernels (head dims 64 and 128): 64 x 64 x 16
// bf16 products with fp32 accumulators, B (and optionally A) read by the tensor cores straight from
// shared memory. Built only when the CUDA target is sm_90a (HYLO_WGMMA, set by CMakeLists.txt).
//
// Why our tiles need no copy: every 64-column half of a tile stored by load_tile (common/tiles.cuh,
// swizzled<R>) has 128-byte rows with 16-byte chunk c of row r at chunk c ^ (r % 8). That is the
// hardware's 128-byte swizzle atom (8 rows x 128 B) repeated down the rows, provided the half starts
// on a 1024-byte boundary: every tile does (align_smem_1024, and tiles are whole KB) and so does the
// second half of a D = 128 tile (R * 128 bytes in, R a multiple of 8). The descriptor below says so.
//
// Head dim 128 is two such halves, so every product is still an m64n64k16:
//   K-major operands (the head dim is the reduction): k-step ks reads columns 16ks..16ks+15, which
//   lie in half ks / 4 at byte 32 * (ks % 4) of each row (kmajor_desc).
//   N-major B with N = the head dim (O += P V, dV += P^T dO, dK += dS^T Q, dQ += dS K): one
//   m64n64k16 per 64-column half, each into its own 8 C tiles of the accumulator (nmajor_desc,
//   acc_half).
//
// Register layouts (PTX ISA, "Register Fragments" of wgmma .m64nNk16): warp w of the warpgroup owns
// rows 16w..16w+15; per warp they are the mma.sync m16n8k16 layouts of common/tiles.cuh, so
// d[j] (4 floats) is C tile j (columns 8j..8j+7) and an A operand is an A fragment (c_to_a).
#pragma once
#include <cstdint>

#include "kernels/common/tiles.cuh"

#if HYLO_WGMMA
namespace hylo::cuda::attn {

// Every wgmma kernel here is one warpgroup working on 64-row tiles (64 queries or 64 keys: the
// instruction's M, and its N for the score products) of head dim D.
constexpr int kWgThreads = 128, kWgRows = 64;
// One 64 x D bf16 tile: 8 KB (D = 64) or 16 KB (D = 128), so tiles laid end to end from a 1024-byte
// aligned base all start on a swizzle atom.
template <int D>
constexpr int kWgTileBytes = kWgRows * D * 2;
static_assert(kWgTileBytes<64> % 1024 == 0 && kWgTileBytes<128> % 1024 == 0);

// The dynamic shared memory base rounded up to the 1024-byte swizzle atom (the launch reserves
// 1024 bytes of slack).
__device__ __forceinline__ unsigned char* align_smem_1024(unsigned char* raw) {
  const uint32_t raw_addr = static_cast<uint32_t>(__cvta_generic_to_shared(raw));
  return raw + (((raw_addr + 1023) & ~1023u) - raw_addr);
}

// Shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"): start address, leading
// byte offset, stride byte offset (all >> 4), swizzle mode 1 = 128 B in bits 62-63. The start is
// always inside one 64-column half (R x 64, 128-byte rows):
//   K-major operand (tile rows = M or N, a half row's 64 elements = K): the leading offset is
//   unused for swizzled layouts; the stride offset steps between 8-row groups: 8 x 128 B.
//   N-major B (tile rows = K, a half row's 64 elements = N): the stride offset again steps between
//   8-row groups along K (1024 B); the leading offset would step to the next 64 columns of N,
//   which an n64 product never reads (head dim 128 issues one product per half instead).
// A k-step inside a K-major row advances the start address by 32 bytes (16 bf16): the hardware
// applies the swizzle to the final address bits, as for the base tile.
__device__ __forceinline__ uint64_t sw128_desc(uint32_t smem_addr) {
  constexpr uint64_t kLeading = 1, kStride = 1024 >> 4, kSwizzle128 = 1;
  return uint64_t((smem_addr & 0x3FFFF) >> 4) | (kLeading << 16) | (kStride << 32) | (kSwizzle128 << 62);
}

// Descriptor of k-step ks (columns 16ks..16ks+15) of an R-row tile read K-major (its rows are M or
// N, its columns the reduction). The start is the address of (row 0, column 16ks): chunk 2ks of
// row 0, which swizzled<R> puts at (ks / 4) * R * 128 (its half) + (ks % 4) * 32 (row 0: the XOR is
// the identity). Rows 8.. follow at the 1024-byte stride, and the hardware XORs the chunk bits of
// every address it forms, so this is the hd64 "+32 B per k-step" inside whichever half holds ks.
template <int R>
__device__ __forceinline__ uint64_t kmajor_desc(uint32_t tile, int ks) {
  return sw128_desc(tile + swizzled<R>(0, 2 * ks));
}
// Descriptor of k-step kk (rows 16kk..16kk+15) and 64-column half h of an R-row tile read as an
// N-major B (its rows are K, its columns N): the address of (row 16kk, column 64h), chunk 8h of row
// 16kk = h * R * 128 + kk * 2048 (16 rows of 128 B; row % 8 = 0, no XOR). The 16 rows are two
// 8-row atoms, 1024 B apart: the stride offset.
template <int R>
__device__ __forceinline__ uint64_t nmajor_desc(uint32_t tile, int kk, int h) {
  return sw128_desc(tile + swizzled<R>(16 * kk, 8 * h));
}
static_assert(swizzled<64>(0, 2 * 5) == 8192 + 32 && swizzled<64>(16 * 3, 8) == 8192 + 3 * 2048);

// Columns 64h..64h+63 of a 64 x D accumulator (C tiles 8h..8h+7) as the 64 x 64 accumulator of one
// wgmma. The arrays are registers: with h a constant after unrolling this only renames them.
template <int N>
__device__ __forceinline__ float (&acc_half(float (&acc)[N][4], int h))[8][4] {
  static_assert(N % 8 == 0, "accumulators are whole 64-column halves");
  return *reinterpret_cast<float(*)[8][4]>(&acc[8 * h]);
}

// Writes the warpgroup's 64 x D fp32 accumulator (warp w's rows 16w.., C-tile layout) times
// scale_lo / scale_hi (rows g / g + 8 of each warp) as bf16 into the swizzled 64 x D tile at
// smem_tile, for store_head_tile (tma.cuh). Each thread writes 4 bytes of chunk j of its rows; the
// XOR of the layout puts a warp's 32 writes into 32 different banks.
template <int D>
__device__ __forceinline__ void stage_rows(uint32_t smem_tile, const float (&acc)[D / 8][4], float scale_lo,
                                           float scale_hi, int warp, int lane) {
  const int g = lane >> 2, c = lane & 3;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = 16 * warp + g + 8 * half;
    const float s = half ? scale_hi : scale_lo;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      const uint32_t v = pack_bf16(acc[j][2 * half] * s, acc[j][2 * half + 1] * s);
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(smem_tile + swizzled<kWgRows>(row, j) + 4 * c), "r"(v)
                   : "memory");
    }
  }
}

// Orders this thread's register writes before wgmma reads them (accumulators, A fragments).
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most `Pending` of this warpgroup's committed groups are still running (groups
// complete in commit order): the backward kernels work on one product's result while the next
// product runs.
template <int Pending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(Pending) : "memory");
}
__device__ __forceinline__ void wgmma_wait_all() { wgmma_wait<0>(); }

// Shared memory written by ordinary stores or cp.async must be made visible to the tensor cores'
// (async) proxy before a barrier that precedes their reads.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// The wgmma kernels' output epilogue. Once every warp is done reading the shared tiles that are to
// carry the outputs (the first barrier), `stage` writes the outputs into them (stage_rows); the
// writes are made visible to the copy engine, and one thread runs `store` (store_head_tile per
// output tile), which returns once the copy engine has read the tiles.
template <class Stage, class Store>
__device__ __forceinline__ void write_outputs(Stage stage, Store store) {
  __syncthreads();
  stage();
  fence_proxy_async();
  __syncthreads();
  if (threadIdx.x == 0) store();
}

// The 32 accumulator operands with constraint C: "+f" to accumulate, "=f" when the product
// overwrites d (then d's previous values are dead to the compiler, which matters where a score
// accumulator would otherwise stay live across the next products).
#define HYLO_WGMMA_D32(C)                                                                                     \
  C(d[0][0]), C(d[0][1]), C(d[0][2]), C(d[0][3]), C(d[1][0]), C(d[1][1]), C(d[1][2]), C(d[1][3]), C(d[2][0]), \
      C(d[2][1]), C(d[2][2]), C(d[2][3]), C(d[3][0]), C(d[3][1]), C(d[3][2]), C(d[3][3]), C(d[4][0]),         \
      C(d[4][1]), C(d[4][2]), C(d[4][3]), C(d[5][0]), C(d[5][1]), C(d[5][2]), C(d[5][3]), C(d[6][0]),         \
      C(d[6][1]), C(d[6][2]), C(d[6][3]), C(d[7][0]), C(d[7][1]), C(d[7][2]), C(d[7][3])
#define HYLO_WGMMA_D_LIST                                                                                  \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, " \
  "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define HYLO_WGMMA_SS                                                                                       \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                             \
  "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " HYLO_WGMMA_D_LIST ", %32, %33, p, 1, 1, 0, 0;\n}\n"

// d (+)= A * B, A (64 x 16) and B (16 x 64) both K-major in shared memory; accumulate = false
// overwrites d (scale-d = 0) and, to the compiler, d's old values are not read. The score
// accumulators are declared per tile and start with accumulate = false, so they are dead between
// their conversion to A fragments and the next tile's products.
__device__ __forceinline__ void wgmma_ss(float (&d)[8][4], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
  if (accumulate)
    asm volatile(HYLO_WGMMA_SS : HYLO_WGMMA_D32("+f") : "l"(desc_a), "l"(desc_b), "r"(1));
  else
    asm volatile(HYLO_WGMMA_SS : HYLO_WGMMA_D32("=f") : "l"(desc_a), "l"(desc_b), "r"(0));
}

// d += A * B, A (64 x 16) from registers (this warp's 16 rows as an A fragment), B (16 x 64) N-major
// in shared memory (tile rows = K). For a 64 x 128 accumulator, d is acc_half(acc, h).
__device__ __forceinline__ void wgmma_rs_bn(float (&d)[8][4], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " HYLO_WGMMA_D_LIST
      ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : HYLO_WGMMA_D32("+f")
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}

#undef HYLO_WGMMA_D32
#undef HYLO_WGMMA_D_LIST
#undef HYLO_WGMMA_SS

}  // namespace hylo::cuda::attn
#endif  // HYLO_WGMMA
