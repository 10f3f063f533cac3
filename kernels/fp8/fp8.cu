// FP8 casts (semantics in fp8.h).
#include <cuda_fp8.h>

#include "kernels/common/common.cuh"
#include "kernels/fp8/fp8.h"

namespace hylo::cuda {
namespace {

constexpr int kTile = 64;         // cast-transpose tile: 64 x 64 elements
constexpr int kCastThreads = 256;  // threads per block of every kernel here but the roll

__device__ __forceinline__ __nv_fp8_interpretation_t interpretation(Fp8Format f) {
  return f == Fp8Format::e4m3 ? __NV_E4M3 : __NV_E5M2;
}

// |x|'s bits: the order of non-negative floats (NaN above infinity).
__device__ __forceinline__ unsigned abs_bits(float x) { return __float_as_uint(x) & 0x7fffffffu; }

__device__ __forceinline__ unsigned warp_max_bits(unsigned x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x = max(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

// Folds each thread's `bits` into *amax with one atomic per block: every block of a cast hits the
// same address, and one atomic per warp (8 per block, 65,536 for a 32768 x 1024 activation) would
// queue there. Every thread of a 1-D block of kCastThreads must call it.
__device__ __forceinline__ void record_amax(unsigned bits, float* amax) {
  __shared__ unsigned warp_bits[kCastThreads / 32];
  bits = warp_max_bits(bits);
  if (threadIdx.x % 32 == 0) warp_bits[threadIdx.x / 32] = bits;
  __syncthreads();
  if (threadIdx.x < 32) {
    bits = warp_max_bits(threadIdx.x < kCastThreads / 32 ? warp_bits[threadIdx.x] : 0u);
    if (threadIdx.x == 0 && bits != 0) atomicMax(reinterpret_cast<unsigned*>(amax), bits);
  }
}

__global__ void amax_kernel(const nv_bf16* x, int64_t n, float* amax) {
  unsigned bits = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    bits = max(bits, abs_bits(__bfloat162float(x[i])));
  record_amax(bits, amax);
}

__global__ void scale_kernel(const float* amax, Fp8Format format, int margin, float* scale) {
  *scale = fp8_scale_for_amax(*amax, format, margin);
}

// One 64 x 64 tile per block of 256 threads. Each thread converts two chunks of 8 consecutive
// elements of a row: 16-byte loads of x and 8-byte stores of the FP8 codes when C % 8 == 0 (rows
// start 16-byte aligned), element by element otherwise and at a ragged right edge. The tile's
// codes go through shared memory, and the transpose leaves as chunks of 8 consecutive rows of one
// column (8-byte stores when R % 8 == 0): both writes run along rows of their outputs.
constexpr int kChunk = 8;  // elements a thread moves at once
constexpr int kChunksPerRow = kTile / kChunk;
constexpr int kRowsPerPass = kCastThreads / kChunksPerRow;
static_assert(kTile % kRowsPerPass == 0, "whole passes over a tile");

// 8 codes as one 8-byte word, first code in the lowest byte (memory order on a little-endian GPU).
__device__ __forceinline__ uint2 pack_codes(const uint8_t (&q)[kChunk]) {
  uint2 word;
  word.x = unsigned(q[0]) | unsigned(q[1]) << 8 | unsigned(q[2]) << 16 | unsigned(q[3]) << 24;
  word.y = unsigned(q[4]) | unsigned(q[5]) << 8 | unsigned(q[6]) << 16 | unsigned(q[7]) << 24;
  return word;
}

__global__ void __launch_bounds__(kCastThreads)
    cast_transpose_kernel(const nv_bf16* x_RC, int64_t R, int64_t C, Fp8Format format, const float* scale_ptr,
                          uint8_t* out_RC, uint8_t* out_CR, float* scale_inv, float* amax_record) {
  // Rows padded to an odd length, so that the transposed reads (8 rows apart) fall in different banks.
  __shared__ uint8_t tile[kTile][kTile + 1];
  const float scale = *scale_ptr;
  const __nv_fp8_interpretation_t kind = interpretation(format);
  const int64_t r0 = int64_t(blockIdx.y) * kTile, c0 = int64_t(blockIdx.x) * kTile;
  const int chunk = threadIdx.x % kChunksPerRow, lane_row = threadIdx.x / kChunksPerRow;
  const bool rows_aligned = C % kChunk == 0, cols_aligned = R % kChunk == 0;
  unsigned bits = 0;
#pragma unroll
  for (int pass = 0; pass < kTile / kRowsPerPass; ++pass) {
    const int row = lane_row + pass * kRowsPerPass, col = chunk * kChunk;
    const int64_t r = r0 + row, c = c0 + col;
    if (r >= R || c >= C) continue;
    float v[kChunk];
    const bool whole = rows_aligned && c + kChunk <= C;
    if (whole) {
      const uint4 raw = *reinterpret_cast<const uint4*>(x_RC + r * C + c);
      const nv_bf16* e = reinterpret_cast<const nv_bf16*>(&raw);
#pragma unroll
      for (int i = 0; i < kChunk; ++i) v[i] = __bfloat162float(e[i]);
    } else {
#pragma unroll
      for (int i = 0; i < kChunk; ++i) v[i] = c + i < C ? __bfloat162float(x_RC[r * C + c + i]) : 0.0f;
    }
    uint8_t q[kChunk];
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      bits = max(bits, abs_bits(v[i]));
      q[i] = __nv_cvt_float_to_fp8(v[i] * scale, __NV_SATFINITE, kind);
      tile[row][col + i] = q[i];
    }
    if (whole) {
      *reinterpret_cast<uint2*>(out_RC + r * C + c) = pack_codes(q);
    } else {
      for (int i = 0; i < kChunk && c + i < C; ++i) out_RC[r * C + c + i] = q[i];
    }
  }
  if (amax_record) record_amax(bits, amax_record);
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *scale_inv = 1.0f / scale;
  if (!out_CR) return;
  __syncthreads();
#pragma unroll
  for (int pass = 0; pass < kTile / kRowsPerPass; ++pass) {
    // This thread writes rows r0 + chunk * 8 .. + 7 of column c0 + col, i.e. 8 bytes of row c of out_CR.
    const int col = lane_row + pass * kRowsPerPass, row = chunk * kChunk;
    const int64_t c = c0 + col, r = r0 + row;
    if (c >= C || r >= R) continue;
    uint8_t q[kChunk];
#pragma unroll
    for (int i = 0; i < kChunk; ++i) q[i] = tile[row + i][col];
    if (cols_aligned && r + kChunk <= R) {
      *reinterpret_cast<uint2*>(out_CR + c * R + r) = pack_codes(q);
    } else {
      for (int i = 0; i < kChunk && r + i < R; ++i) out_CR[c * R + r + i] = q[i];
    }
  }
}

__global__ void roll_kernel(float* history_RH, float* step_amax_R, float* scale_R, int R, int H,
                            Fp8Format grad_format, int margin, bool shift) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= R) return;
  float* history = history_RH + int64_t(r) * H;
  if (shift) {
    for (int i = H - 1; i > 0; --i) history[i] = history[i - 1];
    history[0] = step_amax_R[r];
    step_amax_R[r] = 0.0f;
  }
  unsigned bits = 0;
  for (int i = 0; i < H; ++i) bits = max(bits, abs_bits(history[i]));
  scale_R[r] = fp8_scale_for_amax(__uint_as_float(bits), r % 3 == 2 ? grad_format : Fp8Format::e4m3, margin);
}

}  // namespace

void fp8_amax(const bf16* x, int64_t n, float* amax, cudaStream_t stream) {
  if (n == 0) return;
  const int blocks = int(std::min<int64_t>(ceil_div(n, kCastThreads), 1024));
  amax_kernel<<<blocks, kCastThreads, 0, stream>>>(as_nv(x), n, amax);
  HYLO_CUDA_LAUNCH_CHECK("fp8_amax_kernel");
}

void fp8_scale_from_amax(const float* amax, Fp8Format format, int margin, float* scale, cudaStream_t stream) {
  scale_kernel<<<1, 1, 0, stream>>>(amax, format, margin, scale);
  HYLO_CUDA_LAUNCH_CHECK("fp8_scale_kernel");
}

void fp8_cast_transpose(const bf16* x_RC, int64_t R, int64_t C, Fp8Format format, const float* scale,
                        uint8_t* out_RC, uint8_t* out_CR, float* scale_inv, float* amax_record, cudaStream_t stream) {
  HYLO_CUDA_REQUIRE(R >= 0 && C >= 0 && ceil_div(R, kTile) <= 65535, "fp8_cast_transpose: bad shape %lld x %lld",
                    (long long)R, (long long)C);
  if (R == 0 || C == 0) return;  // nothing for a GEMM to read, scale_inv included
  const dim3 grid(unsigned(ceil_div(C, kTile)), unsigned(ceil_div(R, kTile)));
  cast_transpose_kernel<<<grid, kCastThreads, 0, stream>>>(as_nv(x_RC), R, C, format, scale, out_RC, out_CR, scale_inv,
                                                   amax_record);
  HYLO_CUDA_LAUNCH_CHECK("fp8_cast_transpose_kernel");
}

void fp8_roll_history(float* history_RH, float* step_amax_R, float* scale_R, int R, int H, Fp8Format grad_format,
                      int margin, bool shift, cudaStream_t stream) {
  if (R == 0) return;
  roll_kernel<<<unsigned(ceil_div(R, 128)), 128, 0, stream>>>(history_RH, step_amax_R, scale_R, R, H, grad_format,
                                                            margin, shift);
  HYLO_CUDA_LAUNCH_CHECK("fp8_roll_kernel");
}

}  // namespace hylo::cuda
