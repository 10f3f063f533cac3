// The op layer and model wiring end to end: the whole Transformer's gradient (every parameter
// kind, all three mask kinds, GQA, QK-norm, untied head) against fp64 central differences.
#include <doctest/doctest.h>

#include <cmath>

#include "core/rng.h"
#include "model_gradcheck.h"
#include "nn/transformer.h"
#include "ops/ops.h"

using namespace hylo;

namespace {

ModelConfig tiny_model(const std::string& local_kind) {
  ModelConfig c;
  c.vocab_size = 23;
  c.d_model = 16;
  c.n_layers = 3;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_hidden = 24;
  c.pattern = "LLG";
  c.local = {local_kind, 5, 4, 2};
  c.qk_norm = true;
  c.tie_embeddings = local_kind != "swa";  // cover the untied head once
  c.init_std = 0.3;                        // large enough that every path matters
  return c;
}

double loss_value(const Transformer& model, const Tensor& inputs, const Tensor& targets) {
  return model.loss(inputs, targets, 21).value().to_vector<double>()[0];
}

}  // namespace

TEST_CASE("model gradient matches fp64 finite differences for full, swa and pbb hybrids") {
  for (const std::string kind : {"full", "swa", "pbb"}) {
    CAPTURE(kind);
    Transformer model(tiny_model(kind), 11);
    for (Parameter& p : model.parameters()) p.var.mutable_value() = p.var.value().to(DType::f64);
    const int B = 2, T = 11;  // T not a multiple of the pbb block (4)
    Rng rng{5, 0, 0};
    std::vector<int32_t> ids(B * T), targets(B * T);
    for (auto& x : ids) x = int32_t(rng.below(23));
    for (auto& x : targets) x = int32_t(rng.below(21));
    targets[3] = -1;  // an ignored position
    Tensor inputs = Tensor::from_vector(ids, {B, T}), target_t = Tensor::from_vector(targets, {B * T});

    model.loss(inputs, target_t, 21).backward();
    const double worst =
        test::check_model_gradient(model, [&] { return loss_value(model, inputs, target_t); }, rng);
    MESSAGE(kind << ": worst relative error " << worst);
  }
}

TEST_CASE("the chunked LM-head loss equals the unchunked one, value and gradients, with and without z-loss") {
  Rng rng{21, 0, 0};
  const int N = 13, D = 6, V = 17;
  auto random = [&](Shape shape) {
    Tensor t = Tensor::empty(shape, DType::f64);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = rng.normal();
    return t;
  };
  Tensor h = random({N, D}), w = random({V, D});
  std::vector<int32_t> targets(N);
  for (auto& x : targets) x = int32_t(rng.below(15));
  targets[4] = -1;
  Tensor target_t = Tensor::from_vector(targets, {N});
  double plain = 0;  // the loss without z-loss
  for (double z_loss : {0.0, 0.1}) {
    CAPTURE(z_loss);
    std::vector<std::vector<double>> results;
    for (int64_t chunk : {0, 1, 4}) {
      CAPTURE(chunk);
      Var hv(h.clone(), true, "h"), wv(w.clone(), true, "w");
      Var loss = lm_head_cross_entropy(hv, wv, target_t, 15, z_loss, chunk);
      scale(loss, 0.5).backward();  // an incoming gradient other than 1 exercises the rescale
      std::vector<double> r = loss.value().to_vector<double>();
      for (double g : hv.grad().to_vector<double>()) r.push_back(g);
      for (double g : wv.grad().to_vector<double>()) r.push_back(g);
      results.push_back(r);
    }
    for (size_t i = 0; i < results[0].size(); ++i) {
      CHECK(results[1][i] == doctest::Approx(results[0][i]).epsilon(1e-12));
      CHECK(results[2][i] == doctest::Approx(results[0][i]).epsilon(1e-12));
    }
    if (z_loss == 0) {
      plain = results[0][0];
      continue;
    }
    // + z_loss * mean lse^2 over the 12 counted rows, lse over the 15 valid columns.
    const std::vector<double> H = h.to_vector<double>(), Wt = w.to_vector<double>();
    double lse2 = 0;
    for (int n = 0; n < N; ++n) {
      if (targets[size_t(n)] < 0) continue;
      double sum = 0;
      for (int v = 0; v < 15; ++v) {
        double logit = 0;
        for (int d = 0; d < D; ++d) logit += H[size_t(n * D + d)] * Wt[size_t(v * D + d)];
        sum += std::exp(logit);
      }
      lse2 += std::log(sum) * std::log(sum);
    }
    CHECK(results[0][0] == doctest::Approx(plain + z_loss * lse2 / 12).epsilon(1e-12));
  }
}

TEST_CASE("activation recomputation gives bit-identical gradients") {
  ModelConfig c = tiny_model("pbb");
  Rng rng{8, 0, 0};
  std::vector<int32_t> ids(2 * 11), targets(2 * 11);
  for (auto& x : ids) x = int32_t(rng.below(23));
  for (auto& x : targets) x = int32_t(rng.below(21));
  Tensor inputs = Tensor::from_vector(ids, {2, 11}), target_t = Tensor::from_vector(targets, {22});
  std::vector<std::vector<float>> grads[2];
  for (int on = 0; on < 2; ++on) {
    Transformer model(c, 11);
    model.set_recompute(on == 1);
    model.loss(inputs, target_t, 21).backward();
    for (const Parameter& p : model.parameters()) grads[on].push_back(p.var.grad().to_vector<float>());
  }
  REQUIRE(grads[0].size() == grads[1].size());
  for (size_t i = 0; i < grads[0].size(); ++i) CHECK(grads[0][i] == grads[1][i]);
}
