// rmsnorm over the last dimension of x (N, D) with gain w (D).
#include "ops/cpu/rmsnorm.h"
#include "ops/dispatch.h"
#include "ops/ops.h"

#if HYLO_WITH_CUDA
#include "kernels/rmsnorm/rmsnorm.h"
#endif

namespace hylo {

Var rmsnorm(const Var& x, const Var& w, double eps) {
  const Tensor& X = x.value();
  check_same_device("rmsnorm", X, w.value());
  check_contiguous("rmsnorm", X);
  HYLO_CHECK(X.dim() == 2 && w.value().numel() == X.size(1), "rmsnorm: x {} with gain {}", shape_str(X.shape()),
             shape_str(w.shape()));
  const int N = int(X.size(0)), D = int(X.size(1));
  Tensor Y = Tensor::empty({N, D}, X.dtype(), X.device(), "rmsnorm output");
  Tensor rstd = Tensor::empty({N}, stats_dtype(X), X.device(), "rmsnorm rstd");
  if (!on_cuda(X, "rmsnorm", [&] {
#if HYLO_WITH_CUDA
        cuda::rmsnorm_forward(N, D, float(eps), X.data<bf16>(), w.value().data<bf16>(), Y.data<bf16>(),
                              rstd.data<float>(), cuda::stream());
#endif
      })) {
    with_cpu_float(X, "rmsnorm", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::rmsnorm_forward<T>(N, D, T(eps), X.data<T>(), w.value().data<T>(), Y.data<T>(), rstd.data<T>());
    });
  }
  return Var::from_op(Y, {x, w}, [rstd, N, D](const Tensor& dY, std::vector<Var>& in) {
    const Tensor& X = in[0].value();
    const Tensor& W = in[1].value();
    // Gradients that already exist (the residual stream's, a weight's from earlier micro-batches)
    // are added into by the kernel itself rather than through a separate add; dW always adds, so a
    // new one starts at zero. The kernels write both: an input without a gradient gets scratch.
    GradTarget dx_target(in[0], {N, D}, "rmsnorm dx", /*zeroed=*/false, /*contiguous=*/true);
    GradTarget dw_target(in[1], {D}, "rmsnorm dw", /*zeroed=*/true);
    const bool add_dx = dx_target.accumulate();
    Tensor dX = dx_target.wanted() ? dx_target.tensor() : Tensor::empty({N, D}, X.dtype(), X.device(), "rmsnorm dx");
    Tensor dW = dw_target.wanted() ? dw_target.tensor() : Tensor::zeros({D}, X.dtype(), X.device(), "rmsnorm dw");
    if (!on_cuda(X, "rmsnorm", [&] {
#if HYLO_WITH_CUDA
          cuda::rmsnorm_backward(N, D, X.data<bf16>(), W.data<bf16>(), rstd.data<float>(), dY.data<bf16>(),
                                 dX.data<bf16>(), add_dx, dW.data<bf16>(), cuda::stream());
#endif
        })) {
      with_cpu_float(X, "rmsnorm", [&](auto* tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        cpu::rmsnorm_backward<T>(N, D, X.data<T>(), W.data<T>(), rstd.data<T>(), dY.data<T>(), dX.data<T>(),
                                 add_dx, dW.data<T>());
      });
    }
    dx_target.finish();
    dw_target.finish();
  });
}

}  // namespace hylo
