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
  check_contiguous("linear", W);  // the GEMMs read raw rows: a transposed view would compute garbage
  HYLO_CHECK(X.dim() == 2 && W.dim() == 2 && X.size(1) == W.size(1), "linear: x {} with weight {} ('{}')",
             shape_str(X.shape()), shape_str(W.shape()), w.name());
  const int N = int(X.size(0)), in = int(X.size(1)), out = int(W.size(0));
  Tensor Y = Tensor::empty({N, out}, X.dtype(), X.device(), "linear output");
  matmul_into(false, true, N, out, in, X, W, Y, false);
  return Var::from_op(Y, {x, w}, [N, in, out](const Tensor& dY, std::vector<Var>& inputs) {
    check_contiguous("linear backward", dY);
    // A second reader of x (q, k, v read the same normed x), later micro-batches and the tied
    // embedding add straight into the existing gradients (beta = 1).
    GradTarget dX(inputs[0], {N, in}, "linear dx"), dW(inputs[1], {out, in}, "linear dw");
    if (dX.wanted()) matmul_into(false, false, N, in, out, dY, inputs[1].value(), dX.tensor(), dX.accumulate());
    if (dW.wanted()) matmul_into(true, false, out, in, N, dY, inputs[0].value(), dW.tensor(), dW.accumulate());
    dX.finish();
    dW.finish();
  });
}

}  // namespace hylo
