// swiglu: (N, 2F) gate|up -> silu(gate) * up (N, F).
#include "ops/cpu/swiglu.h"
#include "ops/dispatch.h"
#include "ops/ops.h"

#if HYLO_WITH_CUDA
#include "kernels/swiglu/swiglu.h"
#endif

namespace hylo {

Var swiglu(const Var& gate_up) {
  const Tensor& AB = gate_up.value();
  check_contiguous("swiglu", AB);
  HYLO_CHECK(AB.dim() == 2 && AB.size(1) % 2 == 0, "swiglu: input {} must be (N, 2F)", shape_str(AB.shape()));
  const int N = int(AB.size(0)), F = int(AB.size(1) / 2);
  Tensor out = Tensor::empty({N, F}, AB.dtype(), AB.device(), "swiglu output");
  if (!on_cuda(AB, "swiglu", [&] {
#if HYLO_WITH_CUDA
        cuda::swiglu_forward(N, F, AB.data<bf16>(), out.data<bf16>(), cuda::stream());
#endif
      })) {
    with_cpu_float(AB, "swiglu", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::swiglu_forward<T>(N, F, AB.data<T>(), out.data<T>());
    });
  }
  return Var::from_op(out, {gate_up}, [N, F](const Tensor& g, std::vector<Var>& in) {
    const Tensor& AB = in[0].value();
    Tensor dAB = Tensor::empty(AB.shape(), AB.dtype(), AB.device(), "swiglu grad");
    if (!on_cuda(AB, "swiglu", [&] {
#if HYLO_WITH_CUDA
          cuda::swiglu_backward(N, F, AB.data<bf16>(), g.data<bf16>(), dAB.data<bf16>(), cuda::stream());
#endif
        })) {
      with_cpu_float(AB, "swiglu", [&](auto* tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        cpu::swiglu_backward<T>(N, F, AB.data<T>(), g.data<T>(), dAB.data<T>());
      });
    }
    in[0].accumulate_grad(dAB);
  });
}

}  // namespace hylo
