// Elementwise ops and deterministic reductions on the GPU (oracle: src/ops/cpu/elementwise.h).
// Legend: n elements, R rows, C columns (row-major). Outputs are OVERWRITTEN and may alias an input
// of the same shape. bf16 and fp32 overloads; arithmetic in fp32.
//
// Reductions never use float atomics: fixed-size blocks write fp32 partial sums, one block adds
// them in index order. The block layout depends only on the sizes, so a result is bitwise
// reproducible on any GPU.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace hylo {
struct bf16;
}

namespace hylo::cuda {

void add(int64_t n, const bf16* a, const bf16* b, bf16* out, cudaStream_t stream);
void add(int64_t n, const float* a, const float* b, float* out, cudaStream_t stream);
// out_RC[r, c] = x_RC[r, c] + v_C[c]
void add_broadcast(int64_t R, int64_t C, const bf16* x_RC, const bf16* v_C, bf16* out_RC, cudaStream_t stream);
void mul(int64_t n, const bf16* a, const bf16* b, bf16* out, cudaStream_t stream);
void scale(int64_t n, float alpha, const bf16* x, bf16* out, cudaStream_t stream);
void scale(int64_t n, float alpha, const float* x, float* out, cudaStream_t stream);

// *sum_1 (device, fp32) = Σ x.
void sum(int64_t n, const bf16* x, float* sum_1, cudaStream_t stream);
// out_C (device, fp32) = column sums Σ_r x_RC[r, c] (the gradient of add_broadcast's vector).
void sum_rows(int64_t R, int64_t C, const bf16* x_RC, float* out_C, cudaStream_t stream);

// *norm_1 (device, fp32) = sqrt(Σ_buffers Σ x²): the global gradient norm for clipping, over
// `count` device buffers whose pointers and sizes are given in host arrays. NaN/inf propagate.
void global_norm(int count, const bf16* const* buffers, const int64_t* sizes, float* norm_1, cudaStream_t stream);
void global_norm(int count, const float* const* buffers, const int64_t* sizes, float* norm_1, cudaStream_t stream);

// fp32 -> bf16 rounds to nearest even (bit-identical to hylo::float_to_bf16); bf16 -> fp32 exact.
void cast(int64_t n, const float* in, bf16* out, cudaStream_t stream);
void cast(int64_t n, const bf16* in, float* out, cudaStream_t stream);

}  // namespace hylo::cuda
