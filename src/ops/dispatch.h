// Shared plumbing of the op layer: argument checks and the float-type switch of CPU paths.
#pragma once
#include "autograd/variable.h"

namespace hylo {

// Calls f((float*)nullptr) or f((double*)nullptr) for a CPU tensor of that type.
template <class F>
decltype(auto) with_cpu_float(const Tensor& t, const char* op, F&& f) {
  switch (t.dtype()) {
    case DType::f32: return f(static_cast<float*>(nullptr));
    case DType::f64: return f(static_cast<double*>(nullptr));
    default: HYLO_FAIL("{}: cpu path supports f32/f64, got {}", op, dtype_name(t.dtype()));
  }
}

inline void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  HYLO_CHECK(a.device() == b.device() && a.dtype() == b.dtype(), "{}: inputs on {}/{} and {}/{}", op,
             device_name(a.device()), dtype_name(a.dtype()), device_name(b.device()), dtype_name(b.dtype()));
}

inline void check_contiguous(const char* op, const Tensor& t) {
  HYLO_CHECK(t.is_contiguous(), "{}: input {} is not contiguous", op, shape_str(t.shape()));
}

}  // namespace hylo
