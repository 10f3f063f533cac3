// Dense matrix products on the GPU through cuBLASLt: bf16 operands, fp32 accumulation, row-major
// semantics identical to hylo::cpu::gemm (src/ops/cpu/gemm.h):
//
//   C(M,N) = alpha * op(A) * op(B) + beta * C
//   op(A) is (M,K): A stored (M,K), or (K,M) when trans_a
//   op(B) is (K,N): B stored (K,N), or (N,K) when trans_b
//
// beta == 0 overwrites C without reading it. Handles and a 32 MiB workspace per (device, stream)
// are created on first use and kept; the cuBLASLt heuristic's choice is cached per shape (a row
// count that is not a leading dimension rounded up to a multiple of 64, so per-expert products of
// changing size reuse it), transposition, alignment and output type, so a steady-state call is one
// cublasLtMatmul.
// Algorithms whose split-K reduction uses atomics are excluded (results are bitwise reproducible
// run to run). Shapes cuBLASLt does not support (odd leading dimensions, misaligned pointers) go
// to cublasGemmEx, which accepts anything, with the same semantics.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>

#include "core/fp8.h"

struct cublasContext;  // cublas_v2.h's handle type, cublasHandle_t = cublasContext*

namespace hylo {
struct bf16;
}

namespace hylo::cuda {

// bf16 output (activations, input gradients).
void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const bf16* A, const bf16* B, float beta,
          bf16* C, cudaStream_t stream);

// fp32 output: weight gradients accumulated over micro-batches with beta = 1 without bf16 rounding
// at every step.
void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const bf16* A, const bf16* B, float beta,
          float* C, cudaStream_t stream);

// `batch` independent products; matrix i of X starts at X + i * stride_x (elements). A stride of
// 0 shares one matrix across the batch (e.g. one weight for every expert slice).
void gemm_strided_batched(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const bf16* A,
                          int64_t stride_a, const bf16* B, int64_t stride_b, float beta, bf16* C, int64_t stride_c,
                          int batch, cudaStream_t stream);

// FP8 operands (train.precision: fp8, src/ops/fp8_linear.cpp), fp32 accumulation:
//   C(M,N) = (*a_scale_inv) * (*b_scale_inv) * A(M,K) B(N,K)^T + beta * C
// A and B are row-major FP8 codes with K contiguous, the only layout ("TN") Hopper's FP8 kernels
// take, so callers pass transposed copies (kernels/fp8/ writes them with the cast); the scale
// inverses are device fp32 scalars (CUBLASLT_MATMUL_DESC_{A,B}_SCALE_POINTER), read when the GEMM
// runs. e5m2 x e5m2 is not an FP8 GEMM cuBLASLt offers; the others are. bf16 output; beta = 1
// accumulates (weight gradients over micro-batches, as the bf16 path does). Same deterministic
// algorithm filter and plan cache as above, but no cublasGemmEx fallback (it has no FP8): M, N,
// K must be multiples of 16 and the pointers 16-byte aligned, else one error naming the shape.
void gemm_fp8(int M, int N, int K, const uint8_t* A, Fp8Format a_format, const float* a_scale_inv, const uint8_t* B,
              Fp8Format b_format, const float* b_scale_inv, float beta, bf16* C, cudaStream_t stream);

// Runs f with this device's classic cuBLAS handle bound to `stream`, under the lock that guards the
// handle (its stream is shared state): for cuBLAS calls that cuBLASLt has no counterpart for.
void with_cublas_handle(cudaStream_t stream, const std::function<void(cublasContext*)>& f);

// Which path calls took (tests assert that aligned shapes use cuBLASLt).
struct GemmStats {
  uint64_t lt_calls = 0;        // cublasLtMatmul
  uint64_t fallback_calls = 0;  // cublasGemmEx / cublasGemmStridedBatchedEx
  uint64_t plans = 0;           // distinct cached heuristic results
};
GemmStats gemm_stats();

// Test hook: send every call down the cublasGemmEx path, which real shapes reach only when
// cuBLASLt refuses them (so it would otherwise go untested).
void gemm_force_fallback(bool on);

}  // namespace hylo::cuda
