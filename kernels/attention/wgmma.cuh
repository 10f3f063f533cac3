// Hopper warpgroup MMA (wgmma, sm_90a) for the head-dim-64 attention kernels: 64 x 64 x 16 bf16
// products with fp32 accumulators, B (and optionally A) read by the tensor cores straight from
// shared memory. Built only when the CUDA target is sm_90a (HYLO_WGMMA, set by CMakeLists.txt).
//
// Why our tiles need no copy: a 64-column bf16 tile stored by load_tile<R, 64> has 128-byte rows
// with 16-byte chunk c of row r at chunk c ^ (r % 8) (attention_common.cuh, swizzled<64>). That is
// the hardware's 128-byte swizzle atom (8 rows x 128 B) repeated down the rows, provided the tile
// starts on a 1024-byte boundary; the descriptor below says so.
//
// Register layouts (PTX ISA, "Register Fragments" of wgmma .m64nNk16): warp w of the warpgroup owns
// rows 16w..16w+15; per warp they are the mma.sync m16n8k16 layouts of attention_common.cuh, so
// d[j] (4 floats) is C tile j (columns 8j..8j+7) and an A operand is an A fragment (c_to_a).
#pragma once
#include <cstdint>

#include "kernels/attention/attention_common.cuh"

#if HYLO_WGMMA
namespace hylo::cuda::attn {

// Every wgmma kernel here is one warpgroup working on 64-row tiles (64 queries or 64 keys: the
// instruction's M) of head dim 64.
constexpr int kWgThreads = 128, kWgRows = 64, kWgTileBytes = kWgRows * 64 * 2;

// The dynamic shared memory base rounded up to the 1024-byte swizzle atom (the launch reserves
// 1024 bytes of slack).
__device__ __forceinline__ unsigned char* align_smem_1024(unsigned char* raw) {
  const uint32_t raw_addr = static_cast<uint32_t>(__cvta_generic_to_shared(raw));
  return raw + (((raw_addr + 1023) & ~1023u) - raw_addr);
}

// Shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"): start address, leading
// byte offset, stride byte offset (all >> 4), swizzle mode 1 = 128 B in bits 62-63.
//   K-major operand (tile rows = M or N, a row's 64 elements = K): the leading offset is unused
//   for swizzled layouts; the stride offset steps between 8-row groups: 8 x 128 B.
//   N-major B (tile rows = K, a row's 64 elements = N): the stride offset again steps between
//   8-row groups along K (1024 B); the leading offset would step to the next 64 columns of N,
//   which a 64-wide tile does not have.
// A k-step inside a K-major row advances the start address by 32 bytes (16 bf16): the hardware
// applies the swizzle to the final address bits, as for the base tile.
__device__ __forceinline__ uint64_t sw128_desc(uint32_t smem_addr) {
  constexpr uint64_t kLeading = 1, kStride = 1024 >> 4, kSwizzle128 = 1;
  return uint64_t((smem_addr & 0x3FFFF) >> 4) | (kLeading << 16) | (kStride << 32) | (kSwizzle128 << 62);
}

// Orders this thread's register writes before wgmma reads them (accumulators, A fragments).
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }

// Shared memory written by ordinary stores or cp.async must be made visible to the tensor cores'
// (async) proxy before a barrier that precedes their reads.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

#define HYLO_WGMMA_D32                                                                                          \
  "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]),    \
      "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), \
      "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), \
      "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), \
      "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
#define HYLO_WGMMA_D_LIST                                                                                  \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, " \
  "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"

// d (+)= A * B, A (64 x 16) and B (16 x 64) both K-major in shared memory; accumulate = false
// overwrites d.
__device__ __forceinline__ void wgmma_ss(float (&d)[8][4], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " HYLO_WGMMA_D_LIST ", %32, %33, p, 1, 1, 0, 0;\n}\n"
      : HYLO_WGMMA_D32
      : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)));
}

// d += A * B, A (64 x 16) from registers (this warp's 16 rows as an A fragment), B (16 x 64) N-major
// in shared memory (tile rows = K).
__device__ __forceinline__ void wgmma_rs_bn(float (&d)[8][4], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " HYLO_WGMMA_D_LIST
      ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : HYLO_WGMMA_D32
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}

#undef HYLO_WGMMA_D32
#undef HYLO_WGMMA_D_LIST

}  // namespace hylo::cuda::attn
#endif  // HYLO_WGMMA
