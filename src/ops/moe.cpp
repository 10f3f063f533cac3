// Mixture-of-experts ops: router scores, top-k, gate weights, dispatch plan, permute, grouped
// GEMM, combine, aux loss. CPU only for now; kernels/moe will slot in behind the same entries.
#include "ops/moe.h"

#include <cmath>

#include "ops/cpu/moe.h"
#include "ops/dispatch.h"

namespace hylo {

namespace {

// The single place that turns a GPU tensor away until kernels/moe exists.
void reject_cuda(const Tensor& t, const char* op) {
  HYLO_CHECK(t.device() != Device::cuda, "moe: no CUDA kernels yet ({} got a cuda tensor)", op);
}

void check_index(const char* op, const Tensor& t, const Shape& shape) {
  reject_cuda(t, op);
  HYLO_CHECK(t.dtype() == DType::i32 && t.is_contiguous() && t.shape() == shape,
             "{}: index tensor must be contiguous int32 {}, got {} {}", op, shape_str(shape), dtype_name(t.dtype()),
             shape_str(t.shape()));
}

void check_plan(const char* op, const MoePlan& p) {
  HYLO_CHECK(p.expert_NK.defined() && p.offsets_E1.defined(), "{}: empty MoePlan (make it with moe_plan)", op);
}

Tensor like(const Tensor& t, const Shape& shape, const char* what) {
  return Tensor::empty(shape, t.dtype(), t.device(), what);
}

}  // namespace

RouterKind router_kind(const std::string& name) {
  if (name == "softmax") return RouterKind::softmax;
  HYLO_CHECK(name == "sigmoid", "moe: router '{}' is not softmax or sigmoid", name);
  return RouterKind::sigmoid;
}

int64_t moe_capacity(double factor, int64_t num_tokens, int top_k, int num_experts) {
  if (factor <= 0) return 0;
  return std::max<int64_t>(1, int64_t(std::ceil(factor * double(num_tokens) * top_k / num_experts)));
}

Var moe_router_scores(const Var& logits_NE, RouterKind kind) {
  const Tensor& L = logits_NE.value();
  reject_cuda(L, "moe_router_scores");
  check_contiguous("moe_router_scores", L);
  HYLO_CHECK(L.dim() == 2 && L.size(1) > 0, "moe_router_scores: logits {} must be (N, E)", shape_str(L.shape()));
  const int N = int(L.size(0)), E = int(L.size(1));
  const bool sigmoid = kind == RouterKind::sigmoid;
  Tensor S = like(L, {N, E}, "moe router scores");
  with_cpu_float(L, "moe_router_scores", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    cpu::router_scores_forward<T>(N, E, sigmoid, L.data<T>(), S.data<T>());
  });
  return Var::from_op(S, {logits_NE}, [S, N, E, sigmoid](const Tensor& dS, std::vector<Var>& in) {
    Tensor dL = like(S, {N, E}, "moe router logits grad");
    with_cpu_float(S, "moe_router_scores", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::router_scores_backward<T>(N, E, sigmoid, S.data<T>(), dS.contiguous().data<T>(), dL.data<T>());
    });
    in[0].accumulate_grad(dL);
  });
}

Tensor moe_topk(const Tensor& scores_NE, const Tensor& bias_E, int top_k) {
  reject_cuda(scores_NE, "moe_topk");
  check_contiguous("moe_topk", scores_NE);
  HYLO_CHECK(scores_NE.dim() == 2, "moe_topk: scores {} must be (N, E)", shape_str(scores_NE.shape()));
  const int N = int(scores_NE.size(0)), E = int(scores_NE.size(1));
  HYLO_CHECK(0 < top_k && top_k <= E, "moe_topk: top_k={} must be in [1, experts={}]", top_k, E);
  const float* bias = nullptr;
  if (bias_E.defined()) {
    reject_cuda(bias_E, "moe_topk");
    HYLO_CHECK(bias_E.dtype() == DType::f32 && bias_E.is_contiguous() && bias_E.shape() == (Shape{E}),
               "moe_topk: bias must be contiguous f32 ({}), got {} {}", E, dtype_name(bias_E.dtype()),
               shape_str(bias_E.shape()));
    bias = bias_E.data<float>();
  }
  Tensor expert = Tensor::empty({N, top_k}, DType::i32, Device::cpu, "moe experts");
  with_cpu_float(scores_NE, "moe_topk", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    cpu::router_topk<T>(N, E, top_k, scores_NE.data<T>(), bias, expert.data<int32_t>());
  });
  return expert;
}

Var moe_gate_weights(const Var& scores_NE, const Tensor& expert_NK) {
  const Tensor& S = scores_NE.value();
  reject_cuda(S, "moe_gate_weights");
  check_contiguous("moe_gate_weights", S);
  HYLO_CHECK(S.dim() == 2 && expert_NK.dim() == 2, "moe_gate_weights: scores {} and experts {} must be (N, E), (N, K)",
             shape_str(S.shape()), shape_str(expert_NK.shape()));
  const int N = int(S.size(0)), E = int(S.size(1)), K = int(expert_NK.size(1));
  check_index("moe_gate_weights", expert_NK, {N, K});
  Tensor W = like(S, {N, K}, "moe gate weights");
  with_cpu_float(S, "moe_gate_weights", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    cpu::gate_weights_forward<T>(N, E, K, S.data<T>(), expert_NK.data<int32_t>(), W.data<T>());
  });
  return Var::from_op(W, {scores_NE}, [W, expert_NK, N, E, K](const Tensor& dW, std::vector<Var>& in) {
    const Tensor& S = in[0].value();
    Tensor dS = like(S, {N, E}, "moe scores grad");
    with_cpu_float(S, "moe_gate_weights", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::gate_weights_backward<T>(N, E, K, S.data<T>(), expert_NK.data<int32_t>(), W.data<T>(),
                                    dW.contiguous().data<T>(), dS.data<T>());
    });
    in[0].accumulate_grad(dS);
  });
}

MoePlan moe_plan(const Tensor& expert_NK, int num_experts, int64_t capacity) {
  HYLO_CHECK(expert_NK.dim() == 2 && num_experts > 0, "moe_plan: experts {} must be (N, K) with E={} > 0",
             shape_str(expert_NK.shape()), num_experts);
  const int N = int(expert_NK.size(0)), K = int(expert_NK.size(1)), E = num_experts;
  check_index("moe_plan", expert_NK, {N, K});
  MoePlan p;
  p.num_tokens = N;
  p.num_experts = E;
  p.top_k = K;
  p.capacity = std::max<int64_t>(0, capacity);
  p.expert_NK = expert_NK;
  p.routed_E = Tensor::empty({E}, DType::i32, Device::cpu, "moe routed");
  p.kept_E = Tensor::empty({E}, DType::i32, Device::cpu, "moe kept");
  p.offsets_E1 = Tensor::empty({E + 1}, DType::i32, Device::cpu, "moe offsets");
  p.row_NK = Tensor::empty({N, K}, DType::i32, Device::cpu, "moe rows");
  std::vector<int32_t> token(size_t(N) * K);
  p.dropped = cpu::plan_dispatch(N, E, K, expert_NK.data<int32_t>(), p.capacity, p.routed_E.data<int32_t>(),
                                 p.kept_E.data<int32_t>(), p.offsets_E1.data<int32_t>(), token.data(),
                                 p.row_NK.data<int32_t>());
  token.resize(size_t(p.rows()));
  p.token_A = Tensor::from_vector(token, {p.rows()});
  return p;
}

Var moe_permute(const Var& x_ND, const MoePlan& plan) {
  check_plan("moe_permute", plan);
  const Tensor& X = x_ND.value();
  reject_cuda(X, "moe_permute");
  check_contiguous("moe_permute", X);
  HYLO_CHECK(X.dim() == 2 && X.size(0) == plan.num_tokens, "moe_permute: x {} for a plan over {} tokens",
             shape_str(X.shape()), plan.num_tokens);
  const int N = plan.num_tokens, D = int(X.size(1)), A = int(plan.rows());
  Tensor Xs = like(X, {A, D}, "moe permuted tokens");
  with_cpu_float(X, "moe_permute", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    cpu::permute_forward<T>(A, D, plan.token_A.data<int32_t>(), X.data<T>(), Xs.data<T>());
  });
  return Var::from_op(Xs, {x_ND}, [token = plan.token_A, N, A, D](const Tensor& dXs, std::vector<Var>& in) {
    Tensor dX = like(dXs, {N, D}, "moe permute grad");
    with_cpu_float(dXs, "moe_permute", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::permute_backward<T>(N, A, D, token.data<int32_t>(), dXs.contiguous().data<T>(), dX.data<T>());
    });
    in[0].accumulate_grad(dX);
  });
}

Var moe_grouped_linear(const Var& x_AI, const Var& w_EOI, const MoePlan& plan) {
  check_plan("moe_grouped_linear", plan);
  const Tensor& X = x_AI.value();
  const Tensor& W = w_EOI.value();
  reject_cuda(X, "moe_grouped_linear");
  check_same_device("moe_grouped_linear", X, W);
  check_contiguous("moe_grouped_linear", X);
  check_contiguous("moe_grouped_linear", W);
  HYLO_CHECK(X.dim() == 2 && W.dim() == 3 && X.size(0) == plan.rows() && W.size(0) == plan.num_experts &&
                 W.size(2) == X.size(1),
             "moe_grouped_linear: x {} with weight {} ('{}') for a plan of {} rows over {} experts",
             shape_str(X.shape()), shape_str(W.shape()), w_EOI.name(), plan.rows(), plan.num_experts);
  const int A = int(X.size(0)), E = int(W.size(0)), O = int(W.size(1)), I = int(W.size(2));
  Tensor Y = like(X, {A, O}, "moe grouped linear output");
  const Tensor offsets = plan.offsets_E1;
  with_cpu_float(X, "moe_grouped_linear", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    cpu::grouped_linear_forward<T>(E, I, O, offsets.data<int32_t>(), X.data<T>(), W.data<T>(), Y.data<T>());
  });
  return Var::from_op(Y, {x_AI, w_EOI}, [offsets, A, E, O, I](const Tensor& dY_in, std::vector<Var>& in) {
    const Tensor& X = in[0].value();
    const Tensor& W = in[1].value();
    const Tensor dY = dY_in.contiguous();
    Tensor dX = in[0].requires_grad() ? like(X, {A, I}, "moe grouped linear dx") : Tensor();
    // Like linear: later micro-batches add straight into an existing weight gradient.
    const bool want_dw = in[1].requires_grad(), accumulate = want_dw && in[1].has_grad();
    Tensor dW = !want_dw ? Tensor() : accumulate ? in[1].mutable_grad() : like(W, {E, O, I}, "moe grouped linear dw");
    with_cpu_float(X, "moe_grouped_linear", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::grouped_linear_backward<T>(E, I, O, offsets.data<int32_t>(), X.data<T>(), W.data<T>(), dY.data<T>(),
                                      dX.defined() ? dX.data<T>() : nullptr, dW.defined() ? dW.data<T>() : nullptr,
                                      accumulate);
    });
    if (dX.defined()) in[0].accumulate_grad(dX);
    if (want_dw && !accumulate) in[1].accumulate_grad(dW);
  });
}

Var moe_combine(const Var& ys_AD, const Var& w_NK, const MoePlan& plan) {
  check_plan("moe_combine", plan);
  const Tensor& Ys = ys_AD.value();
  const Tensor& W = w_NK.value();
  reject_cuda(Ys, "moe_combine");
  check_same_device("moe_combine", Ys, W);
  check_contiguous("moe_combine", Ys);
  check_contiguous("moe_combine", W);
  const int N = plan.num_tokens, K = plan.top_k, A = int(plan.rows());
  HYLO_CHECK(Ys.dim() == 2 && Ys.size(0) == A && W.shape() == (Shape{N, K}),
             "moe_combine: expert outputs {} and weights {} for a plan of {} rows, {} tokens x top {}",
             shape_str(Ys.shape()), shape_str(W.shape()), A, N, K);
  const int D = int(Ys.size(1));
  Tensor Y = like(Ys, {N, D}, "moe combine output");
  const Tensor rows = plan.row_NK;
  with_cpu_float(Ys, "moe_combine", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    cpu::combine_forward<T>(N, K, D, rows.data<int32_t>(), W.data<T>(), Ys.data<T>(), Y.data<T>());
  });
  return Var::from_op(Y, {ys_AD, w_NK}, [rows, N, K, D, A](const Tensor& dY, std::vector<Var>& in) {
    const Tensor& Ys = in[0].value();
    const Tensor& W = in[1].value();
    // Two separate buffers, one per input: gradients adopted by two Vars must not alias.
    Tensor dYs = like(Ys, {A, D}, "moe combine dys"), dW = like(W, {N, K}, "moe combine dw");
    with_cpu_float(Ys, "moe_combine", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::combine_backward<T>(N, K, D, A, rows.data<int32_t>(), W.data<T>(), Ys.data<T>(), dY.contiguous().data<T>(),
                               dYs.data<T>(), dW.data<T>());
    });
    if (in[0].requires_grad()) in[0].accumulate_grad(dYs);
    if (in[1].requires_grad()) in[1].accumulate_grad(dW);
  });
}

Var moe_aux_loss(const Var& scores_NE, const MoePlan& plan, RouterKind kind, double coef) {
  check_plan("moe_aux_loss", plan);
  const Tensor& S = scores_NE.value();
  reject_cuda(S, "moe_aux_loss");
  check_contiguous("moe_aux_loss", S);
  const int N = plan.num_tokens, E = plan.num_experts, K = plan.top_k;
  HYLO_CHECK(S.shape() == (Shape{N, E}), "moe_aux_loss: scores {} for a plan over {} tokens x {} experts",
             shape_str(S.shape()), N, E);
  const bool normalize = kind == RouterKind::sigmoid;
  const Tensor routed = plan.routed_E;
  double value = with_cpu_float(S, "moe_aux_loss", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    return cpu::aux_loss_forward<T>(N, E, K, normalize, S.data<T>(), routed.data<int32_t>(), coef);
  });
  Tensor out = Tensor::from_vector<double>({value}, {1}).to(S.dtype());
  return Var::from_op(out, {scores_NE}, [routed, N, E, K, normalize, coef](const Tensor& g, std::vector<Var>& in) {
    const Tensor& S = in[0].value();
    const double dloss = g.to(DType::f64).to_vector<double>()[0];
    Tensor dS = like(S, {N, E}, "moe aux loss grad");
    with_cpu_float(S, "moe_aux_loss", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::aux_loss_backward<T>(N, E, K, normalize, S.data<T>(), routed.data<int32_t>(), coef, dloss, dS.data<T>());
    });
    in[0].accumulate_grad(dS);
  });
}

}  // namespace hylo
