#include "core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#if HYLO_WITH_CUDA
#include <cuda_runtime_api.h>

#include "core/cuda/allocator.h"
#include "core/cuda/check.h"
#include "core/cuda/tensor_kernels.h"
#endif

namespace hylo {

std::string shape_str(const Shape& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

static Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

// glibc serves blocks above its mmap threshold (at most 32 MB) by fresh mappings, so each CPU step
// page-faulted its logits chunk in anew: 18% of a tiny CPU step in the kernel. From the heap, never
// trimmed, the blocks are reused: +20% tokens/s, 17% more peak memory (experiments/results/
// training/cpu_host_allocator_xeon.json).
void keep_freed_host_memory() {
#if defined(__GLIBC__)
  static std::once_flag once;
  std::call_once(once, [] {
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, -1);  // the largest value: the heap is never trimmed
  });
#endif
}

Storage::Storage(size_t nbytes, Device dev, const char* what) : bytes(nbytes), device(dev) {
  size_t padded = (nbytes + 63) / 64 * 64;
  if (device == Device::cpu) {
    data = padded ? std::aligned_alloc(64, padded) : nullptr;
    HYLO_CHECK(data || !padded, "out of host memory allocating {} ({} bytes)", what, nbytes);
    return;
  }
#if HYLO_WITH_CUDA
  data = cuda::allocate(padded, what);
#else
  HYLO_FAIL("cannot allocate {} on cuda: this hylo was built without CUDA (cmake -DHYLO_CUDA=ON)", what);
#endif
}

Storage::~Storage() {
  if (device == Device::cpu) {
    std::free(data);
    return;
  }
#if HYLO_WITH_CUDA
  cuda::release(data);
#endif
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device, const char* what) {
  for (int64_t d : shape) HYLO_CHECK(d >= 0, "negative dimension in shape {}", shape_str(shape));
  Tensor t;
  t.storage_ = std::make_shared<Storage>(size_t(shape_numel(shape)) * dtype_size(dtype), device, what);
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device, const char* what) {
  Tensor t = empty(shape, dtype, device, what);
  t.fill_(0.0);
  return t;
}

bool Tensor::is_contiguous() const { return strides_ == contiguous_strides(shape_); }

Tensor Tensor::view(Shape shape) const {
  HYLO_CHECK(is_contiguous(), "view of a non-contiguous tensor {}; call contiguous() first", shape_str(shape_));
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      HYLO_CHECK(infer < 0, "view: more than one -1 in {}", shape_str(shape));
      infer = int64_t(i);
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) shape[infer] = known ? numel() / known : 0;
  HYLO_CHECK(shape_numel(shape) == numel(), "view: cannot view {} as {}", shape_str(shape_), shape_str(shape));
  Tensor t = *this;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  return t;
}

Tensor Tensor::slice(int64_t d, int64_t begin, int64_t end) const {
  if (d < 0) d += dim();
  HYLO_CHECK(d >= 0 && d < dim() && 0 <= begin && begin <= end && end <= shape_[d],
             "slice [{}, {}) of dim {} out of range for shape {}", begin, end, d, shape_str(shape_));
  Tensor t = *this;
  t.offset_ += begin * strides_[d];
  t.shape_[d] = end - begin;
  return t;
}

Tensor Tensor::transpose(int64_t a, int64_t b) const {
  if (a < 0) a += dim();
  if (b < 0) b += dim();
  Tensor t = *this;
  std::swap(t.shape_[a], t.shape_[b]);
  std::swap(t.strides_[a], t.strides_[b]);
  return t;
}

// Element by element from the view `src` into the view `dst` of the same shape (either strided).
static void strided_copy_cpu(const Tensor& src, const Tensor& dst) {
  const size_t es = dtype_size(src.dtype());
  const char* from = static_cast<const char*>(src.raw());
  char* to = static_cast<char*>(dst.raw());
  std::vector<int64_t> index(src.dim(), 0);
  for (int64_t n = 0, total = src.numel(); n < total; ++n) {
    int64_t src_off = 0, dst_off = 0;
    for (int64_t i = 0; i < src.dim(); ++i) {
      src_off += index[i] * src.strides()[i];
      dst_off += index[i] * dst.strides()[i];
    }
    std::memcpy(to + dst_off * int64_t(es), from + src_off * int64_t(es), es);
    for (int64_t i = src.dim() - 1; i >= 0 && ++index[i] == src.shape()[i]; --i) index[i] = 0;
  }
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  Tensor t = empty(shape_, dtype_, device());
  t.copy_from(*this);
  return t;
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, dtype_, device());
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(Device dev) const {
  if (dev == device()) return *this;
  Tensor t = empty(shape_, dtype_, dev);
  t.copy_from(*this);
  return t;
}

template <class From, class To>
static void convert(const void* src, void* dst, int64_t n) {
  auto in = static_cast<const From*>(src);
  auto out = static_cast<To*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    double x;
    if constexpr (std::is_same_v<From, bf16>) x = bf16_to_float(in[i]); else x = double(in[i]);
    if constexpr (std::is_same_v<To, bf16>) out[i] = float_to_bf16(float(x)); else out[i] = To(x);
  }
}

template <class From>
static void convert_from(const void* src, void* dst, DType to, int64_t n) {
  switch (to) {
    case DType::f32: return convert<From, float>(src, dst, n);
    case DType::f64: return convert<From, double>(src, dst, n);
    case DType::bf16: return convert<From, bf16>(src, dst, n);
    case DType::i32: return convert<From, int32_t>(src, dst, n);
    case DType::i64: return convert<From, int64_t>(src, dst, n);
    case DType::u8: return convert<From, uint8_t>(src, dst, n);
  }
}

static void convert_cpu(const void* src, DType from, void* dst, DType to, int64_t n) {
  switch (from) {
    case DType::f32: return convert_from<float>(src, dst, to, n);
    case DType::f64: return convert_from<double>(src, dst, to, n);
    case DType::bf16: return convert_from<bf16>(src, dst, to, n);
    case DType::i32: return convert_from<int32_t>(src, dst, to, n);
    case DType::i64: return convert_from<int64_t>(src, dst, to, n);
    case DType::u8: return convert_from<uint8_t>(src, dst, to, n);
  }
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return *this;
  Tensor src = contiguous();
  Tensor t = empty(shape_, dtype, device());
  if (device() == Device::cpu) {
    convert_cpu(src.raw(), dtype_, t.raw(), dtype, numel());
  } else {
#if HYLO_WITH_CUDA
    cuda::cast(src.raw(), dtype_, t.raw(), dtype, numel());
#endif
  }
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  HYLO_CHECK(src.shape_ == shape_ && src.dtype_ == dtype_, "copy_from: {} {} into {} {}", dtype_name(src.dtype_),
             shape_str(src.shape_), dtype_name(dtype_), shape_str(shape_));
  const bool dense = is_contiguous() && src.is_contiguous();
  if (device() == Device::cpu && src.device() == Device::cpu) {
    if (dense) std::memcpy(raw(), src.raw(), nbytes());
    else strided_copy_cpu(src, *this);
    return;
  }
#if HYLO_WITH_CUDA
  if (!dense && device() == Device::cuda && src.device() == Device::cuda) {
    HYLO_CHECK(dim() <= cuda::kMaxStridedDims, "copy_from: strided cuda tensors of {} dims, at most {}", dim(),
               cuda::kMaxStridedDims);
    cuda::strided_copy(src.raw(), src.strides_.data(), raw(), strides_.data(), dtype_size(dtype_), int(dim()),
                       shape_.data());
    return;
  }
  // Between devices the bytes move as one block: a strided destination takes them through a copy on its own device.
  if (!is_contiguous()) return copy_from(src.to(device()));
  const Tensor s = src.contiguous();
  HYLO_CUDA_CHECK(cudaMemcpyAsync(raw(), s.raw(), nbytes(), cudaMemcpyDefault, cuda::stream()));
  if (device() == Device::cpu || s.device() == Device::cpu) HYLO_CUDA_CHECK(cudaStreamSynchronize(cuda::stream()));
#else
  HYLO_FAIL("copy between devices needs CUDA");
#endif
}

template <class T>
static void fill_cpu(void* p, int64_t n, double value) {
  T v;
  if constexpr (std::is_same_v<T, bf16>) v = float_to_bf16(float(value)); else v = T(value);
  std::fill(static_cast<T*>(p), static_cast<T*>(p) + n, v);
}

void Tensor::fill_(double value) {
  HYLO_CHECK(is_contiguous(), "fill_ of a non-contiguous tensor");
  if (device() == Device::cuda) {
#if HYLO_WITH_CUDA
    cuda::fill(raw(), dtype_, numel(), value);
#endif
    return;
  }
  switch (dtype_) {
    case DType::f32: return fill_cpu<float>(raw(), numel(), value);
    case DType::f64: return fill_cpu<double>(raw(), numel(), value);
    case DType::bf16: return fill_cpu<bf16>(raw(), numel(), value);
    case DType::i32: return fill_cpu<int32_t>(raw(), numel(), value);
    case DType::i64: return fill_cpu<int64_t>(raw(), numel(), value);
    case DType::u8: return fill_cpu<uint8_t>(raw(), numel(), value);
  }
}

template <class T>
static void add_cpu(T* dst, const T* src, int64_t n, T alpha) {
  for (int64_t i = 0; i < n; ++i) dst[i] += alpha * src[i];
}

void Tensor::add_(const Tensor& other, double alpha) {
  HYLO_CHECK(other.shape_ == shape_ && other.dtype_ == dtype_ && other.device() == device(),
             "add_: {} {} into {} {}", dtype_name(other.dtype_), shape_str(other.shape_), dtype_name(dtype_),
             shape_str(shape_));
  HYLO_CHECK(is_contiguous() && other.is_contiguous(), "add_ needs contiguous tensors");
  if (device() == Device::cuda) {
#if HYLO_WITH_CUDA
    cuda::add(raw(), other.raw(), dtype_, numel(), alpha);
#endif
    return;
  }
  switch (dtype_) {
    case DType::f32: return add_cpu(data<float>(), other.data<float>(), numel(), float(alpha));
    case DType::f64: return add_cpu(data<double>(), other.data<double>(), numel(), alpha);
    default: HYLO_FAIL("add_ on cpu supports f32/f64, not {}", dtype_name(dtype_));
  }
}

}  // namespace hylo
