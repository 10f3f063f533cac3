// embedding: rows of a (V, D) table gathered by int32 ids.
#include "ops/cpu/embedding.h"
#include "ops/dispatch.h"
#include "ops/ops.h"

#if HYLO_WITH_CUDA
#include "kernels/embedding/embedding.h"
#endif

namespace hylo {

Var embedding(const Tensor& ids, const Var& table) {
  const Tensor& W = table.value();
  HYLO_CHECK(ids.dtype() == DType::i32 && ids.dim() == 1 && W.dim() == 2, "embedding: ids {} {} into table {}",
             dtype_name(ids.dtype()), shape_str(ids.shape()), shape_str(W.shape()));
  HYLO_CHECK(ids.device() == W.device(), "embedding: ids on {}, table on {}", device_name(ids.device()),
             device_name(W.device()));
  const int N = int(ids.size(0)), V = int(W.size(0)), D = int(W.size(1));
  Tensor out = Tensor::empty({N, D}, W.dtype(), W.device(), "embedding output");
  if (!on_cuda(W, "embedding", [&] {
#if HYLO_WITH_CUDA
        cuda::embedding_forward(N, V, D, ids.data<int32_t>(), W.data<bf16>(), out.data<bf16>(), cuda::stream());
#endif
      })) {
    with_cpu_float(W, "embedding", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::embedding_forward<T>(N, V, D, ids.data<int32_t>(), W.data<T>(), out.data<T>());
    });
  }
  return Var::from_op(out, {table}, [ids, N, V, D](const Tensor& g, std::vector<Var>& in) {
    // Both backends add into the table gradient: the existing one (tied LM head, earlier
    // micro-batches) or zeros.
    GradTarget target(in[0], {V, D}, "embedding grad", /*zeroed=*/true);
    if (!target.wanted()) return;
    Tensor& dW = target.tensor();
    if (!on_cuda(g, "embedding", [&] {
#if HYLO_WITH_CUDA
          cuda::embedding_backward(N, V, D, ids.data<int32_t>(), g.data<bf16>(), dW.data<bf16>(), cuda::stream());
#endif
        })) {
      with_cpu_float(g, "embedding", [&](auto* tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        cpu::embedding_backward<T>(N, V, D, ids.data<int32_t>(), g.data<T>(), dW.data<T>());
      });
    }
    target.finish();
  });
}

}  // namespace hylo
