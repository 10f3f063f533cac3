// Incremental decoding on CUDA (nn/generate.h through the kernels/decode caches) against
//  - the full-sequence CUDA forward re-run at every step: greedy tokens equal, per-step logits
//    within a bf16 bound;
//  - the CPU reference Generator on the same (bf16-rounded) weights: the forward's per-step logits
//    within a bf16-vs-fp32 bound;
// for pbb (bridge 1, 4 and = block; prompts ending at several block offsets, sequences crossing
// many block boundaries), swa and full-only models, MHA, GQA and MQA, head dims 64 and 128.
//
// Why the token comparison cannot flake: both CUDA paths round to bf16 at different points, so
// their logits differ by ~1e-2 relative, and a random model's top two logits are sometimes closer
// than that. Each model is therefore first trained (on the GPU, a few seconds) to memorise one
// sequence that needs context to predict; its greedy continuation then has a margin of several
// logits at every step. Every step checks that the reference margin exceeds twice the largest
// logit difference between the two paths: if it does not, the step is a near tie whose token is
// not decidable in bf16, and the test fails saying so instead of passing on luck. The kernels and
// GEMMs are deterministic, so the outcome is the same on every run of one build and GPU.
#include <cuda_runtime.h>  // before gpu_test_util.h: its typed cudaMalloc(T**) overload
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "core/rng.h"
#include "gpu_test_util.h"
#include "nn/generate.h"
#include "nn/transformer.h"
#include "ops/ops.h"
#include "optim/optimizer.h"

using namespace hylo;
using hylo::test::relative_error;

namespace {

constexpr int kVocab = 64, kVocabValid = 60;  // rows 60..63 are padding: never a token
constexpr int kLength = 96;                   // memorised sequence: 6 blocks of 16, 8 windows of 12
constexpr int kAlphabet = 12;                 // few symbols: the next token needs the previous ones

struct GenCase {
  std::string name;
  ModelConfig config;
  std::vector<int> prompts;  // prompt lengths: where incremental decoding takes over
};

ModelConfig model(int heads, int kv_heads, int head_dim, const AttnKindConfig& local, const std::string& pattern) {
  ModelConfig c;
  c.vocab_size = kVocab;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.d_model = heads * head_dim;
  c.n_layers = 3;
  c.ffn_hidden = 256;
  c.pattern = pattern;
  c.local = local;
  return c;
}

std::vector<GenCase> cases() {
  std::vector<GenCase> c;
  c.push_back({"pbb b=16 w=4, GQA 4/2, hd64, qk-norm", model(4, 2, 64, {"pbb", 0, 16, 4}, "LLG"), {1, 5, 16, 23}});
  c.back().config.qk_norm = true;
  c.push_back({"pbb b=16 w=16, MHA 2, hd128", model(2, 0, 128, {"pbb", 0, 16, 16}, "LG"), {3, 31}});
  c.push_back({"pbb b=8 w=1, MQA 4/1, hd64", model(4, 1, 64, {"pbb", 0, 8, 1}, "LLG"), {8, 13}});
  c.push_back({"swa W=12, GQA 4/2, hd128", model(4, 2, 128, {"swa", 12, 0, 0}, "LLG"), {2, 12, 29}});
  c.push_back({"full only, MHA 2, hd64, untied head", model(2, 0, 64, {"full"}, "G"), {4, 40}});
  c.back().config.tie_embeddings = false;
  return c;
}

std::vector<int32_t> memorised_sequence(uint64_t seed) {
  Rng rng{seed, 0, 0};
  std::vector<int32_t> s(kLength);
  for (auto& x : s) x = int32_t(rng.below(kAlphabet));
  return s;
}

// Trains `m` (bf16 on CUDA, fp32 masters) on next-token prediction of `seq` until memorised;
// returns the final loss. AdamW, lr 3e-3 decaying linearly to 0, clipped at norm 1: on the CPU
// (fp32) this reaches loss < 1e-3 and top-two margins > 8 on every position.
double memorise(Transformer& m, const std::vector<int32_t>& seq) {
  AdamW optimizer(m.parameters(), AdamWOptions{0.9, 0.95, 1e-8, 0.0}, Device::cuda);
  const std::vector<int32_t> in(seq.begin(), seq.end() - 1), target(seq.begin() + 1, seq.end());
  const Tensor inputs = Tensor::from_vector(in, {1, kLength - 1}).to(Device::cuda);
  const Tensor targets = Tensor::from_vector(target, {kLength - 1}).to(Device::cuda);
  const int steps = 150;
  double loss = 0;
  for (int s = 0; s < steps; ++s) {
    optimizer.zero_grad();
    Var l = m.loss(inputs, targets, kVocabValid);
    loss = l.value().to(Device::cpu).to(DType::f64).to_vector<double>()[0];
    l.backward();
    const double norm = optimizer.grad_norm();
    optimizer.step(3e-3 * (1.0 - double(s) / steps), norm > 1 ? 1 / norm : 1.0);
  }
  return loss;  // of the last step's forward, before its update
}

// Last row of the CUDA forward over `ids`, valid vocabulary only.
std::vector<double> forward_last(const Transformer& m, const std::vector<int32_t>& ids) {
  NoGradGuard no_grad;
  const int T = int(ids.size());
  const Tensor logits = m.forward(Tensor::from_vector(ids, {1, T}).to(Device::cuda)).value();
  const std::vector<double> row = logits.slice(0, T - 1, T).to(Device::cpu).to(DType::f64).to_vector<double>();
  return std::vector<double>(row.begin(), row.begin() + kVocabValid);
}

int32_t argmax(const std::vector<double>& v) { return int32_t(std::max_element(v.begin(), v.end()) - v.begin()); }

// Top logit minus the runner-up.
double margin(const std::vector<double>& v) {
  const int32_t best = argmax(v);
  double second = -INFINITY;
  for (size_t i = 0; i < v.size(); ++i)
    if (int32_t(i) != best) second = std::max(second, v[i]);
  return v[size_t(best)] - second;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = std::abs(a[i] - b[i]);
    if (!std::isfinite(e)) return INFINITY;  // max() would skip a NaN
    d = std::max(d, e);
  }
  return d;
}

// The same weights as `gpu` (bf16 values, widened) in an f32 CPU model.
Transformer cpu_copy(const Transformer& gpu, const ModelConfig& config) {
  Transformer cpu(config, 0);
  for (size_t i = 0; i < cpu.parameters().size(); ++i)
    cpu.parameters()[i].var.mutable_value() =
        gpu.parameters()[i].var.value().to(Device::cpu).to(DType::f32);
  return cpu;
}

}  // namespace

TEST_CASE("cuda incremental decoding: greedy tokens equal the re-run cuda forward's, logits match it and the CPU") {
  // Bounds on the relative L2 error of one step's logits (the values seen are printed):
  //   decoding vs the CUDA forward: both bf16, rounding at different points; this is the check
  //   that the caches and decode kernels compute what the model does.
  //   the CUDA forward vs the fp32 CPU model: catches a broken component both CUDA paths share.
  //   How far bf16 sits from fp32 depends on the trained weights: 0.5-2e-2 on those the sm_90a
  //   build trains, 7.2e-2 on one set the sm_90 (mma.sync) build trains (swa W=12, GQA, hd128),
  //   with its decoding still within 1.1e-2 of its forward; a broken component is off by ~1.
  const double kVsForward = 3e-2, kForwardVsCpu = 1e-1;
  uint64_t seed = 40;
  for (const GenCase& gc : cases()) {
    CAPTURE(gc.name);
    Transformer m(gc.config, ++seed);
    const std::vector<int32_t> seq = memorised_sequence(++seed);
    const double loss = memorise(m, seq);
    const Transformer cpu = cpu_copy(m, gc.config);
    for (int prompt_len : gc.prompts) {
      CAPTURE(prompt_len);
      std::vector<int32_t> ids(seq.begin(), seq.begin() + prompt_len);
      Generator gpu_gen(m, kLength, kVocabValid), cpu_gen(cpu, kLength, kVocabValid);
      REQUIRE(gpu_gen.caches().front().bytes ==
              size_t(gpu_gen.caches().front().slots) * gc.config.kv_heads() * gc.config.head_dim() * 2 * 2);  // bf16
      double worst_fwd = 0, worst_cpu = 0, least_margin = INFINITY;
      // One step at position t (ids[0..t] given): decoding, the re-run forward, the CPU model.
      auto step = [&](size_t t, std::vector<double>& dec, std::vector<double>& ref) {
        dec = gpu_gen.step(ids[t]);
        ref = forward_last(m, std::vector<int32_t>(ids.begin(), ids.begin() + int64_t(t) + 1));
        worst_fwd = std::max(worst_fwd, relative_error(dec, ref));
        worst_cpu = std::max(worst_cpu, relative_error(ref, cpu_gen.step(ids[t])));
      };
      std::vector<double> dec, ref;
      for (size_t t = 0; t + 1 < ids.size(); ++t) step(t, dec, ref);  // the prompt's positions
      int near_ties = 0, followed = 0;
      while (int(ids.size()) < kLength) {
        const int64_t t = int64_t(ids.size()) - 1;  // position fed now; the prediction is for t + 1
        step(size_t(t), dec, ref);
        const double m_ref = margin(ref), diff = max_abs_diff(dec, ref);
        least_margin = std::min(least_margin, m_ref);
        if (m_ref <= 2 * diff) {
          ++near_ties;
          FAIL_CHECK("near tie at position " << t << ": reference margin " << m_ref << " <= 2 x logit difference "
                                             << diff << ", so greedy equality is not decidable in bf16 here");
        }
        CHECK_MESSAGE(argmax(dec) == argmax(ref), "position " << t);
        followed += argmax(ref) == seq[size_t(t + 1)];
        ids.push_back(argmax(ref));  // both generators are fed the reference token
      }
      CHECK(worst_fwd < kVsForward);
      CHECK(worst_cpu < kForwardVsCpu);
      // The premise: the model reproduces what it memorised (on the CPU in fp32: every token),
      // so the tokens follow a context-dependent sequence, not a constant or a bigram loop.
      const int decoded = kLength - prompt_len;
      CHECK(followed * 10 >= decoded * 9);
      // Generator::generate on its own (greedy, nothing fed from outside) picks the same tokens.
      Generator fresh(m, kLength, kVocabValid);
      Rng unused{1, 0, 0};
      const std::vector<int32_t> greedy =
          fresh.generate(std::span(seq.data(), size_t(prompt_len)), decoded, SamplingOptions{}, unused);
      CHECK(std::equal(greedy.begin(), greedy.end(), ids.begin() + prompt_len, ids.end()));
      std::printf("generate %-42s prompt %2d: %2d tokens, loss %.1e, min margin %.2f, rel err vs forward %.2e, vs "
                  "cpu (forward) %.2e, near ties %d\n",
                  gc.name.c_str(), prompt_len, decoded, loss, least_margin, worst_fwd, worst_cpu, near_ties);
    }
  }
}

TEST_CASE("cuda decoding: a model the decode kernels cannot serve fails with one clear line") {
  ModelConfig c = model(2, 0, 32, {"pbb", 0, 8, 2}, "LG");  // head dim 32
  Transformer m(c, 3);
  for (Parameter& p : m.parameters()) place_parameter(p, Device::cuda);
  Generator g(m, 8, kVocabValid);
  // The training attention has no hd-32 kernel either; the decode op names its own limit.
  CHECK_THROWS_WITH_AS(g.step(1), doctest::Contains("head_dim 32 has no cuda kernel"), Error);
}
