// Mixture-of-experts (SPEC §2): every MoE op's backward against fp64 central differences, the
// routing contract (ties, bias only in selection, deterministic order, capacity drops), the aux
// loss on a case done by hand, a whole MoE Transformer's gradient, overfitting, the aux-loss-free
// bias update, and parameter counting against the numbers.
//
// Legend: N tokens, D width, E experts, K top_k, A kept assignments, F expert hidden.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>

#include "error_of.h"
#include "model_gradcheck.h"
#include "overfit.h"
#include "small_model.h"
#include "core/rng.h"
#include "nn/moe.h"
#include "nn/transformer.h"
#include "ops/moe.h"
#include "ops/ops.h"
#include "checkpoint/buffers.h"
#include "checkpoint/checkpoint.h"
#include "config/config.h"
#include "nn/flops.h"
#include "optim/optimizer.h"

using namespace hylo;

namespace {

Tensor randn(const Shape& shape, uint64_t seed, double scale = 1.0) {
  Rng rng{seed, 3, 0};
  std::vector<double> v(size_t(shape_numel(shape)));
  for (auto& x : v) x = rng.normal() * scale;
  return Tensor::from_vector(v, shape);
}

Var leaf(const Tensor& t, const char* name) { return Var(t, true, name); }

// Σ v · G as a scalar op, so that backward() seeds d(loss)/d(v) = G.
Var dot_with(const Var& v, const Tensor& G) {
  REQUIRE(v.shape() == G.shape());
  const std::vector<double> a = v.value().to_vector<double>(), g = G.to_vector<double>();
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * g[i];
  return Var::from_op(Tensor::from_vector<double>({s}, {1}), {v}, [G](const Tensor& d, std::vector<Var>& in) {
    Tensor grad = Tensor::zeros(G.shape(), DType::f64);
    grad.add_(G, d.to_vector<double>()[0]);
    in[0].accumulate_grad(grad);
  });
}

double scalar(const Var& v) { return v.value().to(DType::f64).to_vector<double>()[0]; }

// Every entry of every leaf: analytic gradient of f() against central differences (h = 1e-6).
void check_fd(std::vector<Var> leaves, const std::function<Var()>& f, double bound = 1e-7) {
  for (Var& l : leaves) l.zero_grad();
  f().backward();
  for (Var& l : leaves) {
    CAPTURE(l.name());
    const int64_t n = l.value().numel();
    const std::vector<double> analytic =
        l.has_grad() ? l.grad().to_vector<double>() : std::vector<double>(size_t(n), 0.0);
    double* w = l.mutable_value().data<double>();
    double num2 = 0, err2 = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double saved = w[i], h = 1e-6;
      NoGradGuard no_grad;
      w[i] = saved + h;
      const double up = scalar(f());
      w[i] = saved - h;
      const double down = scalar(f());
      w[i] = saved;
      const double numeric = (up - down) / (2 * h);
      num2 += numeric * numeric;
      err2 += (numeric - analytic[size_t(i)]) * (numeric - analytic[size_t(i)]);
    }
    const double rel = std::sqrt(err2) / std::max(std::sqrt(num2), 1e-300);
    CAPTURE(rel);
    CHECK(std::sqrt(num2) > 1e-3);  // a vanishing reference would let anything pass
    CHECK(rel < bound);
  }
}

// Smallest gap between the K-th and (K+1)-th biased score of any row: FD perturbations must not
// be able to change the selection.
double selection_margin(const Tensor& scores_NE, const std::vector<float>& bias, int K) {
  const int N = int(scores_NE.size(0)), E = int(scores_NE.size(1));
  const std::vector<double> s = scores_NE.to_vector<double>();
  double margin = INFINITY;
  for (int n = 0; n < N; ++n) {
    std::vector<double> row(static_cast<size_t>(E));
    for (int e = 0; e < E; ++e) row[size_t(e)] = s[size_t(n * E + e)] + (bias.empty() ? 0.0 : bias[size_t(e)]);
    std::sort(row.rbegin(), row.rend());
    if (K < E) margin = std::min(margin, row[size_t(K - 1)] - row[size_t(K)]);
  }
  return margin;
}

std::vector<int32_t> ints(const Tensor& t) { return t.to_vector<int32_t>(); }

}  // namespace

TEST_CASE("moe router: scores and renormalised top-k weights match finite differences") {
  for (RouterKind kind : {RouterKind::softmax, RouterKind::sigmoid}) {
    CAPTURE(int(kind));
    const int N = 7, E = 5, K = 2;
    Var logits = leaf(randn({N, E}, 1, 1.5), "logits");
    const std::vector<float> bias{0.05f, -0.1f, 0.0f, 0.2f, -0.05f};
    const Tensor bias_E = Tensor::from_vector(bias, {E});
    const Tensor G_w = randn({N, K}, 2), G_s = randn({N, E}, 3);
    const Tensor expert = moe_topk(moe_router_scores(logits, kind).value(), bias_E, K);
    REQUIRE(selection_margin(moe_router_scores(logits, kind).value(), bias, K) > 1e-4);  // >> h = 1e-6
    check_fd({logits}, [&] {
      Var scores = moe_router_scores(logits, kind);
      const Tensor chosen = moe_topk(scores.value(), bias_E, K);
      REQUIRE(ints(chosen) == ints(expert));  // selection held fixed
      return add(dot_with(moe_gate_weights(scores, chosen), G_w), dot_with(scores, G_s));
    });
    // Renormalised: each token's weights sum to one.
    const std::vector<double> w = moe_gate_weights(moe_router_scores(logits, kind), expert).value().to_vector<double>();
    for (int n = 0; n < N; ++n) CHECK(w[size_t(n * K)] + w[size_t(n * K + 1)] == doctest::Approx(1.0));
  }
}

TEST_CASE("moe_topk: best first, ties to the lower index, bias steers selection but not the weights") {
  const Tensor scores = Tensor::from_vector<double>({0.2, 0.3, 0.3, 0.2,  //
                                                     0.25, 0.25, 0.25, 0.25},
                                                    {2, 4});
  CHECK(ints(moe_topk(scores, Tensor(), 2)) == std::vector<int32_t>{1, 2, 0, 1});
  CHECK(ints(moe_topk(scores, Tensor(), 3)) == std::vector<int32_t>{1, 2, 0, 0, 1, 2});
  // An all-zero bias selects exactly as no bias (MoeFeedForward then passes none, even to a GPU).
  CHECK(ints(moe_topk(scores, Tensor::zeros({4}, DType::f32), 3)) == ints(moe_topk(scores, Tensor(), 3)));
  const Tensor bias = Tensor::from_vector<float>({0.5f, 0.0f, 0.0f, 0.0f}, {4});
  const Tensor chosen = moe_topk(scores, bias, 2);
  CHECK(ints(chosen) == std::vector<int32_t>{0, 1, 0, 1});
  // Weights come from the unbiased scores: 0.2/(0.2+0.3), 0.3/(0.2+0.3).
  const std::vector<double> w = moe_gate_weights(Var(scores), chosen).value().to_vector<double>();
  CHECK(w[0] == doctest::Approx(0.4));
  CHECK(w[1] == doctest::Approx(0.6));
  CHECK(w[2] == doctest::Approx(0.5));
}

TEST_CASE("moe dispatch: rows grouped by expert then token, permute/grouped GEMM/combine match finite differences") {
  const int N = 6, K = 2, E = 5, D = 3, O = 4;
  // Expert 2 and expert 4 receive nothing.
  const Tensor expert = Tensor::from_vector<int32_t>({3, 0, 0, 1, 3, 1, 0, 3, 1, 0, 3, 0}, {N, K});
  const MoePlan plan = moe_plan(expert, E, 0);
  CHECK(plan.dropped == 0);
  CHECK(plan.rows() == N * K);
  CHECK(ints(plan.routed_E) == std::vector<int32_t>{5, 3, 0, 4, 0});
  CHECK(ints(plan.offsets_E1) == std::vector<int32_t>{0, 5, 8, 8, 12, 12});
  CHECK(ints(plan.token_A) == std::vector<int32_t>{0, 1, 3, 4, 5, 1, 2, 4, 0, 2, 3, 5});
  CHECK(ints(plan.row_NK) == std::vector<int32_t>{8, 0, 1, 5, 9, 6, 2, 10, 7, 3, 11, 4});

  Var x = leaf(randn({N, D}, 4), "x"), w_in = leaf(randn({E, O, D}, 5), "w_in");
  Var w_out = leaf(randn({E, D, O}, 6), "w_out"), gate = leaf(randn({N, K}, 7), "gate");
  const Tensor G = randn({N, D}, 8);
  check_fd({x, w_in, w_out, gate}, [&] {
    Var h = moe_grouped_linear(moe_permute(x, plan), w_in, plan);
    return dot_with(moe_combine(moe_grouped_linear(h, w_out, plan), gate, plan), G);
  });
  // Experts without tokens get an exactly zero (not missing, not garbage) weight gradient.
  for (int e : {2, 4}) {
    const std::vector<double> g = w_in.grad().slice(0, e, e + 1).contiguous().to_vector<double>();
    CHECK(std::all_of(g.begin(), g.end(), [](double v) { return v == 0.0; }));
  }
  // Permute then combine with all weights 1 gives 2 x (two slots per token), token by token.
  const Tensor ones = Tensor::from_vector<double>(std::vector<double>(N * K, 1.0), {N, K});
  const std::vector<double> y = moe_combine(moe_permute(x, plan), Var(ones), plan).value().to_vector<double>();
  const std::vector<double> xv = x.value().to_vector<double>();
  for (size_t i = 0; i < y.size(); ++i) CHECK(y[i] == doctest::Approx(2 * xv[i]));
}

TEST_CASE("moe grouped linear: variable groups, empty experts, gradient accumulation across calls") {
  const int E = 5, I = 3, O = 2;
  // Groups of 3, 0, 4, 0, 1 rows.
  const Tensor expert = Tensor::from_vector<int32_t>({0, 2, 2, 0, 4, 2, 0, 2}, {8, 1});
  const MoePlan plan = moe_plan(expert, E, 0);
  CHECK(ints(plan.kept_E) == std::vector<int32_t>{3, 0, 4, 0, 1});
  Var x = leaf(randn({8, I}, 9), "x"), w = leaf(randn({E, O, I}, 10), "w");
  const Tensor G = randn({8, O}, 11);
  check_fd({x, w}, [&] { return dot_with(moe_grouped_linear(x, w, plan), G); });
  // Forward against a row-by-row product.
  const std::vector<double> y = moe_grouped_linear(x, w, plan).value().to_vector<double>();
  const std::vector<double> xv = x.value().to_vector<double>(), wv = w.value().to_vector<double>();
  const std::vector<int32_t> token = ints(plan.token_A), ex = ints(expert);
  for (int a = 0; a < 8; ++a)
    for (int o = 0; o < O; ++o) {
      double ref = 0;
      for (int i = 0; i < I; ++i) ref += xv[size_t(a * I + i)] * wv[size_t((ex[size_t(token[size_t(a)])] * O + o) * I + i)];
      CHECK(y[size_t(a * O + o)] == doctest::Approx(ref));
    }
  // A second backward adds into the existing weight gradient (micro-batch accumulation).
  const std::vector<double> once = w.grad().to_vector<double>();
  dot_with(moe_grouped_linear(x, w, plan), G).backward();
  const std::vector<double> twice = w.grad().to_vector<double>();
  for (size_t i = 0; i < once.size(); ++i) CHECK(twice[i] == doctest::Approx(2 * once[i]));
}

TEST_CASE("moe capacity factor: first come by token index, drops counted, dropped contribute zero") {
  CHECK(moe_capacity(0.0, 8, 1, 4) == 0);
  CHECK(moe_capacity(1.0, 8, 1, 4) == 2);
  CHECK(moe_capacity(1.25, 10, 2, 4) == 7);  // ceil(6.25)
  const int N = 8, K = 1, E = 4, D = 2;
  const Tensor expert = Tensor::from_vector<int32_t>({0, 0, 1, 0, 0, 2, 0, 3}, {N, K});
  const MoePlan plan = moe_plan(expert, E, moe_capacity(1.0, N, K, E));
  CHECK(plan.capacity == 2);
  CHECK(plan.dropped == 3);  // expert 0 chosen by tokens 0, 1, 3, 4, 6: keeps 0 and 1
  CHECK(ints(plan.routed_E) == std::vector<int32_t>{5, 1, 1, 1});
  CHECK(ints(plan.kept_E) == std::vector<int32_t>{2, 1, 1, 1});
  CHECK(ints(plan.row_NK) == std::vector<int32_t>{0, 1, 2, -1, -1, 3, -1, 4});
  Var x = leaf(randn({N, D}, 12), "x"), gate = leaf(randn({N, K}, 13), "gate");
  const std::vector<double> y = moe_combine(moe_permute(x, plan), gate, plan).value().to_vector<double>();
  for (int n : {3, 4, 6}) CHECK((y[size_t(n * D)] == 0.0 && y[size_t(n * D + 1)] == 0.0));
  CHECK(y[0] != 0.0);
  const Tensor G = randn({N, D}, 14);
  check_fd({x, gate}, [&] { return dot_with(moe_combine(moe_permute(x, plan), gate, plan), G); });
  // Dropped tokens get no gradient through the experts.
  const std::vector<double> dx = x.grad().to_vector<double>();
  CHECK(dx[3 * D] == 0.0);
  CHECK(gate.grad().to_vector<double>()[3] == 0.0);
}

TEST_CASE("moe aux loss: a hand-checked value, and its gradient through the router") {
  // Two tokens, two experts, top-1. Token 0: p = (0.75, 0.25); token 1: p = (0.5, 0.5), a tie that
  // goes to expert 0. f = (1, 0), P = (0.625, 0.375): aux = coef * 2 * (1 * 0.625) = 1.25 coef.
  Var logits(Tensor::from_vector<double>({std::log(3.0), 0.0, 0.0, 0.0}, {2, 2}), true, "logits");
  Var scores = moe_router_scores(logits, RouterKind::softmax);
  const MoePlan plan = moe_plan(moe_topk(scores.value(), Tensor(), 1), 2, 0);
  CHECK(ints(plan.expert_NK) == std::vector<int32_t>{0, 0});
  CHECK(scalar(moe_aux_loss(scores, plan, RouterKind::softmax, 0.1)) == doctest::Approx(0.125));
  // Perfect balance gives exactly coef, whatever E: f_i = P_i = 1/E.
  Var uniform(Tensor::from_vector<double>(std::vector<double>(4 * 4, 0.25), {4, 4}));
  const Tensor round_robin = Tensor::from_vector<int32_t>({0, 1, 2, 3, 0, 1, 2, 3}, {4, 2});
  CHECK(scalar(moe_aux_loss(uniform, moe_plan(round_robin, 4, 0), RouterKind::softmax, 0.01)) ==
        doctest::Approx(0.01));
  // Sigmoid scores are normalised per token before averaging: s = (0.6, 0.2) counts as (0.75, 0.25).
  Var sig(Tensor::from_vector<double>({0.6, 0.2, 0.3, 0.3}, {2, 2}));
  CHECK(scalar(moe_aux_loss(sig, plan, RouterKind::sigmoid, 0.1)) == doctest::Approx(0.125));

  for (RouterKind kind : {RouterKind::softmax, RouterKind::sigmoid}) {
    CAPTURE(int(kind));
    Var l = leaf(randn({9, 4}, 15), "logits");
    const MoePlan p = moe_plan(moe_topk(moe_router_scores(l, kind).value(), Tensor(), 2), 4, 0);
    check_fd({l}, [&] { return moe_aux_loss(moe_router_scores(l, kind), p, kind, 0.3); });
  }
}

namespace {

ModelConfig tiny_moe(const std::string& router, double capacity, int shared) {
  ModelConfig c;
  c.vocab_size = 23;
  c.d_model = 16;
  c.n_layers = 4;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_hidden = 24;
  c.pattern = "LLG";
  c.local = {"pbb", 5, 4, 2};
  c.init_std = 0.3;  // large enough that every path matters
  c.moe.experts = 4;
  c.moe.top_k = 2;
  c.moe.expert_hidden = 8;
  c.moe.shared_experts = shared;
  c.moe.every = 2;  // layers 1 and 3 are MoE, 0 and 2 dense
  c.moe.router = router;
  c.moe.aux_loss_coef = 0.1;
  c.moe.bias_update_rate = 0.05;
  c.moe.capacity_factor = capacity;
  return c;
}

}  // namespace

TEST_CASE("MoE transformer gradient (routed + shared experts, aux loss, capacity, bias) matches fp64 FD") {
  struct Case {
    std::string router;
    double capacity;
    int shared;
  };
  for (const Case& cs : {Case{"softmax", 0.0, 1}, Case{"sigmoid", 1.0, 0}}) {
    CAPTURE(cs.router);
    Transformer model(tiny_moe(cs.router, cs.capacity, cs.shared), 11);
    for (Parameter& p : model.parameters()) p.var.mutable_value() = p.var.value().to(DType::f64);
    // A bias that really changes selection.
    for (NamedBufferRef& b : model.buffers()) {
      float* bias = b.value.data<float>();
      for (int e = 0; e < 4; ++e) bias[e] = 0.05f * float(e % 3) - 0.04f;
    }
    const int B = 2, T = 11;
    Rng rng{5, 0, 0};
    std::vector<int32_t> ids(B * T), targets(B * T);
    for (auto& x : ids) x = int32_t(rng.below(23));
    for (auto& x : targets) x = int32_t(rng.below(21));
    const Tensor inputs = Tensor::from_vector(ids, {B, T}), target_t = Tensor::from_vector(targets, {B * T});

    model.loss(inputs, target_t, 21).backward();
    const std::vector<MoeLayerStats> stats = model.moe_stats();
    REQUIRE(stats.size() == 2);
    for (const MoeLayerStats& s : stats) {
      CHECK(s.assignments == B * T * 2);
      CHECK(s.aux_loss > 0);
      int64_t sum = 0;
      for (int64_t c : s.tokens_per_expert) sum += c;
      CHECK(sum == s.assignments);
      if (cs.capacity == 0) CHECK(s.dropped == 0);
    }
    MESSAGE(cs.router << ": dropped " << stats[0].dropped << " and " << stats[1].dropped << " of 44");
    const double worst =
        test::check_model_gradient(model, [&] { return scalar(model.loss(inputs, target_t, 21)); }, rng);
    MESSAGE(cs.router << ": worst relative error " << worst);
  }
}

TEST_CASE("MoE transformer: aux loss only in training passes, names, buffers") {
  Transformer model(tiny_moe("softmax", 0.0, 1), 3);
  const Tensor inputs = Tensor::from_vector<int32_t>(std::vector<int32_t>(10, 1), {1, 10});
  const Tensor targets = Tensor::from_vector<int32_t>(std::vector<int32_t>(10, 2), {10});
  const double train_loss = scalar(model.loss(inputs, targets, 21));
  double aux = 0;
  for (const MoeLayerStats& s : model.moe_stats()) aux += s.aux_loss;
  CHECK(aux > 0.05);
  NoGradGuard no_grad;
  const double eval_loss = scalar(model.loss(inputs, targets, 21));
  CHECK(train_loss == doctest::Approx(eval_loss + aux).epsilon(1e-5));
  std::vector<std::string> names;
  for (const Parameter& p : model.parameters()) names.push_back(p.name);
  for (const char* expected : {"blocks.1.moe.router", "blocks.1.moe.w_in", "blocks.1.moe.w_out",
                               "blocks.1.moe.shared.w_in", "blocks.3.moe.shared.w_out", "blocks.0.ffn.w_in"})
    CHECK(std::find(names.begin(), names.end(), expected) != names.end());
  CHECK(std::find(names.begin(), names.end(), "blocks.1.ffn.w_in") == names.end());
  const std::vector<NamedBufferRef> buffers = model.buffers();
  REQUIRE(buffers.size() == 2);
  CHECK(buffers[0].name == "blocks.1.moe.router_bias");
  CHECK(buffers[1].value.shape() == Shape{4});
}

TEST_CASE("a tiny MoE transformer overfits one batch") {
  ModelConfig c = test::small_hybrid(64);
  c.moe.experts = 4;
  c.moe.top_k = 2;
  c.moe.expert_hidden = 32;
  c.moe.shared_experts = 1;
  c.moe.bias_update_rate = 1e-3;
  Transformer model(c, 3);
  const test::OverfitResult r = test::overfit_one_batch(model, 64);
  MESSAGE("loss " << r.loss << " (aux included) after " << r.steps << " steps");
  CHECK(r.loss < 0.1);
}

TEST_CASE("router bias update moves a skewed load toward balance, evaluation and rate 0 leave it alone") {
  ModelConfig c;
  c.d_model = 8;
  c.n_layers = 1;
  c.moe.experts = 4;
  c.moe.top_k = 1;
  c.moe.expert_hidden = 4;
  c.moe.aux_loss_coef = 0;
  c.moe.bias_update_rate = 0.01;
  ParamList params;
  MoeFeedForward moe(params, 0, c, 7);
  // Skew: expert 0's router row points along the mean of the inputs, so it wins most tokens; the
  // other rows are spread so that a bias can pick among them token by token.
  float* router = params[0].var.mutable_value().data<float>();
  const std::vector<double> spread = randn({3, 8}, 17, 0.5).to_vector<double>();
  for (int d = 0; d < 8; ++d) router[d] = 1.0f;
  for (int i = 0; i < 24; ++i) router[8 + i] = float(spread[size_t(i)]);
  Tensor x_t = randn({64, 8}, 16, 0.5).to(DType::f32);
  for (int n = 0; n < 64; ++n) x_t.data<float>()[n * 8] += 1.0f;
  const Var x(x_t);

  {  // Evaluation passes tally nothing: the update is a no-op.
    NoGradGuard no_grad;
    moe.forward(x, nullptr);
    moe.update_router_bias();
    for (float b : moe.router_bias().to_vector<float>()) CHECK(b == 0.0f);
  }
  moe.forward(x, nullptr);
  const double cv_before = moe.stats().load_cv();
  const int64_t max_before = moe.stats().max_load();
  MESSAGE("before: loads " << moe.stats().tokens_per_expert[0] << "/" << moe.stats().tokens_per_expert[1] << "/"
                           << moe.stats().tokens_per_expert[2] << "/" << moe.stats().tokens_per_expert[3]);
  CHECK(cv_before > 0.5);
  moe.update_router_bias();
  const std::vector<float> after_one = moe.router_bias().to_vector<float>();
  CHECK(after_one[0] == doctest::Approx(-0.01));  // the over-loaded expert loses exactly one step
  for (int step = 1; step < 200; ++step) {
    moe.forward(x, nullptr);
    moe.update_router_bias();
  }
  moe.forward(x, nullptr);
  MESSAGE("after 200 updates: cv " << cv_before << " -> " << moe.stats().load_cv() << ", max load " << max_before
                                   << " -> " << moe.stats().max_load());
  CHECK(moe.stats().load_cv() < 0.5 * cv_before);
  CHECK(moe.stats().max_load() < max_before);

  c.moe.bias_update_rate = 0;
  ParamList params0;
  MoeFeedForward frozen(params0, 0, c, 7);
  frozen.forward(x, nullptr);
  frozen.update_router_bias();
  for (float b : frozen.router_bias().to_vector<float>()) CHECK(b == 0.0f);
}

TEST_CASE("count_parameters: MoE stored vs active, the issue's 620.9M / 205.7M, and the model agrees") {
  const Config cfg = load_config(std::string(HYLO_SOURCE_DIR) + "/configs/moe-8e-pbb.yaml");
  const std::vector<ParamCount> rows = count_parameters(cfg.model);
  const ParamCount total = rows.back();
  const int64_t embedding = rows.front().stored;
  CHECK(rows.front().component == "embedding");
  CHECK(total.stored - embedding == 620'921'856);  // 620.9M non-embedding stored
  CHECK(total.active - embedding == 205'685'760);  // 205.7M active
  for (const char* name : {"full", "swa", "pbb"}) {
    CAPTURE(name);
    const Config big = load_config(std::string(HYLO_SOURCE_DIR) + "/configs/moe-2b-" + name + ".yaml");
    const ParamCount t = count_parameters(big.model).back();
    CHECK(std::abs(double(t.stored) - 2.07e9) < 0.01e9);
    CHECK(double(t.active) / double(t.stored) > 0.15);
    CHECK(double(t.active) / double(t.stored) < 0.20);
  }
  // What count_parameters says is what the Transformer builds (stored), dense and MoE, tied and not.
  for (int variant = 0; variant < 3; ++variant) {
    ModelConfig m = tiny_moe("softmax", 0.0, variant);
    m.tie_embeddings = variant != 1;
    m.moe.every = variant + 1;
    if (variant == 2) m.moe.experts = 0;  // dense
    Transformer model(m, 1);
    int64_t built = 0;
    for (const Parameter& p : model.parameters()) built += p.var.value().numel();
    CHECK(count_parameters(m).back().stored == built);
  }
  // FLOPs count only what a token touches: top-2 of 8 experts cost what two dense FFNs of 1408 would.
  ModelConfig dense = cfg.model;
  dense.moe.experts = 0;
  dense.ffn_hidden = 2 * 1408;
  const double router_flops = 6.0 * 16 * 8 * 1024;
  CHECK(train_flops_per_token(cfg.model, 2048) == doctest::Approx(train_flops_per_token(dense, 2048) + router_flops));
}

TEST_CASE("MoE resume is bit-exact when the router biases travel as checkpoint buffers") {
  // The trainer's save/restore in miniature (parameters, moments, step, plus buffers()), with a
  // bias rate large enough that the biases change selection within a few steps.
  ModelConfig c = tiny_moe("sigmoid", 0.0, 1);
  c.init_std = 0.02;
  c.moe.bias_update_rate = 0.02;
  c.moe.aux_loss_coef = 0.01;
  const int B = 2, T = 8, steps = 10, split = 5;
  auto batch = [&](int step) {
    Rng rng{77, uint64_t(step), 0};
    std::vector<int32_t> ids(B * T), targets(B * T);
    for (auto& x : ids) x = int32_t(rng.below(21));
    for (auto& x : targets) x = int32_t(rng.below(21));
    return std::pair{Tensor::from_vector(ids, {B, T}), Tensor::from_vector(targets, {B * T})};
  };
  auto train = [&](Transformer& model, AdamW& opt, int from, int to) {
    std::vector<float> losses;
    for (int step = from; step < to; ++step) {
      opt.zero_grad();
      auto [inputs, targets] = batch(step);
      Var loss = model.loss(inputs, targets, 21);
      losses.push_back(loss.value().to_vector<float>()[0]);
      loss.backward();
      opt.step(3e-2, 1.0);
      model.update_router_biases();
    }
    return losses;
  };
  const AdamWOptions options{0.9, 0.95, 1e-8, 0.1};
  Transformer straight(c, 5);
  AdamW straight_opt(straight.parameters(), options, Device::cpu);
  const std::vector<float> reference = train(straight, straight_opt, 0, steps);

  Transformer first(c, 5);
  AdamW first_opt(first.parameters(), options, Device::cpu);
  train(first, first_opt, 0, split);
  CheckpointState state;
  state.step = split;
  state.updates = first_opt.steps_taken();
  for (size_t i = 0; i < first.parameters().size(); ++i) {
    const std::string& name = first.parameters()[i].name;
    const Shape& shape = first.parameters()[i].var.value().shape();
    state.model.push_back({name, first_opt.master(i).view(shape)});
    state.optim_m.push_back({name, first_opt.moment_m(i).view(shape)});
    state.optim_v.push_back({name, first_opt.moment_v(i).view(shape)});
  }
  state.buffers = buffer_tensors(first);
  CHECK(std::any_of(state.buffers.begin(), state.buffers.end(), [](const NamedTensor& b) {
    const std::vector<float> v = b.value.to_vector<float>();
    return std::any_of(v.begin(), v.end(), [](float x) { return x != 0.0f; });
  }));
  const std::string path =
      (std::filesystem::temp_directory_path() / ("hylo_test_moe_resume_" + std::to_string(getpid()) + ".h5")).string();
  save_checkpoint(path, state);
  const CheckpointState loaded = load_checkpoint(path);
  std::filesystem::remove(path);

  auto resume = [&](bool with_buffers) {
    Transformer model(c, 5);
    AdamW opt(model.parameters(), options, Device::cpu);
    std::vector<Tensor> masters, m, v;
    for (size_t i = 0; i < loaded.model.size(); ++i) {
      masters.push_back(loaded.model[i].value);
      m.push_back(loaded.optim_m[i].value);
      v.push_back(loaded.optim_v[i].value);
    }
    opt.load_masters(masters);
    opt.load_moments(m, v);
    opt.set_steps_taken(loaded.updates);
    if (with_buffers) restore_buffers(model, loaded, path);
    return train(model, opt, split, steps);
  };
  const std::vector<float> resumed = resume(true);
  for (int i = 0; i < steps - split; ++i) CHECK(resumed[size_t(i)] == reference[size_t(split + i)]);
  // Without the buffers the run is a different run: the biases are state, not decoration.
  const std::vector<float> forgetful = resume(false);
  CHECK(forgetful != std::vector<float>(reference.begin() + split, reference.end()));

  // A checkpoint without the biases (or with other ones) is refused in one line naming them.
  Transformer model(c, 5);
  CheckpointState missing = loaded;
  missing.buffers.pop_back();
  try {
    restore_buffers(model, missing, "ck.h5");
    FAIL("restore_buffers accepted a checkpoint without blocks.3.moe.router_bias");
  } catch (const Error& e) {
    CHECK(std::string(e.what()) == "ck.h5: buffer /buffers/blocks.3.moe.router_bias is missing (the checkpoint holds 1 "
                                   "buffers, the model 2)");
  }
  CheckpointState extra = loaded;
  extra.buffers.push_back({"blocks.9.moe.router_bias", Tensor::zeros({4}, DType::f32)});
  CHECK_THROWS_WITH_AS(restore_buffers(model, extra, "ck.h5"), doctest::Contains("blocks.9.moe.router_bias"), Error);
  CHECK(buffer_tensors(model).size() == 2);
  ModelConfig dense_config = c;
  dense_config.moe.experts = 0;
  Transformer dense(dense_config, 5);
  CHECK(buffer_tensors(dense).empty());
  restore_buffers(dense, CheckpointState{}, "dense.h5");  // a dense model has none, and needs none
}

TEST_CASE("MoE config validation: one line naming the keys") {
  auto error_of = [](const std::string& yaml) { return test::error_of([&] { config_from_yaml_text(yaml, "m.yaml"); }); };
  CHECK(error_of("model: {n_layers: 2, moe: {experts: 4, top_k: 5}}").find("model.moe.top_k=5 > model.moe.experts=4") !=
        std::string::npos);
  CHECK(error_of("model: {n_layers: 2, moe: {experts: 4, every: 3}}").find("model.moe.every=3 > model.n_layers=2") !=
        std::string::npos);
  CHECK(error_of("model: {n_layers: 2, moe: {experts: 4, router: topk}}").find("model.moe.router") != std::string::npos);
  CHECK(error_of("model: {n_layers: 2, moe: {experts: 4, capacity_factor: -1}}").find("model.moe.capacity_factor") !=
        std::string::npos);
  CHECK(error_of("model: {n_layers: 2, moe: {experts: 4, every: 2}}").empty());
}
