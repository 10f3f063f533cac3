#include <cuda_bf16.h>

#include <algorithm>

#include "core/cuda/check.h"
#include "core/cuda/tensor_kernels.h"

namespace hylo::cuda {

cudaStream_t stream() {
  // One non-blocking stream for all compute, so NCCL streams can overlap with it later.
  static cudaStream_t s = [] {
    cudaStream_t created;
    HYLO_CUDA_CHECK(cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking));
    return created;
  }();
  return s;
}

void synchronize() { HYLO_CUDA_CHECK(cudaStreamSynchronize(stream())); }

template <class T> __device__ __forceinline__ float load_f(const T* p, int64_t i) { return float(p[i]); }
template <> __device__ __forceinline__ float load_f(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
template <class T> __device__ __forceinline__ void store_f(T* p, int64_t i, double v) { p[i] = T(v); }
template <> __device__ __forceinline__ void store_f(__nv_bfloat16* p, int64_t i, double v) { p[i] = __float2bfloat16_rn(float(v)); }

template <class T>
__global__ void fill_kernel(T* dst, int64_t n, double value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    store_f(dst, i, value);
}

template <class T>
__global__ void add_kernel(T* dst, const T* src, int64_t n, double alpha) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    store_f(dst, i, double(load_f(dst, i)) + alpha * double(load_f(src, i)));
}

// bf16 accumulate, the hot case (residual stream, gradient accumulation): 8 elements per 16-byte
// load, fp32 arithmetic. add() takes this path only for 16-byte aligned pointers.
__global__ void add_bf16x8_kernel(uint4* dst, const uint4* src, int64_t n8, float alpha) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n8; i += int64_t(gridDim.x) * blockDim.x) {
    uint4 d = dst[i];
    const uint4 s = src[i];
    auto* dh = reinterpret_cast<__nv_bfloat162*>(&d);
    const auto* sh = reinterpret_cast<const __nv_bfloat162*>(&s);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 a = __bfloat1622float2(dh[k]), b = __bfloat1622float2(sh[k]);
      dh[k] = __floats2bfloat162_rn(a.x + alpha * b.x, a.y + alpha * b.y);
    }
    dst[i] = d;
  }
}

template <class From, class To>
__global__ void cast_kernel(const From* src, To* dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    store_f(dst, i, double(load_f(src, i)));
}

static int grid_for(int64_t n) { return int(n / 256 + 1 < 65535 ? n / 256 + 1 : 65535); }

// Calls f with a typed null pointer for each float dtype, so one switch serves every primitive.
template <class F>
static void with_float_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: return f((float*)nullptr);
    case DType::f64: return f((double*)nullptr);
    case DType::bf16: return f((__nv_bfloat16*)nullptr);
    default: HYLO_CUDA_REQUIRE(false, "cuda tensor primitive: unsupported dtype %s", dtype_name(dtype).data());
  }
}

void fill(void* dst, DType dtype, int64_t n, double value) {
  if (n == 0) return;
  if (value == 0.0) {
    HYLO_CUDA_CHECK(cudaMemsetAsync(dst, 0, size_t(n) * dtype_size(dtype), stream()));
    return;
  }
  with_float_type(dtype, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    fill_kernel<<<grid_for(n), 256, 0, stream()>>>(static_cast<T*>(dst), n, value);
  });
  HYLO_CUDA_LAUNCH_CHECK("tensor primitive");
}

void add(void* dst, const void* src, DType dtype, int64_t n, double alpha) {
  if (n == 0) return;
  const bool aligned = (reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) % 16 == 0;
  if (dtype == DType::bf16 && aligned && n % 8 == 0) {
    const int64_t n8 = n / 8;
    const int blocks = std::min(grid_for(n8), 4096);
    add_bf16x8_kernel<<<blocks, 256, 0, stream()>>>(static_cast<uint4*>(dst), static_cast<const uint4*>(src), n8,
                                                     float(alpha));
    HYLO_CUDA_LAUNCH_CHECK("add_bf16x8_kernel");
    return;
  }
  with_float_type(dtype, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    add_kernel<<<grid_for(n), 256, 0, stream()>>>(static_cast<T*>(dst), static_cast<const T*>(src), n, alpha);
  });
  HYLO_CUDA_LAUNCH_CHECK("tensor primitive");
}

void cast(const void* src, DType from, void* dst, DType to, int64_t n) {
  if (n == 0) return;
  with_float_type(from, [&](auto* from_tag) {
    using F = std::remove_pointer_t<decltype(from_tag)>;
    with_float_type(to, [&](auto* to_tag) {
      using T = std::remove_pointer_t<decltype(to_tag)>;
      cast_kernel<<<grid_for(n), 256, 0, stream()>>>(static_cast<const F*>(src), static_cast<T*>(dst), n);
    });
  });
  HYLO_CUDA_LAUNCH_CHECK("tensor primitive");
}

struct StridedCopyView {
  int dims;
  int64_t shape[kMaxStridedDims], src[kMaxStridedDims], dst[kMaxStridedDims];  // strides of either side
};

// One element per thread-iteration: its row-major index split into coordinates, innermost first,
// gives the source and the destination offsets. Typed by element size only (a copy does not read
// the values), and by index width: 32-bit division where every index fits, which is most of the cost.
template <class T, class Index>
__global__ void strided_copy_kernel(const T* src, T* dst, Index n, StridedCopyView view) {
  for (Index i = blockIdx.x * Index(blockDim.x) + threadIdx.x; i < n; i += Index(gridDim.x) * blockDim.x) {
    Index rest = i, from = 0, to = 0;
    for (int d = view.dims - 1; d >= 0; --d) {
      const Index size = Index(view.shape[d]), at = rest % size;
      from += at * Index(view.src[d]);
      to += at * Index(view.dst[d]);
      rest /= size;
    }
    dst[to] = src[from];
  }
}

void strided_copy(const void* src, const int64_t* src_strides, void* dst, const int64_t* dst_strides,
                  size_t element_size, int dims, const int64_t* shape) {
  HYLO_CUDA_REQUIRE(dims >= 1 && dims <= kMaxStridedDims, "strided_copy: %d dims (at most %d)", dims, kMaxStridedDims);
  // Fewer dims, fewer divisions: drop size-1 dims and merge a dim into the one before when on both
  // sides together they step evenly ((T, B, H, D) transposed from (B, T, H, D) into a contiguous
  // destination becomes (T, B, H * D)).
  StridedCopyView view{0, {}, {}, {}};
  int64_t n = 1, src_last = 0, dst_last = 0;  // the largest offset on either side
  for (int d = 0; d < dims; ++d) {
    n *= shape[d];
    src_last += (shape[d] - 1) * src_strides[d];
    dst_last += (shape[d] - 1) * dst_strides[d];
    if (shape[d] == 1) continue;
    const int last = view.dims - 1;
    if (last >= 0 && view.src[last] == src_strides[d] * shape[d] && view.dst[last] == dst_strides[d] * shape[d]) {
      view.shape[last] *= shape[d];
      view.src[last] = src_strides[d];
      view.dst[last] = dst_strides[d];
    } else {
      view.shape[view.dims] = shape[d];
      view.src[view.dims] = src_strides[d];
      view.dst[view.dims] = dst_strides[d];
      ++view.dims;
    }
  }
  if (n == 0) return;
  if (view.dims == 0) view = StridedCopyView{1, {1}, {1}, {1}};  // one element
  const bool narrow = n < (int64_t(1) << 31) && std::max(src_last, dst_last) < (int64_t(1) << 31);
  auto launch = [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if (narrow)
      strided_copy_kernel<<<grid_for(n), 256, 0, stream()>>>(static_cast<const T*>(src), static_cast<T*>(dst),
                                                             uint32_t(n), view);
    else
      strided_copy_kernel<<<grid_for(n), 256, 0, stream()>>>(static_cast<const T*>(src), static_cast<T*>(dst), n,
                                                             view);
  };
  switch (element_size) {
    case 1: launch((uint8_t*)nullptr); break;
    case 2: launch((uint16_t*)nullptr); break;
    case 4: launch((uint32_t*)nullptr); break;
    case 8: launch((uint64_t*)nullptr); break;
    default: HYLO_CUDA_REQUIRE(false, "strided_copy: element size %zu", element_size);
  }
  HYLO_CUDA_LAUNCH_CHECK("strided_copy_kernel");
}

}  // namespace hylo::cuda
