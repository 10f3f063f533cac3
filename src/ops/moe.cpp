// Mixture-of-experts ops: router logits and scores, top-k, gate weights, dispatch plan, permute,
// grouped GEMM, combine, aux loss. CPU reference (ops/cpu/moe.h) or CUDA (kernels/moe/) per entry.
#include "ops/moe.h"

#include <cmath>

#include "ops/cpu/moe.h"
#include "ops/dispatch.h"
#include "ops/ops.h"

#if HYLO_WITH_CUDA
#include "kernels/gemm/gemm.h"
#include "kernels/moe/grouped_gemm.h"
#include "kernels/moe/moe.h"
#endif

namespace hylo {

namespace {

// Router tensors: f32 on CUDA, f32/f64 on the CPU (with_cpu_float checks those).
void check_router(const char* op, const Tensor& t) {
  check_contiguous(op, t);
  HYLO_CHECK(t.device() != Device::cuda || t.dtype() == DType::f32, "{}: cuda router tensors are f32, got {}", op,
             dtype_name(t.dtype()));
}

// Token rows: bf16 on CUDA.
void check_rows(const char* op, const Tensor& t) {
  check_contiguous(op, t);
  HYLO_CHECK(t.device() != Device::cuda || t.dtype() == DType::bf16, "{}: cuda token rows are bf16, got {}", op,
             dtype_name(t.dtype()));
}

void check_index(const char* op, const Tensor& t, const Shape& shape, Device device) {
  HYLO_CHECK(t.dtype() == DType::i32 && t.is_contiguous() && t.shape() == shape && t.device() == device,
             "{}: index tensor must be contiguous int32 {} on {}, got {} {} on {}", op, shape_str(shape),
             device_name(device), dtype_name(t.dtype()), shape_str(t.shape()), device_name(t.device()));
}

void check_plan(const char* op, const MoePlan& p, const Tensor& data) {
  HYLO_CHECK(p.expert_NK.defined() && p.offsets_E1.defined(), "{}: empty MoePlan (make it with moe_plan)", op);
  HYLO_CHECK(p.expert_NK.device() == data.device(), "{}: plan on {} for data on {}", op,
             device_name(p.expert_NK.device()), device_name(data.device()));
}

Tensor like(const Tensor& t, const Shape& shape, const char* what) {
  return Tensor::empty(shape, t.dtype(), t.device(), what);
}

#if HYLO_WITH_CUDA
const int32_t* device_offsets(const Tensor& counts_dev) { return counts_dev.data<int32_t>(); }
const int32_t* device_routed(const Tensor& counts_dev, int E) { return counts_dev.data<int32_t>() + E + 1; }
#endif

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

Var moe_router_logits(const Var& x_ND, const Var& router_ED) {
  const Tensor& X = x_ND.value();
  if (X.device() != Device::cuda) return linear(x_ND, router_ED);
  const Tensor& W = router_ED.value();
  check_same_device("moe_router_logits", X, W);
  check_rows("moe_router_logits", X);
  HYLO_CHECK(X.dim() == 2 && W.dim() == 2 && X.size(1) == W.size(1), "moe_router_logits: x {} with router {} ('{}')",
             shape_str(X.shape()), shape_str(W.shape()), router_ED.name());
  const int N = int(X.size(0)), D = int(X.size(1)), E = int(W.size(0));
  Tensor L = Tensor::empty({N, E}, DType::f32, Device::cuda, "moe router logits");
  on_cuda(X, "moe_router_logits", [&] {
#if HYLO_WITH_CUDA
    cuda::gemm(false, true, N, E, D, 1.f, X.data<bf16>(), W.data<bf16>(), 0.f, L.data<float>(), cuda::stream());
#endif
  });
  return Var::from_op(L, {x_ND, router_ED}, [N, D, E](const Tensor& dL, std::vector<Var>& in) {
    const Tensor& X = in[0].value();
    const Tensor dLb = dL.contiguous().to(DType::bf16);  // (N, E): bf16 operands, like every gradient GEMM
    // Like linear: an existing gradient (x also feeds the experts) is added to with beta = 1.
    GradTarget dX(in[0], {N, D}, "moe router dx"), dW(in[1], {E, D}, "moe router dw");
    on_cuda(X, "moe_router_logits", [&] {
#if HYLO_WITH_CUDA
      if (dX.wanted())  // dX (N, D) = dL @ W
        cuda::gemm(false, false, N, D, E, 1.f, dLb.data<bf16>(), in[1].value().data<bf16>(),
                   dX.accumulate() ? 1.f : 0.f, dX.tensor().data<bf16>(), cuda::stream());
      if (dW.wanted())  // dW (E, D) = dL^T @ X
        cuda::gemm(true, false, E, D, N, 1.f, dLb.data<bf16>(), X.data<bf16>(), dW.accumulate() ? 1.f : 0.f,
                   dW.tensor().data<bf16>(), cuda::stream());
#endif
    });
    dX.finish();
    dW.finish();
  });
}

Var moe_router_scores(const Var& logits_NE, RouterKind kind) {
  const Tensor& L = logits_NE.value();
  check_router("moe_router_scores", L);
  HYLO_CHECK(L.dim() == 2 && L.size(1) > 0, "moe_router_scores: logits {} must be (N, E)", shape_str(L.shape()));
  const int N = int(L.size(0)), E = int(L.size(1));
  const bool sigmoid = kind == RouterKind::sigmoid;
  Tensor S = like(L, {N, E}, "moe router scores");
  if (!on_cuda(L, "moe_router_scores", [&] {
#if HYLO_WITH_CUDA
        cuda::router_scores_forward(N, E, sigmoid, L.data<float>(), S.data<float>(), cuda::stream());
#endif
      }, DType::f32))
    with_cpu_float(L, "moe_router_scores", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::router_scores_forward<T>(N, E, sigmoid, L.data<T>(), S.data<T>());
    });
  return Var::from_op(S, {logits_NE}, [S, N, E, sigmoid](const Tensor& dS_in, std::vector<Var>& in) {
    const Tensor dS = dS_in.contiguous();
    Tensor dL = like(S, {N, E}, "moe router logits grad");
    if (!on_cuda(S, "moe_router_scores", [&] {
#if HYLO_WITH_CUDA
          cuda::router_scores_backward(N, E, sigmoid, S.data<float>(), dS.data<float>(), dL.data<float>(),
                                       cuda::stream());
#endif
        }, DType::f32))
      with_cpu_float(S, "moe_router_scores", [&](auto* tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        cpu::router_scores_backward<T>(N, E, sigmoid, S.data<T>(), dS.data<T>(), dL.data<T>());
      });
    in[0].accumulate_grad(dL);
  });
}

Tensor moe_topk(const Tensor& scores_NE, const Tensor& bias_E, int top_k) {
  check_router("moe_topk", scores_NE);
  HYLO_CHECK(scores_NE.dim() == 2, "moe_topk: scores {} must be (N, E)", shape_str(scores_NE.shape()));
  const int N = int(scores_NE.size(0)), E = int(scores_NE.size(1));
  HYLO_CHECK(0 < top_k && top_k <= E, "moe_topk: top_k={} must be in [1, experts={}]", top_k, E);
  const float* bias = nullptr;
  if (bias_E.defined()) {
    HYLO_CHECK(bias_E.dtype() == DType::f32 && bias_E.is_contiguous() && bias_E.shape() == (Shape{E}) &&
                   bias_E.device() == scores_NE.device(),
               "moe_topk: bias must be contiguous f32 ({}) on {}, got {} {} on {}", E,
               device_name(scores_NE.device()), dtype_name(bias_E.dtype()), shape_str(bias_E.shape()),
               device_name(bias_E.device()));
    bias = bias_E.data<float>();
  }
  Tensor expert = Tensor::empty({N, top_k}, DType::i32, scores_NE.device(), "moe experts");
  if (!on_cuda(scores_NE, "moe_topk", [&] {
#if HYLO_WITH_CUDA
        cuda::router_topk(N, E, top_k, scores_NE.data<float>(), bias, expert.data<int32_t>(), cuda::stream());
#endif
      }, DType::f32))
    with_cpu_float(scores_NE, "moe_topk", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::router_topk<T>(N, E, top_k, scores_NE.data<T>(), bias, expert.data<int32_t>());
    });
  return expert;
}

Var moe_gate_weights(const Var& scores_NE, const Tensor& expert_NK) {
  const Tensor& S = scores_NE.value();
  check_router("moe_gate_weights", S);
  HYLO_CHECK(S.dim() == 2 && expert_NK.dim() == 2, "moe_gate_weights: scores {} and experts {} must be (N, E), (N, K)",
             shape_str(S.shape()), shape_str(expert_NK.shape()));
  const int N = int(S.size(0)), E = int(S.size(1)), K = int(expert_NK.size(1));
  check_index("moe_gate_weights", expert_NK, {N, K}, S.device());
  Tensor W = like(S, {N, K}, "moe gate weights");
  if (!on_cuda(S, "moe_gate_weights", [&] {
#if HYLO_WITH_CUDA
        cuda::gate_weights_forward(N, E, K, S.data<float>(), expert_NK.data<int32_t>(), W.data<float>(),
                                   cuda::stream());
#endif
      }, DType::f32))
    with_cpu_float(S, "moe_gate_weights", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::gate_weights_forward<T>(N, E, K, S.data<T>(), expert_NK.data<int32_t>(), W.data<T>());
    });
  return Var::from_op(W, {scores_NE}, [W, expert_NK, N, E, K](const Tensor& dW_in, std::vector<Var>& in) {
    const Tensor& S = in[0].value();
    const Tensor dW = dW_in.contiguous();
    Tensor dS = like(S, {N, E}, "moe scores grad");
    if (!on_cuda(S, "moe_gate_weights", [&] {
#if HYLO_WITH_CUDA
          cuda::gate_weights_backward(N, E, K, S.data<float>(), expert_NK.data<int32_t>(), W.data<float>(),
                                      dW.data<float>(), dS.data<float>(), cuda::stream());
#endif
        }, DType::f32))
      with_cpu_float(S, "moe_gate_weights", [&](auto* tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        cpu::gate_weights_backward<T>(N, E, K, S.data<T>(), expert_NK.data<int32_t>(), W.data<T>(), dW.data<T>(),
                                      dS.data<T>());
      });
    in[0].accumulate_grad(dS);
  });
}

MoePlan moe_plan(const Tensor& expert_NK, int num_experts, int64_t capacity) {
  HYLO_CHECK(expert_NK.dim() == 2 && num_experts > 0, "moe_plan: experts {} must be (N, K) with E={} > 0",
             shape_str(expert_NK.shape()), num_experts);
  const int N = int(expert_NK.size(0)), K = int(expert_NK.size(1)), E = num_experts;
  check_index("moe_plan", expert_NK, {N, K}, expert_NK.device());
  MoePlan p;
  p.num_tokens = N;
  p.num_experts = E;
  p.top_k = K;
  p.capacity = std::max<int64_t>(0, capacity);
  p.expert_NK = expert_NK;
  p.row_NK = Tensor::empty({N, K}, DType::i32, expert_NK.device(), "moe rows");
  if (on_cuda(expert_NK, "moe_plan", [&] {
#if HYLO_WITH_CUDA
        p.counts_dev = Tensor::empty({cuda::plan_counts_size(E)}, DType::i32, Device::cuda, "moe counts");
        Tensor token = Tensor::empty({int64_t(N) * K}, DType::i32, Device::cuda, "moe tokens");
        cuda::plan_dispatch(N, E, K, expert_NK.data<int32_t>(), p.capacity, p.counts_dev.data<int32_t>(),
                            token.data<int32_t>(), p.row_NK.data<int32_t>(), cuda::stream());
        const std::vector<int32_t> counts = p.counts_dev.to_vector<int32_t>();  // the layer's one sync
        HYLO_CHECK(counts[size_t(2 * E + 2)] == 0, "moe: {} expert indices out of range [0, {})",
                   counts[size_t(2 * E + 2)], E);
        std::vector<int32_t> kept(static_cast<size_t>(E));
        for (int e = 0; e < E; ++e) kept[size_t(e)] = counts[size_t(e + 1)] - counts[size_t(e)];
        p.offsets_E1 = Tensor::from_vector(std::vector<int32_t>(counts.begin(), counts.begin() + E + 1), {E + 1});
        p.routed_E = Tensor::from_vector(std::vector<int32_t>(counts.begin() + E + 1, counts.begin() + 2 * E + 1), {E});
        p.kept_E = Tensor::from_vector(kept, {E});
        p.dropped = counts[size_t(2 * E + 1)];
        p.token_A = token.slice(0, 0, p.rows());
#endif
      }, DType::i32))
    return p;
  p.routed_E = Tensor::empty({E}, DType::i32, Device::cpu, "moe routed");
  p.kept_E = Tensor::empty({E}, DType::i32, Device::cpu, "moe kept");
  p.offsets_E1 = Tensor::empty({E + 1}, DType::i32, Device::cpu, "moe offsets");
  std::vector<int32_t> token(size_t(N) * K);
  p.dropped = cpu::plan_dispatch(N, E, K, expert_NK.data<int32_t>(), p.capacity, p.routed_E.data<int32_t>(),
                                 p.kept_E.data<int32_t>(), p.offsets_E1.data<int32_t>(), token.data(),
                                 p.row_NK.data<int32_t>());
  token.resize(size_t(p.rows()));
  p.token_A = Tensor::from_vector(token, {p.rows()});
  return p;
}

Var moe_permute(const Var& x_ND, const MoePlan& plan) {
  const Tensor& X = x_ND.value();
  check_plan("moe_permute", plan, X);
  check_rows("moe_permute", X);
  HYLO_CHECK(X.dim() == 2 && X.size(0) == plan.num_tokens, "moe_permute: x {} for a plan over {} tokens",
             shape_str(X.shape()), plan.num_tokens);
  const int N = plan.num_tokens, K = plan.top_k, D = int(X.size(1)), A = int(plan.rows());
  Tensor Xs = like(X, {A, D}, "moe permuted tokens");
  if (!on_cuda(X, "moe_permute", [&] {
#if HYLO_WITH_CUDA
        cuda::permute_forward(A, D, plan.token_A.data<int32_t>(), X.data<bf16>(), Xs.data<bf16>(), cuda::stream());
#endif
      }))
    with_cpu_float(X, "moe_permute", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::permute_forward<T>(A, D, plan.token_A.data<int32_t>(), X.data<T>(), Xs.data<T>());
    });
  return Var::from_op(Xs, {x_ND}, [token = plan.token_A, rows = plan.row_NK, N, K, A, D](const Tensor& dXs_in,
                                                                                         std::vector<Var>& in) {
    const Tensor dXs = dXs_in.contiguous();
    Tensor dX = like(dXs, {N, D}, "moe permute grad");
    // CUDA gathers each token's K rows (no scatter-add); the CPU adds rows in order.
    if (!on_cuda(dXs, "moe_permute", [&] {
#if HYLO_WITH_CUDA
          cuda::permute_backward(N, K, D, rows.data<int32_t>(), dXs.data<bf16>(), dX.data<bf16>(), cuda::stream());
#endif
        }))
      with_cpu_float(dXs, "moe_permute", [&](auto* tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        cpu::permute_backward<T>(N, A, D, token.data<int32_t>(), dXs.data<T>(), dX.data<T>());
      });
    in[0].accumulate_grad(dX);
  });
}

Var moe_grouped_linear(const Var& x_AI, const Var& w_EOI, const MoePlan& plan) {
  const Tensor& X = x_AI.value();
  const Tensor& W = w_EOI.value();
  check_plan("moe_grouped_linear", plan, X);
  check_same_device("moe_grouped_linear", X, W);
  check_rows("moe_grouped_linear", X);
  check_contiguous("moe_grouped_linear", W);
  HYLO_CHECK(X.dim() == 2 && W.dim() == 3 && X.size(0) == plan.rows() && W.size(0) == plan.num_experts &&
                 W.size(2) == X.size(1),
             "moe_grouped_linear: x {} with weight {} ('{}') for a plan of {} rows over {} experts",
             shape_str(X.shape()), shape_str(W.shape()), w_EOI.name(), plan.rows(), plan.num_experts);
  const int A = int(X.size(0)), E = int(W.size(0)), O = int(W.size(1)), I = int(W.size(2));
  Tensor Y = like(X, {A, O}, "moe grouped linear output");
  const Tensor offsets = plan.offsets_E1, counts = plan.counts_dev;
  if (!on_cuda(X, "moe_grouped_linear", [&] {
#if HYLO_WITH_CUDA
        cuda::grouped_linear_forward(E, I, O, offsets.data<int32_t>(), device_offsets(counts), X.data<bf16>(),
                                     W.data<bf16>(), Y.data<bf16>(), cuda::stream());
#endif
      }))
    with_cpu_float(X, "moe_grouped_linear", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::grouped_linear_forward<T>(E, I, O, offsets.data<int32_t>(), X.data<T>(), W.data<T>(), Y.data<T>());
    });
  return Var::from_op(Y, {x_AI, w_EOI}, [offsets, counts, A, E, O, I](const Tensor& dY_in, std::vector<Var>& in) {
    const Tensor& X = in[0].value();
    const Tensor& W = in[1].value();
    const Tensor dY = dY_in.contiguous();
    // dX is always written fresh (the kernels overwrite); like linear, later micro-batches add
    // straight into an existing weight gradient.
    Tensor dX = in[0].requires_grad() ? like(X, {A, I}, "moe grouped linear dx") : Tensor();
    GradTarget dW_target(in[1], {E, O, I}, "moe grouped linear dw");
    const bool accumulate = dW_target.accumulate();
    Tensor dW = dW_target.tensor();
    if (!on_cuda(X, "moe_grouped_linear", [&] {
#if HYLO_WITH_CUDA
          const int32_t* off_host = offsets.data<int32_t>();
          if (dX.defined())
            cuda::grouped_linear_backward_input(E, I, O, off_host, device_offsets(counts), dY.data<bf16>(),
                                                W.data<bf16>(), dX.data<bf16>(), cuda::stream());
          if (dW.defined())
            cuda::grouped_linear_backward_weight(E, I, O, off_host, device_offsets(counts), dY.data<bf16>(),
                                                 X.data<bf16>(), dW.data<bf16>(), accumulate, cuda::stream());
#endif
        }))
      with_cpu_float(X, "moe_grouped_linear", [&](auto* tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        cpu::grouped_linear_backward<T>(E, I, O, offsets.data<int32_t>(), X.data<T>(), W.data<T>(), dY.data<T>(),
                                        dX.defined() ? dX.data<T>() : nullptr, dW.defined() ? dW.data<T>() : nullptr,
                                        accumulate);
      });
    if (dX.defined()) in[0].accumulate_grad(dX);
    dW_target.finish();
  });
}

Var moe_combine(const Var& ys_AD, const Var& w_NK, const MoePlan& plan) {
  const Tensor& Ys = ys_AD.value();
  const Tensor& W = w_NK.value();
  check_plan("moe_combine", plan, Ys);
  check_rows("moe_combine", Ys);
  check_router("moe_combine", W);
  HYLO_CHECK(Ys.device() == W.device() && (Ys.device() == Device::cuda || Ys.dtype() == W.dtype()),
             "moe_combine: expert outputs on {}/{} and weights on {}/{}", device_name(Ys.device()),
             dtype_name(Ys.dtype()), device_name(W.device()), dtype_name(W.dtype()));
  const int N = plan.num_tokens, K = plan.top_k, A = int(plan.rows());
  HYLO_CHECK(Ys.dim() == 2 && Ys.size(0) == A && W.shape() == (Shape{N, K}),
             "moe_combine: expert outputs {} and weights {} for a plan of {} rows, {} tokens x top {}",
             shape_str(Ys.shape()), shape_str(W.shape()), A, N, K);
  const int D = int(Ys.size(1));
  Tensor Y = like(Ys, {N, D}, "moe combine output");
  const Tensor rows = plan.row_NK;
  if (!on_cuda(Ys, "moe_combine", [&] {
#if HYLO_WITH_CUDA
        cuda::combine_forward(N, K, D, rows.data<int32_t>(), W.data<float>(), Ys.data<bf16>(), Y.data<bf16>(),
                              cuda::stream());
#endif
      }))
    with_cpu_float(Ys, "moe_combine", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::combine_forward<T>(N, K, D, rows.data<int32_t>(), W.data<T>(), Ys.data<T>(), Y.data<T>());
    });
  return Var::from_op(Y, {ys_AD, w_NK}, [rows, N, K, D, A](const Tensor& dY_in, std::vector<Var>& in) {
    const Tensor& Ys = in[0].value();
    const Tensor& W = in[1].value();
    const Tensor dY = dY_in.contiguous();
    // Two separate buffers, one per input: gradients adopted by two Vars must not alias.
    Tensor dYs = like(Ys, {A, D}, "moe combine dys"), dW = like(W, {N, K}, "moe combine dw");
    if (!on_cuda(Ys, "moe_combine", [&] {
#if HYLO_WITH_CUDA
          cuda::combine_backward(N, K, D, rows.data<int32_t>(), W.data<float>(), Ys.data<bf16>(), dY.data<bf16>(),
                                 dYs.data<bf16>(), dW.data<float>(), cuda::stream());
#endif
        }))
      with_cpu_float(Ys, "moe_combine", [&](auto* tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        cpu::combine_backward<T>(N, K, D, A, rows.data<int32_t>(), W.data<T>(), Ys.data<T>(), dY.data<T>(),
                                 dYs.data<T>(), dW.data<T>());
      });
    if (in[0].requires_grad()) in[0].accumulate_grad(dYs);
    if (in[1].requires_grad()) in[1].accumulate_grad(dW);
  });
}

Var moe_aux_loss(const Var& scores_NE, const MoePlan& plan, RouterKind kind, double coef) {
  const Tensor& S = scores_NE.value();
  check_plan("moe_aux_loss", plan, S);
  check_router("moe_aux_loss", S);
  const int N = plan.num_tokens, E = plan.num_experts, K = plan.top_k;
  HYLO_CHECK(S.shape() == (Shape{N, E}), "moe_aux_loss: scores {} for a plan over {} tokens x {} experts",
             shape_str(S.shape()), N, E);
  const bool normalize = kind == RouterKind::sigmoid;
  const Tensor routed = plan.routed_E, counts = plan.counts_dev;
  Tensor out;
  // CUDA keeps the value on the device: reading it back would be a second sync per layer.
  if (!on_cuda(S, "moe_aux_loss", [&] {
#if HYLO_WITH_CUDA
        out = Tensor::empty({1}, DType::f32, Device::cuda, "moe aux loss");
        cuda::aux_loss_forward(N, E, K, normalize, S.data<float>(), device_routed(counts, E), coef, out.data<float>(),
                               cuda::stream());
#endif
      }, DType::f32)) {
    const double value = with_cpu_float(S, "moe_aux_loss", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      return cpu::aux_loss_forward<T>(N, E, K, normalize, S.data<T>(), routed.data<int32_t>(), coef);
    });
    out = Tensor::from_vector<double>({value}, {1}).to(S.dtype());
  }
  return Var::from_op(out, {scores_NE}, [routed, counts, N, E, K, normalize, coef](const Tensor& g,
                                                                                   std::vector<Var>& in) {
    const Tensor& S = in[0].value();
    Tensor dS = like(S, {N, E}, "moe aux loss grad");
    if (!on_cuda(S, "moe_aux_loss", [&] {
#if HYLO_WITH_CUDA
          const Tensor dloss = g.to(DType::f32);  // read by the kernel: no sync
          cuda::aux_loss_backward(N, E, K, normalize, S.data<float>(), device_routed(counts, E), coef,
                                  dloss.data<float>(), dS.data<float>(), cuda::stream());
#endif
        }, DType::f32)) {
      const double dloss = g.to(DType::f64).to_vector<double>()[0];
      with_cpu_float(S, "moe_aux_loss", [&](auto* tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        cpu::aux_loss_backward<T>(N, E, K, normalize, S.data<T>(), routed.data<int32_t>(), coef, dloss, dS.data<T>());
      });
    }
    in[0].accumulate_grad(dS);
  });
}

}  // namespace hylo
