// cross_entropy: mean token loss of logits (N, V) against int32 targets (-1 ignored).
#include "ops/cpu/cross_entropy.h"
#include "ops/dispatch.h"
#include "ops/ops.h"

namespace hylo {

Var cross_entropy(const Var& logits, const Tensor& targets, int v_valid) {
  const Tensor& L = logits.value();
  check_contiguous("cross_entropy", L);
  HYLO_CHECK(L.dim() == 2 && targets.dim() == 1 && targets.size(0) == L.size(0) && targets.dtype() == DType::i32,
             "cross_entropy: logits {} with targets {} {}", shape_str(L.shape()), dtype_name(targets.dtype()),
             shape_str(targets.shape()));
  HYLO_CHECK(0 < v_valid && v_valid <= L.size(1), "cross_entropy: {} valid vocab columns of {}", v_valid, L.size(1));
  const int N = int(L.size(0)), V = int(L.size(1));
  const std::vector<int32_t> host_targets = targets.to_vector<int32_t>();
  int64_t counted = 0;
  for (int32_t t : host_targets) counted += t != cpu::kIgnoreIndex;
  Tensor lse = Tensor::empty({N}, L.dtype(), L.device(), "cross_entropy lse");
  double total = 0;
  with_cpu_float(L, "cross_entropy", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    std::vector<T> loss_N(N);
    cpu::cross_entropy_forward<T>(N, V, v_valid, L.data<T>(), targets.data<int32_t>(), loss_N.data(), lse.data<T>());
    for (T l : loss_N) total += double(l);
  });
  const double mean = counted ? total / double(counted) : 0.0;
  Tensor out = Tensor::from_vector<double>({mean}, {1}).to(L.dtype());
  return Var::from_op(out, {logits}, [targets, lse, N, V, v_valid, counted](const Tensor& g, std::vector<Var>& in) {
    // The gradient overwrites the logits buffer: no second (N, V) copy is ever held.
    Tensor dL = in[0].mutable_value();
    const double dloss = g.to(DType::f64).to_vector<double>()[0];
    with_cpu_float(dL, "cross_entropy", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::cross_entropy_backward<T>(N, V, v_valid, targets.data<int32_t>(), lse.data<T>(),
                                     T(counted ? dloss / double(counted) : 0.0), dL.data<T>());
    });
    in[0].accumulate_grad(dL);
  });
}

}  // namespace hylo
