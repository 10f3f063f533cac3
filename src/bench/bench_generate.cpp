// `hylo bench generate --config YAML... [--batch 1,16,64] [--prompt 512,4096] [--new-tokens 128]
// [--repeat 1] [--device cpu|cuda] [--json PATH]`: whole-model greedy decoding through nn/generate.h, the path
// `hylo generate` takes, with B sequences in lockstep. Per config x batch x prompt length: B random
// prompts (a fixed seed: the same for every config) are prefilled by one forward over them
// (Generator::prefill), then `new_tokens` greedy steps each feed
// every sequence its token and pick the next from the logits (Generator::greedy_step);
// decode tokens/s = B * new_tokens / decode seconds. The weights are the config's random
// initialisation (train.seed): the arithmetic, and so the speed, do not depend on training. On
// CUDA the stream is drained before every clock read. With --repeat N each setting runs N times and
// the row is the run of median decode time, the range beside it. scripts/hf_generate_peer.py times
// transformers' generate on the same settings into rows of the same fields.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <limits>

#include "bench/bench.h"
#include "bench/bench_table.h"
#include "config/config.h"
#include "core/error.h"
#include "core/rng.h"
#include "data/tokenizer.h"
#include "nn/generate.h"
#include "ops/decode.h"

#if HYLO_WITH_CUDA
#include "core/cuda/tensor_kernels.h"
#endif

namespace hylo {

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kPromptSeed = 20260038;

struct BenchModel {
  std::string name;  // the config file's stem
  const Transformer& model;
  Device device;
  int vocab_valid;
};

// Waits until the device has run everything queued, so that a clock read after it covers that work.
void drain([[maybe_unused]] Device device) {
#if HYLO_WITH_CUDA
  if (device == Device::cuda) cuda::synchronize();
#endif
}

double seconds(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// The first tokens, from prefill's host rows (each row's first_argmax, as greedy_step picks).
std::vector<int32_t> first_tokens(const std::vector<std::vector<double>>& logits_B) {
  std::vector<int32_t> tokens;
  for (const std::vector<double>& row : logits_B) tokens.push_back(first_argmax(row.data(), int(row.size())));
  return tokens;
}

// One setting: B prompts of T tokens prefilled, then new_tokens greedy steps.
nlohmann::json bench_one(const BenchModel& m, int B, int T, int new_tokens) {
  Rng rng{kPromptSeed, 0, 0};
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(B), std::vector<int32_t>(static_cast<size_t>(T)));
  for (std::vector<int32_t>& prompt : prompts)
    for (int32_t& id : prompt) id = int32_t(rng.below(uint64_t(m.vocab_valid)));
  Generator generator(m.model, int64_t(T) + new_tokens, m.vocab_valid, B);
  drain(m.device);
  const auto start = Clock::now();
  std::vector<int32_t> tokens = first_tokens(generator.prefill(prompts));
  drain(m.device);
  const auto prefilled = Clock::now();
  for (int i = 0; i < new_tokens; ++i) tokens = generator.greedy_step(tokens);
  drain(m.device);
  const double prefill_s = seconds(start, prefilled), decode_s = seconds(prefilled, Clock::now());
  size_t kv_bytes = 0;
  for (const LayerCacheInfo& cache : generator.caches()) kv_bytes += cache.bytes;
  return {{"config", m.name},
          {"device", device_name(m.device)},
          {"batch", B},
          {"prompt", T},
          {"new_tokens", new_tokens},
          {"prefill_s", prefill_s},
          {"decode_s", decode_s},
          {"decode_tok_s", double(B) * new_tokens / decode_s},
          {"ms_per_step", 1e3 * decode_s / new_tokens},
          {"kv_bytes", kv_bytes},
          {"kv", fmt::format("{:.1f}MiB", double(kv_bytes) / (1 << 20))}};
}

// The run of median decode time among `runs` of one setting, with the slowest and fastest decode
// rates beside it: one run at batch 1 is ~0.15 s of host-bound steps, which the machine's noise moves.
nlohmann::json median_run(std::vector<nlohmann::json> runs) {
  std::sort(runs.begin(), runs.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
    return a["decode_s"].get<double>() < b["decode_s"].get<double>();
  });
  nlohmann::json row = runs[runs.size() / 2];
  row["runs"] = runs.size();
  row["decode_tok_s_min"] = runs.back()["decode_tok_s"];
  row["decode_tok_s_max"] = runs.front()["decode_tok_s"];
  return row;
}

const std::vector<bench::Column> kColumns = {
    {"config", "config", 12, -1, true, true},
    {"device", "", 0},
    {"batch", "batch", 5},
    {"prompt", "prompt", 6},
    {"new_tokens", "new", 4},
    {"prefill_s", "prefill s", 9, 4, true, false, true},
    {"decode_s", "", 0, 4},
    {"decode_tok_s", "decode tok/s", 12, 1},
    {"decode_tok_s_min", "", 0, 1},
    {"decode_tok_s_max", "", 0, 1},
    {"runs", "", 0},
    {"ms_per_step", "ms/step", 8, 3},
    {"kv_bytes", "", 0},
    {"kv", "KV", 10, -1, false},
};

}  // namespace

int run_bench_generate(const GenerateBenchOptions& o) {
  const char* command = "bench generate";
  HYLO_CHECK(!o.configs.empty(), "{}: --config names no config", command);
  for (int T : o.prompts)
    HYLO_CHECK(int64_t(T) + o.new_tokens <= std::numeric_limits<int32_t>::max(),
               "{}: --prompt {} + --new-tokens {} positions exceed the longest sequence the caches hold ({})", command,
               T, o.new_tokens, std::numeric_limits<int32_t>::max());
  // Every config is read and its device checked before the first is timed.
  const std::vector<std::string> overrides =
      o.device.empty() ? std::vector<std::string>{} : std::vector<std::string>{"device=" + o.device};
  std::vector<Config> configs;
  std::vector<Device> devices;
  std::string device_names;  // the distinct ones, for the JSON's head
  for (const std::string& path : o.configs) {
    configs.push_back(load_config(path, overrides));
    devices.push_back(training_device(configs.back()));
    const std::string name(device_name(devices.back()));
    if (device_names.find(name) == std::string::npos) device_names += (device_names.empty() ? "" : ",") + name;
  }

  std::printf("greedy decoding, random-initialised weights, %d new tokens; prefill: one forward over the prompts\n",
              o.new_tokens);
  bench::Table table(kColumns);
  table.print_header();
  // Written after every row: a run stopped at a time limit keeps what it measured.
  const auto save = [&] {
    if (o.json.empty()) return;
    table.write_json(o.json, "generate", device_names,
                     {{"configs", o.configs},
                      {"batches", o.batches},
                      {"prompts", o.prompts},
                      {"new_tokens", o.new_tokens},
                      {"repeat", o.repeat},
                      {"weights", "random initialisation (train.seed); bf16 on cuda, f32 on cpu"},
                      {"prompt_ids", "uniform over the tokenizer's ids, one fixed seed"},
                      {"prefill", "one forward over the prompts, its k/v written into the caches"},
                      {"decode", "new_tokens steps, each feeding every sequence its greedy token, picked on the device "
                                 "(greedy_tokens: only B ids reach the host); decode_tok_s = batch * new_tokens / decode_s"},
                      {"timing", "wall clock, the device drained before each read; each setting run `repeat` times "
                                 "(fresh caches each), the row the run of median decode time, decode_tok_s_min/max "
                                 "the slowest and fastest"}});
  };
  for (size_t i = 0; i < configs.size(); ++i) {
    Transformer model(configs[i].model, configs[i].train.seed);
    for (Parameter& p : model.parameters()) place_parameter(p, devices[i]);
    const BenchModel m{std::filesystem::path(o.configs[i]).stem().string(), model, devices[i],
                       std::min(configs[i].model.vocab_size, data::kR50kTokens)};  // the rest is padding
    for (int B : o.batches) {
      // Untimed: the first steps of a batch size pay for GEMM algorithm choices and first allocations.
      bench_one(m, B, 1, 1);
      for (int T : o.prompts) {
        std::vector<nlohmann::json> runs;
        for (int r = 0; r < o.repeat; ++r) runs.push_back(bench_one(m, B, T, o.new_tokens));
        table.add(median_run(std::move(runs)));
        save();
      }
    }
  }
  return 0;
}

}  // namespace hylo
