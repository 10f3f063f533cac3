// The few device primitives a Tensor needs for itself (fill, accumulate, cast) and the stream
// every hylo launch is ordered on.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace hylo::cuda {

cudaStream_t stream();
void synchronize();  // waits for all work on stream()
void fill(void* dst, DType dtype, int64_t n, double value);
void add(void* dst, const void* src, DType dtype, int64_t n, double alpha);  // dst += alpha * src
void cast(const void* src, DType from, void* dst, DType to, int64_t n);
// Gathers the strided view (shape, strides in elements, `dims` <= kMaxStridedDims) at `src` into
// the contiguous `dst`: what Tensor::contiguous() does for a transposed or sliced cuda view.
inline constexpr int kMaxStridedDims = 8;
void strided_copy(const void* src, void* dst, size_t element_size, int dims, const int64_t* shape,
                  const int64_t* strides);

}  // namespace hylo::cuda
