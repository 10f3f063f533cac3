// Hopper tensor memory accelerator (TMA, sm_90a) for the attention kernels: one thread asks the
// copy engine for a whole 64-row tile of a (B, T, H, D) tensor, which lands in shared memory in the
// same layout as load_tile's (common/tiles.cuh, swizzled<R>) and signals an mbarrier when its
// bytes have arrived. The cp.async alternative has every thread issue and address 16-byte copies
// (for a 64 x 128 tile, 8 per thread plus their index arithmetic); in the PTX of an hd128 backward
// iteration, integer instructions (largely those addresses and their bounds) outnumbered the
// floating-point ones several times over, in a kernel bound by instruction latency.
//
// Layout match: a tensor map with SWIZZLE_128B and a box of 64 columns (128 bytes) x 64 rows writes
// row r at r * 128 with 16-byte chunk c at chunk c ^ (r % 8) (the hardware XORs address bits 4-6
// with bits 7-9, given a 1024-byte aligned destination): exactly one swizzled<64> half. An hd128
// tile is two boxes, columns 0..63 into the first half and 64..127 into the second.
// Rows past T are filled with zeros by the copy engine, as load_tile does. The kernels' outputs
// leave the same way (store_head_tile): staged as bf16 in a swizzled tile (stage_rows, wgmma.cuh),
// then written by one bulk copy instead of every thread's partial-row stores.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/tiles.cuh"

#if HYLO_WGMMA
namespace hylo::cuda::attn {

// ---- host: tensor maps ------------------------------------------------------------------------

// A tensor map of a (B, T, H, D) bf16 tensor whose box is one 64-row x 64-column half tile of one
// head. Coordinates (innermost first): column, head, row, batch.
CUtensorMap make_head_tile_map(const void* base, int B, int T, int H, int D);
// A tensor map of `rows` fp32 rows of `row_len` floats (a multiple of 4), whose box is 64
// consecutive floats of one row. Coordinates: position, row.
CUtensorMap make_row_map(const float* base, int rows, int row_len);

// ---- device: mbarriers ------------------------------------------------------------------------

__device__ __forceinline__ void mbarrier_init(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
}
// Makes initialised mbarriers visible to the copy engine (the async proxy); a __syncthreads must
// follow before any thread uses them.
__device__ __forceinline__ void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// One arrival that also announces `bytes` of copies to wait for in this phase.
__device__ __forceinline__ void mbarrier_arrive_expect_bytes(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// Blocks until the phase with parity `parity` of the mbarrier has completed (its arrivals and
// bytes are all in); its copies are then visible to the waiting thread.
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
}

// ---- device: tile copies -----------------------------------------------------------------------

// Bytes of one 64 x D tile (what one load_head_tile announces), and of one load_row.
template <int D>
constexpr uint32_t kTmaTileBytes = 64 * D * 2;
constexpr uint32_t kTmaRowBytes = 64 * 4;

// Rows [row0, row0 + 64) of head h, batch b of the tensor behind `map` into the 64 x D swizzled tile
// at smem_tile (1024-byte aligned), completing on mbarrier `bar`. Called by one thread; the caller
// announces the bytes (mbarrier_arrive_expect_bytes) for all tiles of the phase.
template <int D>
__device__ __forceinline__ void load_head_tile(const CUtensorMap& map, uint32_t smem_tile, int row0, int h, int b,
                                               uint32_t bar) {
#pragma unroll
  for (int half = 0; half < D / 64; ++half)
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, "
        "%5}], [%6];\n" ::"r"(smem_tile + swizzled<64>(0, 8 * half)),
        "l"(reinterpret_cast<uint64_t>(&map)), "r"(64 * half), "r"(h), "r"(row0), "r"(b), "r"(bar)
        : "memory");
}

// Floats [pos0, pos0 + 64) of row `row` of the tensor behind a make_row_map map (zeros past its
// end) to smem (128-byte aligned), completing on mbarrier `bar`. Called by one thread.
__device__ __forceinline__ void load_row(const CUtensorMap& map, uint32_t smem, int pos0, int row, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
      "[%4];\n" ::"r"(smem),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(pos0), "r"(row), "r"(bar)
      : "memory");
}

// The 64 x D swizzled tile at smem_tile to rows [row0, row0 + 64) of head h, batch b of the tensor
// behind `map` (rows past T are dropped by the copy engine). Called by one thread, after a
// fence_proxy_async and a barrier have made every thread's writes to the tile visible to the copy
// engine; returns once the tile has been read, so the block may exit or reuse it.
template <int D>
__device__ __forceinline__ void store_head_tile(const CUtensorMap& map, uint32_t smem_tile, int row0, int h, int b) {
#pragma unroll
  for (int half = 0; half < D / 64; ++half)
    asm volatile(
        "cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%1, %2, %3, %4}], [%5];\n" ::"l"(
            reinterpret_cast<uint64_t>(&map)),
        "r"(64 * half), "r"(h), "r"(row0), "r"(b), "r"(smem_tile + swizzled<64>(0, 8 * half))
        : "memory");
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}

}  // namespace hylo::cuda::attn
#endif  // HYLO_WGMMA
