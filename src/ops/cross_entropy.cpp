// cross_entropy: mean token loss of logits (N, V) against int32 targets (-1 ignored).
#include "ops/cpu/cross_entropy.h"
#include "ops/dispatch.h"
#include "ops/ops.h"

#if HYLO_WITH_CUDA
#include "kernels/cross_entropy/cross_entropy.h"
#endif

namespace hylo {

Var cross_entropy(const Var& logits, const Tensor& targets, int v_valid) {
  const Tensor& L = logits.value();
  check_contiguous("cross_entropy", L);
  HYLO_CHECK(L.dim() == 2 && targets.dim() == 1 && targets.size(0) == L.size(0) && targets.dtype() == DType::i32,
             "cross_entropy: logits {} with targets {} {}", shape_str(L.shape()), dtype_name(targets.dtype()),
             shape_str(targets.shape()));
  HYLO_CHECK(0 < v_valid && v_valid <= L.size(1), "cross_entropy: {} valid vocab columns of {}", v_valid, L.size(1));
  const int N = int(L.size(0)), V = int(L.size(1));
  int64_t counted = 0;
  for (int32_t t : targets.to_vector<int32_t>()) counted += t != cpu::kIgnoreIndex;
  Tensor lse = Tensor::empty({N}, stats_dtype(L), L.device(), "cross_entropy lse");
  Tensor loss_N = Tensor::empty({N}, stats_dtype(L), L.device(), "cross_entropy loss");
  if (!on_cuda(L, "cross_entropy", [&] {
#if HYLO_WITH_CUDA
        cuda::cross_entropy_forward(N, V, v_valid, L.data<bf16>(), targets.data<int32_t>(), loss_N.data<float>(),
                                    lse.data<float>(), cuda::stream());
#endif
      })) {
    with_cpu_float(L, "cross_entropy", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::cross_entropy_forward<T>(N, V, v_valid, L.data<T>(), targets.data<int32_t>(), loss_N.data<T>(),
                                    lse.data<T>());
    });
  }
  // The per-row losses are N numbers: summing them on the host in double keeps the mean exact
  // and deterministic on both backends.
  double total = 0;
  for (double l : loss_N.to(DType::f64).to_vector<double>()) total += l;
  const double mean = counted ? total / double(counted) : 0.0;
  Tensor out = Tensor::from_vector<double>({mean}, {1}).to(stats_dtype(L)).to(L.device());
  return Var::from_op(out, {logits}, [targets, lse, N, V, v_valid, counted](const Tensor& g, std::vector<Var>& in) {
    // The gradient overwrites the logits buffer: no second (N, V) copy is ever held.
    Tensor dL = in[0].mutable_value();
    const double dloss = g.to(DType::f64).to_vector<double>()[0];
    const double scale = counted ? dloss / double(counted) : 0.0;
    if (!on_cuda(dL, "cross_entropy", [&] {
#if HYLO_WITH_CUDA
          cuda::cross_entropy_backward(N, V, v_valid, targets.data<int32_t>(), lse.data<float>(), float(scale),
                                       dL.data<bf16>(), cuda::stream());
#endif
        })) {
      with_cpu_float(dL, "cross_entropy", [&](auto* tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        cpu::cross_entropy_backward<T>(N, V, v_valid, targets.data<int32_t>(), lse.data<T>(), T(scale), dL.data<T>());
      });
    }
    in[0].accumulate_grad(dL);
  });
}

}  // namespace hylo
