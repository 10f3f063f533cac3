// Tensor: a typed, strided view onto shared storage on one device. Views (view, slice, transpose)
// share storage; ops that need dense memory call contiguous(). No autograd here (see autograd/).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace hylo {

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& shape);
int64_t shape_numel(const Shape& shape);

// Freed host memory stays in the process for the next allocation (glibc: large blocks from the
// heap instead of fresh mappings, and no trimming). For training on the CPU, whose every step frees
// and allocates the same large tensors again. Process-wide and lasting; any further call is a no-op.
void keep_freed_host_memory();

// Owns one allocation; freed through the allocator of its device.
struct Storage {
  void* data = nullptr;
  size_t bytes = 0;
  Device device = Device::cpu;
  Storage(size_t bytes, Device device, const char* what);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

class Tensor {
 public:
  Tensor() = default;
  // `what` names the allocation in out-of-memory errors and the memory report.
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu, const char* what = "tensor");
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu, const char* what = "tensor");
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t dim() const { return int64_t(shape_.size()); }
  int64_t size(int64_t d) const { return shape_.at(d < 0 ? d + dim() : d); }
  int64_t numel() const { return shape_numel(shape_); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device : Device::cpu; }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
  bool is_contiguous() const;
  bool same_storage(const Tensor& other) const { return storage_ == other.storage_; }

  // Pointer to the first element. Checks the element type; raw() does not.
  template <class T>
  T* data() const {
    HYLO_CHECK(dtype_ == dtype_of<T>(), "tensor holds {}, accessed as {}", dtype_name(dtype_),
               dtype_name(dtype_of<T>()));
    return static_cast<T*>(raw());
  }
  void* raw() const { return static_cast<char*>(storage_->data) + offset_ * int64_t(dtype_size(dtype_)); }

  // Views sharing storage.
  Tensor view(Shape shape) const;  // needs contiguous; one dimension may be -1
  Tensor slice(int64_t dim, int64_t begin, int64_t end) const;
  Tensor transpose(int64_t a, int64_t b) const;

  // Copies.
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(Device device) const;
  Tensor to(DType dtype) const;
  void copy_from(const Tensor& src);  // same shape and dtype; any devices; either strided (not overlapping)
  template <class T>
  std::vector<T> to_vector() const;

  // In place, any device.
  void fill_(double value);
  void add_(const Tensor& other, double alpha = 1.0);  // this += alpha * other, same shape

 private:
  std::shared_ptr<Storage> storage_;
  Shape shape_, strides_;
  int64_t offset_ = 0;
  DType dtype_ = DType::f32;
};

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  HYLO_CHECK(int64_t(values.size()) == shape_numel(shape), "from_vector: {} values for shape {}", values.size(),
             shape_str(shape));
  Tensor t = empty(shape, dtype_of<T>());
  std::copy(values.begin(), values.end(), t.data<T>());
  return t;
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  Tensor host = to(Device::cpu).contiguous();
  const T* p = host.data<T>();
  return std::vector<T>(p, p + host.numel());
}

}  // namespace hylo
