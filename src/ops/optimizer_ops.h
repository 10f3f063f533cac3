// The optimizer's fused updates as op-layer entries (STYLE: kernels are called from src/ops only).
// Not autograd ops: they read gradients and update optimizer state in place, on the device of
// their tensors (CPU: the fp32 reference of src/ops/cpu; CUDA: kernels/adamw, kernels/elementwise).
#pragma once
#include <cstdint>
#include <span>

#include "core/tensor.h"

namespace hylo {

// The L2 norm of all elements of `grads` together (fp32 on the CPU, bf16 on CUDA; one device),
// summed in a fixed order: the same gradients give the same norm on every run.
double global_norm(std::span<const Tensor> grads);

struct AdamWHyper {
  float lr = 0, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0, grad_scale = 1;
  int64_t step = 1;           // 1-based
  uint32_t param_index = 0;   // the parameter's index (CUDA: its rounding stream)
};

// One AdamW step (formula: src/ops/cpu/adamw.h) of the 1-D fp32 `master`, `m` and `v` from `grad`
// (same length, same device). On CUDA it also writes `compute`, the bf16 copy the forward reads;
// on the CPU the master is the parameter and `compute` is left undefined.
void adamw_update(const Tensor& master, const Tensor& m, const Tensor& v, const Tensor& grad, const Tensor& compute,
                  const AdamWHyper& hp);

}  // namespace hylo
