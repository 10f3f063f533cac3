// Shared plumbing of the op layer: argument checks, the float-type switch of CPU paths, and the
// entry to CUDA paths.
//
// Device convention: CPU tensors are f32 (f64 for gradient checks); CUDA activations, weights and
// gradients are bf16, with fp32 side outputs (rstd, lse, per-row losses).
#pragma once
#include "autograd/variable.h"

#if HYLO_WITH_CUDA
#include "core/cuda/profile.h"
#include "core/cuda/tensor_kernels.h"
#endif

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

// The same for ops that read logits on the CPU in any stored type: also f((bf16*)nullptr).
template <class F>
decltype(auto) with_cpu_logits(const Tensor& t, const char* op, F&& f) {
  switch (t.dtype()) {
    case DType::bf16: return f(static_cast<bf16*>(nullptr));
    case DType::f32: return f(static_cast<float*>(nullptr));
    case DType::f64: return f(static_cast<double*>(nullptr));
    default: HYLO_FAIL("{}: logits of dtype {} (cpu path: bf16, f32 or f64)", op, dtype_name(t.dtype()));
  }
}

// Runs f() when t lives on the GPU (and returns true); a CPU-only build fails loudly instead.
// On the GPU t must have `cuda_dtype`: bf16 for activations, f32 for the MoE router's tensors,
// i32 for index tensors.
template <class F>
bool on_cuda(const Tensor& t, const char* op, F&& f, DType cuda_dtype = DType::bf16) {
  if (t.device() != Device::cuda) return false;
#if HYLO_WITH_CUDA
  HYLO_CHECK(t.dtype() == cuda_dtype, "{}: cuda path computes in {}, got {}", op, dtype_name(cuda_dtype),
             dtype_name(t.dtype()));
  cuda::ProfileScope profile(op, in_backward() ? ".bwd" : ".fwd");
  f();
#else
  (void)f;
  (void)cuda_dtype;
  HYLO_FAIL("{}: cuda tensor in a build without CUDA", op);
#endif
  return true;
}

// dtype of fp32 side outputs (statistics) for a tensor of `t`'s kind: fp32 on CUDA, t's own on CPU.
inline DType stats_dtype(const Tensor& t) { return t.device() == Device::cuda ? DType::f32 : t.dtype(); }

inline void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  HYLO_CHECK(a.device() == b.device() && a.dtype() == b.dtype(), "{}: inputs on {}/{} and {}/{}", op,
             device_name(a.device()), dtype_name(a.dtype()), device_name(b.device()), dtype_name(b.dtype()));
}

inline void check_contiguous(const char* op, const Tensor& t) {
  HYLO_CHECK(t.is_contiguous(), "{}: input {} is not contiguous", op, shape_str(t.shape()));
}

}  // namespace hylo
