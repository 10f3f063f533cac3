// linear: y (N, out) = x (N, in) @ w (out, in)^T.
#include "ops/cpu/gemm.h"
#include "ops/dispatch.h"
#include "ops/ops.h"

#if HYLO_WITH_CUDA
#include "kernels/gemm/gemm.h"
#endif

namespace hylo {

// C (M, N) = op(A) @ op(B) with op = transpose when asked; accumulate adds into C.
static void matmul_into(bool ta, bool tb, int M, int N, int K, const Tensor& A, const Tensor& B, Tensor& C,
                        bool accumulate) {
  if (on_cuda(C, "linear", [&] {
#if HYLO_WITH_CUDA
        cuda::gemm(ta, tb, M, N, K, 1.0f, A.data<bf16>(), B.data<bf16>(), accumulate ? 1.0f : 0.0f,
                   C.data<bf16>(), cuda::stream());
#endif
      }))
    return;
  with_cpu_float(C, "linear", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    cpu::gemm<T>(ta, tb, M, N, K, T(1), A.data<T>(), B.data<T>(), accumulate ? T(1) : T(0), C.data<T>());
  });
}

Var linear(const Var& x, const Var& w) {
  const Tensor& X = x.value();
  const Tensor& W = w.value();
  check_same_device("linear", X, W);
  check_contiguous("linear", X);
  HYLO_CHECK(X.dim() == 2 && W.dim() == 2 && X.size(1) == W.size(1), "linear: x {} with weight {} ('{}')",
             shape_str(X.shape()), shape_str(W.shape()), w.name());
  const int N = int(X.size(0)), in = int(X.size(1)), out = int(W.size(0));
  Tensor Y = Tensor::empty({N, out}, X.dtype(), X.device(), "linear output");
  matmul_into(false, true, N, out, in, X, W, Y, false);
  return Var::from_op(Y, {x, w}, [N, in, out](const Tensor& dY, std::vector<Var>& inputs) {
    const Tensor& X = inputs[0].value();
    const Tensor& W = inputs[1].value();
    if (inputs[0].requires_grad() && inputs[0].has_grad()) {
      // A second reader of x (q, k, v read the same normed x) adds into its gradient: beta = 1.
      matmul_into(false, false, N, in, out, dY, W, inputs[0].mutable_grad(), true);  // dX += dY @ W
    } else if (inputs[0].requires_grad()) {
      Tensor dX = Tensor::empty({N, in}, X.dtype(), X.device(), "linear dx");
      matmul_into(false, false, N, in, out, dY, W, dX, false);  // dX = dY @ W
      inputs[0].accumulate_grad(dX);
    }
    if (inputs[1].requires_grad() && inputs[1].has_grad()) {
      // Later micro-batches (and the tied embedding) add straight into the gradient: beta = 1.
      matmul_into(true, false, out, in, N, dY, X, inputs[1].mutable_grad(), true);  // dW += dY^T @ X
    } else if (inputs[1].requires_grad()) {
      Tensor dW = Tensor::empty({out, in}, W.dtype(), W.device(), "linear dw");
      matmul_into(true, false, out, in, N, dY, X, dW, false);  // dW = dY^T @ X
      inputs[1].accumulate_grad(dW);
    }
  });
}

}  // namespace hylo
