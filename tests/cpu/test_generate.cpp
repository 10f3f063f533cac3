// Incremental decoding (nn/generate.h) against the full-sequence forward: per-step logits equal
// forward()'s rows in fp64 for pbb (w = 1, 2, b), swa, full-only, GQA, QK-norm, NoPE and MoE
// models; greedy decoding equals argmax over re-running forward() on the growing sequence; the
// PBB layers hold b slots. A batch of prompts decodes as each prompt alone. Sampling is
// deterministic per seed and respects top-k / top-p. And `hylo generate` on a checkpoint built by
// hand (the CUDA path: tests/gpu/test_generate_gpu.cpp), and `hylo bench generate` on the CPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "model_checkpoint_fixture.h"
#include "run_command.h"
#include "core/rng.h"
#include "nn/generate.h"
#include "nn/transformer.h"
#include "ops/decode.h"
#include "ops/ops.h"
#include "checkpoint/buffers.h"
#include "checkpoint/checkpoint.h"
#include "config/config.h"
#include "core/file.h"

using namespace hylo;
namespace fs = std::filesystem;

namespace {

constexpr int kVocab = 23, kVocabValid = 21;  // ids 21, 22 are padding rows: never produced

struct ModelCase {
  std::string name;
  ModelConfig config;
};

ModelConfig tiny(const AttnKindConfig& local, const std::string& pattern) {
  ModelConfig c;
  c.vocab_size = kVocab;
  c.d_model = 16;
  c.n_layers = 3;
  c.n_heads = 4;
  c.n_kv_heads = 2;  // GQA
  c.ffn_hidden = 24;
  c.pattern = pattern;
  c.local = local;
  c.qk_norm = true;
  c.init_std = 0.3;  // large enough that every path matters
  return c;
}

std::vector<ModelCase> model_cases() {
  std::vector<ModelCase> cases;
  for (int bridge : {1, 2, 5}) cases.push_back({"pbb b=5 w=" + std::to_string(bridge), tiny({"pbb", 0, 5, bridge}, "LLG")});
  cases.push_back({"swa W=4, untied head", tiny({"swa", 4, 0, 0}, "LLG")});
  cases.back().config.tie_embeddings = false;
  cases.push_back({"full only, MHA, no qk-norm", tiny({"full"}, "G")});
  cases.back().config.n_kv_heads = 0;
  cases.back().config.qk_norm = false;
  ModelConfig moe = tiny({"pbb", 0, 4, 2}, "LG");
  moe.n_layers = 4;
  moe.global.nope = true;
  moe.moe.experts = 4;
  moe.moe.top_k = 2;
  moe.moe.expert_hidden = 8;
  moe.moe.shared_experts = 1;
  moe.moe.every = 2;
  moe.moe.bias_update_rate = 0.05;
  cases.push_back({"pbb + MoE (shared expert, router bias), NoPE globals", moe});
  return cases;
}

// fp64 parameters; MoE router biases set so that they really change selection.
Transformer make_model(const ModelConfig& c, uint64_t seed) {
  Transformer model(c, seed);
  for (Parameter& p : model.parameters()) p.var.mutable_value() = p.var.value().to(DType::f64);
  for (NamedBufferRef& b : model.buffers()) {
    float* bias = b.value.data<float>();
    for (int e = 0; e < int(b.value.numel()); ++e) bias[e] = 0.05f * float(e % 3) - 0.04f;
  }
  return model;
}

// forward() over the whole sequence: (T, kVocab) as rows.
std::vector<std::vector<double>> full_logits(const Transformer& model, const std::vector<int32_t>& ids) {
  NoGradGuard no_grad;
  const int T = int(ids.size());
  const std::vector<double> flat = model.forward(Tensor::from_vector(ids, {1, T})).value().to_vector<double>();
  std::vector<std::vector<double>> rows(static_cast<size_t>(T));
  for (int t = 0; t < T; ++t) rows[size_t(t)].assign(flat.begin() + int64_t(t) * kVocab, flat.begin() + (t + 1) * kVocab);
  return rows;
}

int32_t argmax_valid(const std::vector<double>& row) {
  return int32_t(std::max_element(row.begin(), row.begin() + kVocabValid) - row.begin());
}

// max |a - b| over the first kVocabValid logits, relative to max |b|; infinite for a NaN.
double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
  double scale = 0, diff = 0;
  for (int v = 0; v < kVocabValid; ++v) {
    scale = std::max(scale, std::abs(b[size_t(v)]));
    const double d = std::abs(a[size_t(v)] - b[size_t(v)]);
    diff = std::isfinite(d) ? std::max(diff, d) : INFINITY;  // max() would skip a NaN
  }
  return diff / scale;
}

// Greedy decoding of prompts of one length by one Generator of B = prompts.size(): per sequence,
// the `count` tokens and the logits each was picked from (the first from prefill).
struct GreedyRun {
  std::vector<std::vector<int32_t>> tokens;              // [b][i]
  std::vector<std::vector<std::vector<double>>> logits;  // [b][i][v]
};
GreedyRun greedy_together(const Transformer& model, const std::vector<std::vector<int32_t>>& prompts, int count) {
  const size_t B = prompts.size();
  Generator generator(model, int64_t(prompts[0].size()) + count, kVocabValid, int(B));
  GreedyRun run{std::vector<std::vector<int32_t>>(B), std::vector<std::vector<std::vector<double>>>(B)};
  std::vector<std::vector<double>> rows = generator.prefill(prompts);
  std::vector<int32_t> next_B(B);
  for (int i = 0; i < count; ++i) {
    for (size_t b = 0; b < B; ++b) {
      run.tokens[b].push_back(next_B[b] = argmax_valid(rows[b]));
      run.logits[b].push_back(std::move(rows[b]));
    }
    if (i + 1 < count) rows = generator.step(next_B);
  }
  return run;
}

using test::CommandResult;
CommandResult run(const std::string& command) { return test::run_command(command); }

}  // namespace

TEST_CASE("incremental decoding reproduces the full forward's logits at every position (fp64)") {
  for (const ModelCase& mc : model_cases()) {
    CAPTURE(mc.name);
    const Transformer model = make_model(mc.config, 7);
    const int T = 23;  // several blocks/windows; no block size divides it
    Rng rng{3, 0, 0};
    std::vector<int32_t> ids(T);
    for (auto& x : ids) x = int32_t(rng.below(kVocabValid));
    const auto reference = full_logits(model, ids);

    Generator generator(model, T, kVocabValid);
    double worst = 0;
    for (int t = 0; t < T; ++t) {
      const std::vector<double> step = generator.step(ids[size_t(t)]);
      REQUIRE(step.size() == size_t(kVocabValid));
      worst = std::max(worst, relative_error(step, reference[size_t(t)]));
    }
    CHECK(generator.position() == T);
    CHECK(worst < 1e-10);
    MESSAGE(mc.name << ": worst relative logit error " << worst);

    // Cache sizes follow the layer kinds: the PBB claim is b slots, whatever the length.
    for (const LayerCacheInfo& info : generator.caches()) {
      const AttnMask mask = model.layer_mask(info.layer);
      const size_t row_bytes = size_t(mc.config.kv_heads()) * mc.config.head_dim() * sizeof(double) * 2;
      switch (mask.kind) {
        case MaskKind::pbb:
          CHECK(info.kind == KvCacheKind::pbb);
          CHECK(info.slots == mask.block);
          break;
        case MaskKind::swa:
          CHECK(info.kind == KvCacheKind::swa_ring);
          CHECK(info.slots == mask.window);
          break;
        case MaskKind::full:
          CHECK(info.kind == KvCacheKind::full);
          CHECK(info.slots == T);
          break;
      }
      CHECK(info.bytes == row_bytes * size_t(info.slots));
    }
  }
}

TEST_CASE("prefill (one forward over the prompt) leaves the caches as stepping through it would (fp64)") {
  for (const ModelCase& mc : model_cases()) {
    CAPTURE(mc.name);
    const Transformer model = make_model(mc.config, 17);
    // 23 positions: several blocks of 4 and 5, windows of 4, past every cache's slots.
    const std::vector<int32_t> prompt{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6};
    const std::vector<int32_t> fed{11, 0, 20, 7, 7, 19};  // then these, one step each
    Generator parallel(model, int64_t(prompt.size() + fed.size()), kVocabValid);
    Generator stepped(model, int64_t(prompt.size() + fed.size()), kVocabValid);
    std::vector<double> expected;
    for (const int32_t token : prompt) expected = stepped.step(token);
    CHECK(relative_error(parallel.prefill(prompt), expected) < 1e-10);
    CHECK(parallel.position() == stepped.position());
    for (const int32_t token : fed) CHECK(relative_error(parallel.step(token), stepped.step(token)) < 1e-10);
    CHECK_THROWS_WITH_AS(parallel.prefill(prompt), doctest::Contains("already fed"), Error);
  }
}

TEST_CASE("greedy generation equals argmax of the full forward re-run on the growing sequence (fp64)") {
  for (const ModelCase& mc : model_cases()) {
    CAPTURE(mc.name);
    const Transformer model = make_model(mc.config, 13);
    const std::vector<int32_t> prompt{3, 1, 4, 1, 5, 9, 2};
    const int count = 40;
    Generator generator(model, int(prompt.size()) + count, kVocabValid);
    Rng rng{1, 0, 0};
    const std::vector<int32_t> generated = generator.generate(prompt, count, SamplingOptions{}, rng);
    CHECK(rng.counter == 0);  // greedy draws nothing

    std::vector<int32_t> sequence = prompt;
    for (int i = 0; i < count; ++i) sequence.push_back(argmax_valid(full_logits(model, sequence).back()));
    REQUIRE(generated.size() == size_t(count));
    CHECK(std::equal(generated.begin(), generated.end(), sequence.begin() + int64_t(prompt.size())));
    // A constant continuation would make the comparison weak.
    CHECK(std::count(generated.begin(), generated.end(), generated[0]) < count);
  }
}

TEST_CASE("batched decoding: 3 different prompts together equal each decoded alone, token for token and logit for "
          "logit (fp64)") {
  const std::vector<ModelCase> cases = model_cases();
  for (const ModelCase& mc : {cases[1], cases[3], cases[4]}) {  // pbb b=5 w=2, swa W=4, full only
    CAPTURE(mc.name);
    const Transformer model = make_model(mc.config, 17);
    const int T = 9, count = 14;  // 23 positions: several pbb blocks and swa windows
    Rng rng{5, 0, 0};
    std::vector<std::vector<int32_t>> prompts(3, std::vector<int32_t>(T));
    for (std::vector<int32_t>& prompt : prompts)
      for (int32_t& id : prompt) id = int32_t(rng.below(kVocabValid));
    const GreedyRun together = greedy_together(model, prompts, count);
    for (size_t b = 0; b < prompts.size(); ++b) {
      CAPTURE(b);
      const GreedyRun alone = greedy_together(model, {prompts[b]}, count);
      CHECK(together.tokens[b] == alone.tokens[0]);
      double worst = 0;
      for (int i = 0; i < count; ++i)
        worst = std::max(worst, relative_error(together.logits[b][size_t(i)], alone.logits[0][size_t(i)]));
      CHECK(worst < 1e-10);
    }
    // Three different continuations: rows swapped anywhere in the batch would not match alone.
    CHECK(together.tokens[0] != together.tokens[1]);
    CHECK(together.tokens[0] != together.tokens[2]);
    CHECK(together.tokens[1] != together.tokens[2]);

    // generate() on the batch, and greedy_step() (the argmax read in the compute dtype), agree.
    Generator batched(model, T + count, kVocabValid, 3);
    Rng unused{1, 0, 0};
    CHECK(batched.generate(prompts, count, SamplingOptions{}, unused) == together.tokens);
    Generator stepped(model, T + count, kVocabValid, 3);
    std::vector<int32_t> next_B;
    for (const std::vector<double>& row : stepped.prefill(prompts)) next_B.push_back(argmax_valid(row));
    for (int i = 1; i < count; ++i) {
      next_B = stepped.greedy_step(next_B);
      for (size_t b = 0; b < prompts.size(); ++b) CHECK(next_B[b] == together.tokens[b][size_t(i)]);
    }
    CHECK(stepped.batch() == 3);
    CHECK(stepped.position() == T + count - 1);
    for (const LayerCacheInfo& info : stepped.caches())  // each sequence its own rows
      CHECK(info.bytes == 3 * size_t(info.slots) * mc.config.kv_heads() * mc.config.head_dim() * sizeof(double) * 2);

    // Prompts of two lengths cannot be decoded in lockstep; a step feeds every sequence.
    Generator refused(model, T + count, kVocabValid, 3);
    std::vector<std::vector<int32_t>> ragged = prompts;
    ragged[2].pop_back();
    CHECK_THROWS_WITH_AS(refused.prefill(ragged), doctest::Contains("prompts of 9 and 8 tokens in one batch"), Error);
    CHECK_THROWS_WITH_AS(refused.step(std::vector<int32_t>{1, 2}),
                         doctest::Contains("2 tokens fed to a batch of 3 sequences"), Error);
    CHECK_THROWS_WITH_AS(refused.step(1), doctest::Contains("1 tokens fed to a batch of 3 sequences"), Error);
  }
}

TEST_CASE("decoding in f32 tracks forward(), and the full cache refuses positions past max_len") {
  const ModelCase mc = model_cases().front();
  Transformer model(mc.config, 7);  // f32 parameters, as trained
  Generator generator(model, 12, kVocabValid);
  std::vector<int32_t> ids(12);
  for (int t = 0; t < 12; ++t) ids[size_t(t)] = int32_t(t * 5 % kVocabValid);
  std::vector<double> last;
  for (int32_t id : ids) last = generator.step(id);
  NoGradGuard no_grad;
  const std::vector<float> ref = model.forward(Tensor::from_vector(ids, {1, 12})).value().to_vector<float>();
  for (int v = 0; v < kVocabValid; ++v) CHECK(last[size_t(v)] == doctest::Approx(ref[size_t(11 * kVocab + v)]).epsilon(1e-4));
  // greedy_step reads the f32 logits as they are: the argmax of step()'s widened row.
  Generator greedy(model, 12, kVocabValid);
  for (size_t t = 0; t + 1 < ids.size(); ++t) greedy.greedy_step(std::span(&ids[t], 1));
  CHECK(greedy.greedy_step(std::span(&ids.back(), 1)) == std::vector<int32_t>{argmax_valid(last)});
  CHECK_THROWS_WITH_AS(generator.step(0), doctest::Contains("max_len"), Error);
  CHECK_THROWS_WITH_AS(generator.step(kVocabValid), doctest::Contains("outside the vocabulary"), Error);
}

TEST_CASE("sampling: greedy, temperature, top-k, top-p, deterministic per seed") {
  const std::vector<double> logits{1.0, 3.0, 2.0, 3.0, -1.0, 0.5};
  Rng unused{1, 0, 0};
  CHECK(sample_token(logits, SamplingOptions{}, unused) == 1);  // ties to the lower id
  auto draws = [&](const SamplingOptions& o, uint64_t seed, int n) {
    Rng rng{seed, 0, 0};
    std::vector<int32_t> out;
    for (int i = 0; i < n; ++i) out.push_back(sample_token(logits, o, rng));
    return out;
  };
  const SamplingOptions plain{1.0, 0, 1.0};
  CHECK(draws(plain, 5, 200) == draws(plain, 5, 200));
  CHECK(draws(plain, 5, 200) != draws(plain, 6, 200));
  // Frequencies follow softmax(logits / T).
  const int n = 20000;
  const std::vector<int32_t> many = draws({0.7, 0, 1.0}, 9, n);
  double z = 0;
  for (double l : logits) z += std::exp(l / 0.7);
  for (int v = 0; v < int(logits.size()); ++v) {
    const double expected = std::exp(logits[size_t(v)] / 0.7) / z;
    const double seen = double(std::count(many.begin(), many.end(), v)) / n;
    CHECK(std::abs(seen - expected) < 4 * std::sqrt(expected * (1 - expected) / n) + 1e-3);
  }
  for (int32_t id : draws({1.0, 2, 1.0}, 3, 500)) CHECK((id == 1 || id == 3));  // top-2
  for (int32_t id : draws({1.0, 0, 1e-6}, 3, 100)) CHECK(id == 1);                // nucleus of one
  // softmax(T=1): ids 1 and 3 hold 0.384 each, 2 holds 0.141: top_p 0.8 keeps exactly those three.
  const std::vector<int32_t> nucleus = draws({1.0, 0, 0.8}, 4, 2000);
  for (int32_t id : nucleus) CHECK((id == 1 || id == 2 || id == 3));
  CHECK(std::count(nucleus.begin(), nucleus.end(), 2) > 0);
  Rng rng{1, 0, 0};
  CHECK_THROWS_WITH_AS(sample_token(logits, {-1.0, 0, 1.0}, rng), doctest::Contains("--temperature"), Error);
  CHECK_THROWS_WITH_AS(sample_token(logits, {1.0, -2, 1.0}, rng), doctest::Contains("--top-k"), Error);
  CHECK_THROWS_WITH_AS(sample_token(logits, {1.0, 0, 0.0}, rng), doctest::Contains("--top-p"), Error);
}

TEST_CASE("hylo generate: greedy output from a hand-built checkpoint is deterministic and has the requested tokens") {
  const fs::path dir = fs::temp_directory_path() / ("hylo_test_generate_" + std::to_string(getpid()));
  fs::remove_all(dir);
  Config config;
  config.model = tiny({"pbb", 0, 8, 3}, "LG");
  config.model.vocab_size = 50304;  // GPT-2 ids, padded; 50257.. are never produced
  config.model.d_model = 32;
  config.model.n_layers = 4;
  config.model.init_std = 0.5;
  config.model.moe.experts = 4;
  config.model.moe.every = 2;
  config.model.moe.expert_hidden = 16;
  config.device = "cuda";  // trained on a GPU; --device cpu decodes it on the CPU
  validate(config);
  Transformer model(config.model, 99);
  test::write_model_checkpoint(dir.string(), config, model, 7);

  const std::string tokenizer = std::string(HYLO_SOURCE_DIR) + "/data/tokenizer/r50k_base.tiktoken";
  const std::string base = std::string(HYLO_BINARY_DIR) + "/hylo generate " + dir.string() +
                           " --prompt 'The quick brown fox' --tokenizer " + tokenizer + " --print-ids";
  const std::string on_cpu = base + " --device cpu";
  auto body = [](const std::string& output) {  // everything but the timing line
    return output.substr(0, output.rfind("ids: "));
  };
  auto ids_line = [](const std::string& output) {
    const size_t at = output.rfind("ids: ");
    return at == std::string::npos ? std::string() : output.substr(at, output.find('\n', at) - at);
  };
  const CommandResult a = run(on_cpu + " --max-new-tokens 12"), b = run(on_cpu + " --max-new-tokens 12");
  REQUIRE_MESSAGE(a.exit_code == 0, a.output);
  REQUIRE_MESSAGE(b.exit_code == 0, b.output);
  CHECK(a.output.find("| cpu, greedy") != std::string::npos);
  CHECK(a.output.find("The quick brown fox") != std::string::npos);
  CHECK(ids_line(a.output) == ids_line(b.output));
  CHECK(body(a.output) == body(b.output));
  std::istringstream ids(ids_line(a.output).substr(5));
  std::vector<int32_t> parsed;
  for (int32_t id; ids >> id;) parsed.push_back(id);
  CHECK(parsed.size() == 12);
  for (int32_t id : parsed) CHECK((id >= 0 && id < 50257));
  CHECK(a.output.find("12 new tokens") != std::string::npos);
  CHECK(a.output.find("pbb 2 x ") != std::string::npos);  // b = 8 slots per layer, f32
  CHECK(a.output.find("pbb 2 x " + std::to_string(2 * 8 * config.model.kv_heads() * config.model.head_dim() * 4) + " B") !=
        std::string::npos);

  // Sampling with a seed is reproducible, and a different seed (almost surely) differs.
  const std::string sampled = on_cpu + " --max-new-tokens 16 --temperature 1.0 --top-k 50 --top-p 0.95 --seed ";
  const CommandResult s1 = run(sampled + "1"), s2 = run(sampled + "1"), s3 = run(sampled + "2");
  REQUIRE_MESSAGE(s1.exit_code == 0, s1.output);
  CHECK(ids_line(s1.output) == ids_line(s2.output));
  CHECK(ids_line(s1.output) != ids_line(s3.output));

  const CommandResult bad = run(on_cpu + " --top-p 0");
  CHECK(bad.exit_code != 0);
  CHECK(bad.output.find("--top-p") != std::string::npos);
  const CommandResult bad_number = run(on_cpu + " --temperature warm");
  CHECK(bad_number.exit_code != 0);
  CHECK(bad_number.output.find("generate: --temperature needs a number, got 'warm'") != std::string::npos);
  // Near INT_MAX the prompt + new tokens do not wrap into a negative length: one line naming the limit.
  const CommandResult huge = run(on_cpu + " --max-new-tokens 2147483647");
  CHECK(huge.exit_code != 0);
  CHECK(huge.output.find("generate: 2147483651 positions (prompt + new tokens) exceed the longest sequence the caches "
                         "hold (2147483647)") != std::string::npos);
  const CommandResult bad_device = run(base + " --device tpu");
  CHECK(bad_device.exit_code != 0);
  CHECK(bad_device.output.find("generate: --device must be cpu or cuda, got 'tpu'") != std::string::npos);
#if !HYLO_WITH_CUDA
  // Without CUDA the config's device falls back to the CPU, saying so; asking for cuda fails.
  const CommandResult fallback = run(base + " --max-new-tokens 12");
  REQUIRE_MESSAGE(fallback.exit_code == 0, fallback.output);
  CHECK(fallback.output.find("built without CUDA, so it decodes on the CPU") != std::string::npos);
  CHECK(ids_line(fallback.output) == ids_line(a.output));
  const CommandResult no_cuda = run(base + " --device cuda");
  CHECK(no_cuda.exit_code != 0);
  CHECK(no_cuda.output.find("built without CUDA") != std::string::npos);
#endif
  fs::remove_all(dir);
}

TEST_CASE("hylo bench generate: one JSON row per config x batch x prompt with the decode rate and the KV bytes, and bad "
          "flags named") {
  const fs::path dir = fs::temp_directory_path() / ("hylo_test_bench_generate_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string json = (dir / "generate.json").string();
  const std::string hylo = std::string(HYLO_BINARY_DIR) + "/hylo bench generate";
  const std::string tiny = std::string(HYLO_SOURCE_DIR) + "/configs/tiny.yaml";
  const CommandResult ok = run(hylo + " --config " + tiny +
                               " --batch 1,2 --prompt 8 --new-tokens 4 --repeat 3 --device cpu --json " + json);
  REQUIRE_MESSAGE(ok.exit_code == 0, ok.output);
  CHECK(ok.output.find("decode tok/s") != std::string::npos);
  const nlohmann::json written = nlohmann::json::parse(read_file(json).value());
  CHECK(written["bench"] == "generate");
  CHECK(written["device"] == "cpu");
  CHECK(written["settings"]["new_tokens"] == 4);
  CHECK(written["settings"]["repeat"] == 3);
  REQUIRE(written["rows"].size() == 2);
  // tiny: layers LLLG, pbb b = 64, 4 kv heads of 8, f32: three 64-slot caches (72 rows each, see
  // kv_row_stride) and a full cache of prompt + new tokens = 12 slots, k and v, per sequence.
  const size_t kv_per_sequence = (3 * size_t(kv_row_stride(64)) + size_t(kv_row_stride(12))) * 4 * 8 * 4 * 2;
  for (int B = 1; B <= 2; ++B) {
    const nlohmann::json& row = written["rows"][size_t(B - 1)];
    CAPTURE(row.dump());
    CHECK(row["config"] == "tiny");
    CHECK(row["device"] == "cpu");
    CHECK(row["batch"] == B);
    CHECK(row["prompt"] == 8);
    CHECK(row["new_tokens"] == 4);
    CHECK(row["prefill_s"].get<double>() >= 0);
    const double decode_s = row["decode_s"].get<double>();
    REQUIRE(decode_s > 0);
    // decode_s is written to 4 decimals, decode_tok_s to 1 and ms_per_step to 3: one true decode
    // time must lie within the half-unit of each (a fixed tolerance failed either on a fast CPU,
    // where 4 decimals of seconds are coarse, or under ASan, where 1 decimal of tokens/s is).
    const double tok_s = row["decode_tok_s"].get<double>(), ms = row["ms_per_step"].get<double>();
    const double lo = std::max({decode_s - 0.5e-4, B * 4 / (tok_s + 0.05), 4 * (ms - 0.5e-3) / 1e3}),
                 hi = std::min({decode_s + 0.5e-4, B * 4 / (tok_s - 0.05), 4 * (ms + 0.5e-3) / 1e3});
    CHECK(lo <= hi * (1 + 1e-12));
    CHECK(row["kv_bytes"] == B * kv_per_sequence);
    // The median of three runs, between the slowest and the fastest.
    CHECK(row["runs"] == 3);
    CHECK(row["decode_tok_s_min"].get<double>() <= tok_s);
    CHECK(tok_s <= row["decode_tok_s_max"].get<double>());
  }
  for (const auto& [flags, message] : {
           std::pair{" --config " + tiny + " --batch 1,0", "bench generate: --batch needs a positive integer, got '0'"},
           std::pair{" --config " + tiny + " --prompt 8,x", "bench generate: --prompt needs a number, got 'x'"},
           std::pair{" --config " + tiny + " --new-tokens 0",
                     "bench generate: --new-tokens needs a positive integer, got '0'"},
           std::pair{" --config " + tiny + " --device tpu", "bench generate: --device must be cpu or cuda, got 'tpu'"},
           std::pair{" --config " + tiny + " --repeat 0", "bench generate: --repeat needs a positive integer, got '0'"},
           std::pair{std::string(" --batch 1"), "bench generate: --config is required"},
       }) {
    CAPTURE(flags);
    const CommandResult bad = run(hylo + flags);
    CHECK(bad.exit_code == 2);
    CHECK(bad.output == "hylo: error: " + std::string(message) + "\n");
  }
  fs::remove_all(dir);
}

TEST_CASE("greedy_tokens: first index of the row's largest valid value, NaN skipped, in every CPU dtype") {
  const double nan = std::nan(""), inf = INFINITY;
  // (B 5, V 6), 5 valid ids: the 6th column is padding and holds the largest value of every row.
  const std::vector<double> logits = {
      1, 3, 2, 3, 0, 9,          // tie of two 3s: the first
      nan, -1, -2, -1, -3, 9,    // NaN first is skipped (not "the first value wins")
      -inf, -inf, -inf, -inf, -inf, 9,  // all -inf: index 0
      nan, nan, nan, nan, nan, 9,       // all NaN: 0
      -5, -4, nan, -4.5, 7, 9,          // the last valid id
  };
  const std::vector<int32_t> expected = {1, 1, 0, 0, 4};
  const Tensor f64 = Tensor::from_vector(logits, {5, 6});
  CHECK(greedy_tokens(f64, 5) == expected);
  CHECK(greedy_tokens(f64.to(DType::f32), 5) == expected);
  CHECK(greedy_tokens(f64.to(DType::bf16), 5) == expected);
  CHECK(greedy_tokens(f64, 6) == std::vector<int32_t>{5, 5, 5, 5, 5});  // padding counted when declared valid
  CHECK_THROWS_WITH_AS(greedy_tokens(f64, 7), doctest::Contains("greedy_tokens"), Error);
  CHECK_THROWS_WITH_AS(greedy_tokens(f64, 0), doctest::Contains("greedy_tokens"), Error);
}
