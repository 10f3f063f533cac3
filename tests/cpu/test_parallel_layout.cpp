// The parallel layer on one process: ParallelLayout's degrees and checks (parallel/layout.h), the
// expert dispatch that the MoE layers receive (parallel/expert_dispatch.h) against the plain
// layer, and the training step that `hylo train` and `hylo bench train` share (train/step.h)
// against the same arithmetic written out.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <memory>

#include "core/error.h"
#include "nn/moe.h"
#include "nn/transformer.h"
#include "ops/ops.h"
#include "optim/optimizer.h"
#include "parallel/expert_dispatch.h"
#include "parallel/layout.h"
#include "parallel/single_process.h"
#include "pretend_ranks.h"
#include "small_model.h"
#include "train/step.h"

using namespace hylo;

namespace {

using test::PretendRanks;

ModelConfig moe_config() {
  ModelConfig c = test::small_hybrid(29);
  c.moe.experts = 4;
  c.moe.top_k = 2;
  c.moe.shared_experts = 1;
  c.init_std = 0.3;  // routing far from ties
  return c;
}

std::vector<float> values_of(const Tensor& t) { return t.to(DType::f32).to_vector<float>(); }

// sum_i G_i v_i as a differentiable scalar: a gradient G into v.
Var dot_with(const Var& v, const std::vector<float>& G) {
  const std::vector<float> a = values_of(v.value());
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * G[i];
  return Var::from_op(Tensor::from_vector<float>({float(s)}, {1}), {v}, [G](const Tensor& d, std::vector<Var>& in) {
    std::vector<float> g(G);
    for (float& x : g) x *= d.to_vector<float>()[0];
    in[0].accumulate_grad(Tensor::from_vector(g, in[0].shape()));
  });
}

Config step_config() {
  Config c;
  c.model = test::small_hybrid(29);
  c.train.batch_size = 4;
  c.train.micro_batch_size = 2;  // two micro-batches a step
  c.train.seq_len = 9;
  c.train.grad_clip = 0.05;  // small enough to clip
  return c;
}

// Micro-batch m of a test step: (2, 10) tokens split into inputs and targets.
StepBatch micro_batch(int m) {
  std::vector<int32_t> tokens(2 * 10);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((7 * i + 5 * size_t(m) + 3) % 29);
  return make_step_batch(tokens, 2, 9, Device::cpu);
}

}  // namespace

TEST_CASE("parallel layout: degrees, groups, /meta/layout, and one-line errors against the world size") {
  dist::SingleProcess one;
  const ParallelLayout alone(one, 1, "x.yaml");
  CHECK(alone.world_size() == 1);
  CHECK(alone.dp() == 1);
  CHECK(alone.ep() == 1);
  CHECK(alone.leader());
  CHECK(!alone.expert_parallel());
  CHECK(alone.expert_group() == nullptr);
  CHECK(&alone.of(false) == &one);
  CHECK_THROWS_WITH_AS(alone.of(true), doctest::Contains("expert shards without expert parallelism"), Error);
  CHECK(alone.str() == "dp=1");

  PretendRanks four(2, 4);
  CHECK_THROWS_WITH_AS(ParallelLayout(four, 3, "x.yaml"),
                       "x.yaml: train.expert_parallel=3 does not divide the 4 ranks", Error);
  CHECK_THROWS_WITH_AS(ParallelLayout(four, 0, "x.yaml"), doctest::Contains("train.expert_parallel=0"), Error);
  const ParallelLayout dp4(four, 1, "x.yaml");
  CHECK(dp4.rank() == 2);
  CHECK(!dp4.leader());
  CHECK(dp4.str() == "dp=4");

  // Groups split elsewhere: ep 2 over 4 ranks, rank 2 is rank 0 of its group and 1 of its replicas.
  const ParallelLayout ep2(four, std::make_unique<PretendRanks>(0, 2), std::make_unique<PretendRanks>(1, 2));
  CHECK(ep2.ep() == 2);
  CHECK(ep2.dp() == 4);
  CHECK(&ep2.of(true) == ep2.expert_replicas());
  CHECK(ep2.str() == "dp=4,ep=2");
  CHECK_THROWS_WITH_AS(ParallelLayout(four, std::make_unique<PretendRanks>(0, 2), std::make_unique<PretendRanks>(0, 3)),
                       doctest::Contains("do not make the 4 ranks"), Error);
  CHECK_THROWS_WITH_AS(ParallelLayout(four, std::make_unique<PretendRanks>(0, 2), nullptr),
                       doctest::Contains("without its replicas"), Error);
}

TEST_CASE("expert dispatch on a group of one (own plan, regrouping, combine by 1) is the plain MoE layer, bit for bit") {
  const ModelConfig config = moe_config();
  ParamList plain_params, ep_params;
  MoeFeedForward plain(plain_params, 0, config, 7), ep(ep_params, 0, config, 7);
  dist::SingleProcess group;
  const ExpertDispatch dispatch(group);
  ep.shard_experts(ep_params, dispatch);
  CHECK(ep.expert_parallel());
  CHECK(!plain.expert_parallel());
  const int N = 24, D = config.d_model;
  std::vector<float> x(size_t(N) * D);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(std::sin(0.37 * double(i)));
  Var x_plain(Tensor::from_vector(x, {N, D}), true, "x"), x_ep(Tensor::from_vector(x, {N, D}), true, "x");
  Var y = plain.forward(x_plain, nullptr), y_ep = ep.forward(x_ep, nullptr);
  CHECK(values_of(y_ep.value()) == values_of(y.value()));
  std::vector<float> G(x.size());
  for (size_t i = 0; i < G.size(); ++i) G[i] = float(std::cos(0.11 * double(i)));
  dot_with(y, G).backward();
  dot_with(y_ep, G).backward();
  CHECK(values_of(x_ep.grad()) == values_of(x_plain.grad()));
  for (size_t i = 0; i < plain_params.size(); ++i) {
    CAPTURE(plain_params[i].name);
    CHECK(ep_params[i].expert_shard == (plain_params[i].name.find(".moe.w_") != std::string::npos));
    CHECK(values_of(ep_params[i].var.grad()) == values_of(plain_params[i].var.grad()));
  }
}

TEST_CASE("parallelize_experts: no dispatch and an untouched model without expert parallelism") {
  Transformer model(moe_config(), 3);
  dist::SingleProcess one;
  const ParallelLayout layout(one, 1, "test");
  CHECK(parallelize_experts(model, layout) == nullptr);
  CHECK(!model.expert_parallel());
  for (const Parameter& p : model.parameters()) CHECK(!p.expert_shard);
}

TEST_CASE("split_batch: micro-batches per rank, one-line errors naming the config and the keys") {
  TrainConfig t;
  t.batch_size = 8;
  CHECK(split_batch(t, 2, "x.yaml").micro_batch == 4);
  CHECK(split_batch(t, 2, "x.yaml").accumulation == 1);
  t.micro_batch_size = 2;
  CHECK(split_batch(t, 2, "x.yaml").accumulation == 2);
  CHECK_THROWS_WITH_AS(split_batch(t, 3, "x.yaml"), "x.yaml: train.batch_size=8 is not divisible by 3 data-parallel ranks",
                       Error);
  t.micro_batch_size = 3;
  CHECK_THROWS_WITH_AS(split_batch(t, 2, "x.yaml"),
                       "x.yaml: train.batch_size=8 is not divisible by train.micro_batch_size=3 x 2 data-parallel ranks",
                       Error);
}

TEST_CASE("the training step is forward, backward, clipped AdamW over its micro-batches, bit for bit") {
  const Config config = step_config();
  dist::SingleProcess one;
  const ParallelLayout layout(one, 1, "test");
  const BatchSplit split = split_batch(config.train, layout.dp(), "test");
  REQUIRE(split.accumulation == 2);
  TrainStep step(config, Device::cpu, layout, split, 29);
  // The same arithmetic written out.
  Transformer model(config.model, config.train.seed);
  const TrainConfig& t = config.train;
  AdamW optimizer(model.parameters(), AdamWOptions{t.beta1, t.beta2, t.eps, t.weight_decay}, Device::cpu);
  for (int s = 0; s < 2; ++s) {
    CAPTURE(s);
    int m = 0;
    const StepResult r = step.run(s + 1, 1e-2, [&] { return micro_batch(2 * s + m++); });
    CHECK(m == 2);
    optimizer.zero_grad();
    double loss = 0;
    for (int k = 0; k < 2; ++k) {
      const StepBatch b = micro_batch(2 * s + k);
      Var l = model.loss(b.inputs_BT, b.targets_N, 29);
      loss += double(l.value().to_vector<float>()[0]);
      scale(l, 0.5).backward();
    }
    const double norm = optimizer.grad_norm();
    optimizer.step(1e-2, clip_scale(norm, t.grad_clip));
    CHECK(r.finite);
    CHECK(r.loss == loss / 2);
    CHECK(r.grad_norm == norm);
    CHECK(r.grad_norm > t.grad_clip);
    for (size_t i = 0; i < model.parameters().size(); ++i) {
      CAPTURE(model.parameters()[i].name);
      CHECK(values_of(step.model().parameters()[i].var.value()) == values_of(model.parameters()[i].var.value()));
    }
  }
  CHECK(step.optimizer().steps_taken() == 2);
}

TEST_CASE("the training step's non-finite policy: skip leaves the weights and the update count, abort names the step") {
  Config config = step_config();
  dist::SingleProcess one;
  const ParallelLayout layout(one, 1, "test");
  const BatchSplit split = split_batch(config.train, 1, "test");
  TrainStep skip(config, Device::cpu, layout, split, 29);
  Tensor& embed = skip.model().parameters()[0].var.mutable_value();
  embed.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> before = values_of(skip.model().parameters()[1].var.value());
  const StepResult r = skip.run(1, 1e-2, [] { return micro_batch(0); });
  CHECK(!r.finite);
  CHECK(skip.optimizer().steps_taken() == 0);
  CHECK(values_of(skip.model().parameters()[1].var.value()) == before);

  config.train.nan_policy = "abort";
  TrainStep abort(config, Device::cpu, layout, split, 29);
  abort.model().parameters()[0].var.mutable_value().data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_WITH_AS(abort.run(7, 1e-2, [] { return micro_batch(0); }),
                       doctest::Contains("step 7: non-finite loss"), Error);
}
