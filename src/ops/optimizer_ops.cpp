#include "ops/optimizer_ops.h"

#include <vector>

#include "core/error.h"
#include "ops/cpu/adamw.h"
#include "ops/cpu/elementwise.h"

#if HYLO_WITH_CUDA
#include "core/cuda/profile.h"
#include "core/cuda/tensor_kernels.h"
#include "kernels/adamw/adamw.h"
#include "kernels/elementwise/elementwise.h"
#endif

namespace hylo {

double global_norm(std::span<const Tensor> grads) {
  if (grads.empty()) return 0.0;
  std::vector<const void*> buffers;
  std::vector<int64_t> sizes;
  for (const Tensor& g : grads) {
    HYLO_CHECK(g.device() == grads[0].device(), "global_norm: gradients on {} and {}", device_name(grads[0].device()),
               device_name(g.device()));
    buffers.push_back(g.raw());
    sizes.push_back(g.numel());
  }
  if (grads[0].device() == Device::cpu)
    return cpu::global_norm(int(buffers.size()), reinterpret_cast<const float* const*>(buffers.data()), sizes.data());
#if HYLO_WITH_CUDA
  cuda::ProfileScope profile("grad_norm");
  Tensor norm = Tensor::empty({1}, DType::f32, Device::cuda, "grad norm");
  cuda::global_norm(int(buffers.size()), reinterpret_cast<const bf16* const*>(buffers.data()), sizes.data(),
                    norm.data<float>(), cuda::stream());
  return norm.to_vector<float>()[0];
#else
  HYLO_FAIL("global_norm: cuda gradients in a build without CUDA");
#endif
}

void adamw_update(const Tensor& master, const Tensor& m, const Tensor& v, const Tensor& grad, const Tensor& compute,
                  const AdamWHyper& hp) {
  const int64_t n = master.numel();
  HYLO_CHECK(m.numel() == n && v.numel() == n && grad.numel() == n, "adamw_update: {} master elements, {} / {} / {} "
             "in m / v / grad", n, m.numel(), v.numel(), grad.numel());
  if (master.device() == Device::cpu) {
    cpu::adamw_step<float>(n, master.data<float>(), m.data<float>(), v.data<float>(), grad.data<float>(), hp.lr,
                           hp.beta1, hp.beta2, hp.eps, hp.weight_decay, hp.step, hp.grad_scale);
    return;
  }
#if HYLO_WITH_CUDA
  cuda::ProfileScope profile("adamw");
  cuda::AdamWStep step;
  step.lr = hp.lr;
  step.beta1 = hp.beta1;
  step.beta2 = hp.beta2;
  step.eps = hp.eps;
  step.weight_decay = hp.weight_decay;
  step.step = hp.step;
  step.grad_scale = hp.grad_scale;
  step.param_index = hp.param_index;
  // The kernel writes the bf16 compute copy that the next forward reads, in the same pass.
  cuda::adamw(n, master.data<float>(), m.data<float>(), v.data<float>(), grad.data<bf16>(), compute.data<bf16>(), step,
              cuda::stream());
#else
  (void)compute;
  HYLO_FAIL("adamw_update: cuda tensors in a build without CUDA");
#endif
}

}  // namespace hylo
