// attention: masked causal attention (SPEC §1) over q (B,T,H,hd), k/v (B,T,Hkv,hd).
#include "ops/cpu/attention.h"
#include "ops/dispatch.h"
#include "ops/ops.h"

#if HYLO_WITH_CUDA
#include "kernels/attention/attention.h"
#endif

namespace hylo {

bool cuda_attention_supports_head_dim(int head_dim) {
#if HYLO_WITH_CUDA
  return cuda::attention_supports_head_dim(head_dim);
#else
  (void)head_dim;
  return false;
#endif
}

Var attention(const Var& q, const Var& k, const Var& v, const AttnMask& mask) {
  const Tensor &Q = q.value(), &K = k.value(), &Vv = v.value();
  check_same_device("attention", Q, K);
  check_same_device("attention", Q, Vv);
  for (const Tensor* t : {&Q, &K, &Vv}) check_contiguous("attention", *t);
  HYLO_CHECK(Q.dim() == 4 && K.shape() == Vv.shape() && K.dim() == 4 && Q.size(0) == K.size(0) &&
                 Q.size(1) == K.size(1) && Q.size(3) == K.size(3),
             "attention: q {}, k {}, v {}", shape_str(Q.shape()), shape_str(K.shape()), shape_str(Vv.shape()));
  const AttnShape shape{int(Q.size(0)), int(Q.size(1)), int(Q.size(2)), int(K.size(2)), int(Q.size(3))};
  check_attention_args(shape, mask);
  Tensor out = Tensor::empty(Q.shape(), Q.dtype(), Q.device(), "attention output");
  Tensor lse = Tensor::empty({shape.B, shape.Hq, shape.T}, stats_dtype(Q), Q.device(), "attention lse");
  if (!on_cuda(Q, "attention", [&] {
#if HYLO_WITH_CUDA
        HYLO_CHECK(cuda::attention_supports_head_dim(shape.D), "attention: head_dim {} has no cuda kernel (use 64 or 128)",
                   shape.D);
        cuda::attention_forward(shape, mask, Q.data<bf16>(), K.data<bf16>(), Vv.data<bf16>(), out.data<bf16>(),
                                lse.data<float>(), cuda::stream());
#endif
      })) {
    with_cpu_float(Q, "attention", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::attention_forward<T>(shape, mask, Q.data<T>(), K.data<T>(), Vv.data<T>(), out.data<T>(), lse.data<T>());
    });
  }
  return Var::from_op(out, {q, k, v}, [shape, mask, out, lse](const Tensor& dO, std::vector<Var>& in) {
    const Tensor &Q = in[0].value(), &K = in[1].value(), &Vv = in[2].value();
    Tensor dQ = Tensor::empty(Q.shape(), Q.dtype(), Q.device(), "attention dq");
    Tensor dK = Tensor::empty(K.shape(), K.dtype(), K.device(), "attention dk");
    Tensor dV = Tensor::empty(Vv.shape(), Vv.dtype(), Vv.device(), "attention dv");
    if (!on_cuda(Q, "attention", [&] {
#if HYLO_WITH_CUDA
          const size_t bytes = cuda::attention_backward_workspace_bytes(shape);
          Tensor workspace = Tensor::empty({int64_t(bytes / 4 + 1)}, DType::i32, Device::cuda, "attention workspace");
          cuda::attention_backward(shape, mask, Q.data<bf16>(), K.data<bf16>(), Vv.data<bf16>(), out.data<bf16>(),
                                   lse.data<float>(), dO.data<bf16>(), dQ.data<bf16>(), dK.data<bf16>(),
                                   dV.data<bf16>(), workspace.raw(), cuda::stream());
#endif
        })) {
      with_cpu_float(Q, "attention", [&](auto* tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        cpu::attention_backward<T>(shape, mask, Q.data<T>(), K.data<T>(), Vv.data<T>(), out.data<T>(),
                                   lse.data<T>(), dO.data<T>(), dQ.data<T>(), dK.data<T>(), dV.data<T>());
      });
    }
    if (in[0].requires_grad()) in[0].accumulate_grad(dQ);
    if (in[1].requires_grad()) in[1].accumulate_grad(dK);
    if (in[2].requires_grad()) in[2].accumulate_grad(dV);
  });
}

}  // namespace hylo
