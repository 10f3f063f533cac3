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
// Copies the view at `src` (shape, src_strides in elements, `dims` <= kMaxStridedDims) into the view
// of the same shape at `dst` (dst_strides): Tensor::contiguous() of a transposed or sliced cuda view
// (a contiguous dst), and Tensor::copy_from into a strided one (prefill's writes into the KV caches).
inline constexpr int kMaxStridedDims = 8;
void strided_copy(const void* src, const int64_t* src_strides, void* dst, const int64_t* dst_strides,
                  size_t element_size, int dims, const int64_t* shape);

}  // namespace hylo::cuda
