// Deterministic global norm on the GPU (oracle: cpu::global_norm in src/ops/cpu/elementwise.h).
// Arithmetic in fp32. No float atomics: fixed-size blocks write fp32 partial sums of squares, one
// block adds them in index order. The block layout depends only on the sizes, so a result is
// bitwise reproducible on any GPU.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace hylo {
struct bf16;
}

namespace hylo::cuda {

// *norm_1 (device, fp32) = sqrt(Σ_buffers Σ x²): the global gradient norm for clipping, over
// `count` device buffers whose pointers and sizes are given in host arrays. NaN/inf propagate.
void global_norm(int count, const bf16* const* buffers, const int64_t* sizes, float* norm_1, cudaStream_t stream);
void global_norm(int count, const float* const* buffers, const int64_t* sizes, float* norm_1, cudaStream_t stream);

}  // namespace hylo::cuda
