// `hylo generate`: load a checkpoint as `hylo eval` does, decode a prompt with KV caches
// (nn/generate.h) on the CPU or on CUDA, print the prompt and its continuation and a one-line
// summary.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <map>
#include <optional>

#include "cli/commands.h"
#include "cli/options.h"
#include "data/tokenizer.h"
#include "nn/generate.h"
#include "config/config.h"
#include "checkpoint/model_checkpoint.h"

namespace hylo {

namespace {

struct GenerateOptions {
  std::string path, prompt, tokenizer = "data/tokenizer/r50k_base.tiktoken";
  std::string device;  // cpu | cuda; empty: the config's device (the CPU in a build without CUDA)
  int max_new_tokens = 64;
  SamplingOptions sampling;
  uint64_t seed = 0;
  bool print_ids = false;
  std::vector<std::string> overrides;
};

int run_generate(GenerateOptions o) {
  HYLO_CHECK(o.max_new_tokens >= 0, "--max-new-tokens must be >= 0, got {}", o.max_new_tokens);
  check_sampling_options(o.sampling);
  if (!o.device.empty()) o.overrides.push_back("device=" + o.device);
  std::optional<Device> device;  // unset: the config's own device, checked against this build
#if !HYLO_WITH_CUDA
  if (o.device.empty()) device = Device::cpu;
#endif
  LoadedModel loaded = load_model_checkpoint(o.path, o.overrides, device);
  const Config& config = loaded.config;
  Transformer& model = *loaded.model;
  const Device decode_device = model.parameters().front().var.value().device();
  if (config.device == "cuda" && decode_device == Device::cpu)
    fmt::print(stderr, "note: the config trains on cuda; this hylo was built without CUDA, so it decodes on the CPU\n");

  const data::Tokenizer tokenizer = data::Tokenizer::from_tiktoken(o.tokenizer);
  const int vocab_valid = std::min(tokenizer.vocab_size(), config.model.vocab_size);
  std::vector<int32_t> prompt = tokenizer.encode(o.prompt);
  // GPT-2's convention for an unconditional sample: start from the document boundary.
  if (prompt.empty()) prompt.push_back(tokenizer.end_of_text_id());
  for (int32_t id : prompt)
    HYLO_CHECK(id < vocab_valid, "generate: prompt token {} is outside the model's vocabulary of {}", id, vocab_valid);

  // In int64_t: near INT_MAX the int sum would wrap negative; the generator names the limit.
  Generator generator(model, int64_t(prompt.size()) + std::max(1, o.max_new_tokens), vocab_valid);
  Rng rng{o.seed, 0, 0};
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  std::vector<double> logits = generator.prefill(prompt);
  const auto t1 = Clock::now();
  std::vector<int32_t> out;
  for (int i = 0; i < o.max_new_tokens; ++i) {
    out.push_back(sample_token(logits, o.sampling, rng));
    if (i + 1 < o.max_new_tokens) logits = generator.step(out.back());
  }
  const auto t2 = Clock::now();

  fmt::print("{}{}\n", o.prompt, tokenizer.decode(out));
  if (o.print_ids) fmt::print("ids: {}\n", fmt::join(out, " "));

  // KV bytes per layer kind: what the cache design allocates (the PBB claim is b slots per layer).
  std::map<std::string, std::pair<int, size_t>> by_kind;  // kind -> (layers, bytes per layer)
  for (const LayerCacheInfo& c : generator.caches()) {
    auto& entry = by_kind[cache_kind_name(c.kind)];
    ++entry.first;
    entry.second = c.bytes;
  }
  std::string kv;
  for (const auto& [kind, entry] : by_kind)
    kv += fmt::format("{}{} {} x {} B", kv.empty() ? "" : ", ", kind, entry.first, entry.second);
  const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
  const double decode_s = std::chrono::duration<double>(t2 - t1).count();
  fmt::print("{} (step {}): prompt {} tokens in {:.3f} s | {} new tokens in {:.3f} s ({:.1f} tokens/s) | KV per layer: "
             "{} | {}, {}\n",
             loaded.path, loaded.step, prompt.size(), prefill_s, out.size(), decode_s,
             decode_s > 0 ? double(out.size()) / decode_s : 0.0, kv, device_name(decode_device),
             o.sampling.temperature == 0 ? std::string("greedy")
                                         : fmt::format("T={} top_k={} top_p={} seed={}", o.sampling.temperature,
                                                       o.sampling.top_k, o.sampling.top_p, o.seed));
  return 0;
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = cli::add_command(app, "generate", "continue a prompt from a checkpoint, with KV caches");
  cmd->add_option("RUN_DIR_OR_CHECKPOINT", o->path, "a run directory or a checkpoint .h5")->required();
  cmd->add_option("--prompt", o->prompt, "the text to continue (empty: from the document boundary)")->required();
  cli::add_number(cmd, "--max-new-tokens", o->max_new_tokens, "tokens to generate");
  cli::add_number(cmd, "--temperature", o->sampling.temperature, "0: greedy");
  cli::add_number(cmd, "--top-k", o->sampling.top_k, "keep the k most likely tokens; 0: all");
  cli::add_number(cmd, "--top-p", o->sampling.top_p, "then the smallest most-likely set of this probability; 1: all");
  cli::add_number(cmd, "--seed", o->seed, "of the sampling");
  cmd->add_option("--tokenizer", o->tokenizer, "a .tiktoken file");
  cmd->add_flag("--print-ids", o->print_ids, "also print the new token ids");
  cli::add_choice(cmd, "--device", o->device, {"cpu", "cuda"}, "where to decode (default: the config's)");
  cli::add_overrides(cmd, o->overrides);
  cli::run_with(cmd, [o] { return run_generate(*o); });
}

}  // namespace hylo
