// The benchmark programs: `hylo bench attention|decode|train|moe|generate` and `hylo data
// bench`. Each takes its options as the command line filled them in (cli/bench_commands.cpp,
// cli/data_commands.cpp), prints a table as it measures and, given a path, writes the rows as
// JSON (bench/bench_table.h). Bad options fail before any device is needed, with one line
// naming the command and the flag. Each returns the process exit code.
#pragma once
#include <string>
#include <vector>

#include "data/prepare.h"

namespace hylo {

// The masks' sizes and the heads that the attention and decode benches share.
struct MaskBenchOptions {
  int block = 512, bridge = 128;  // pbb
  int window = 512;               // swa
  int H = 16;
  int Hkv = 0;  // 0: H (MHA)
  int iters = 0, warmup = 0;
  std::string json;  // where the rows go; empty: nowhere

  int kv_heads() const { return Hkv > 0 ? Hkv : H; }
};

// Throws "COMMAND: --H 16 is not a multiple of --Hkv 3" and the like.
void check_mask_options(const MaskBenchOptions& o, const std::string& command);

struct AttentionBenchOptions : MaskBenchOptions {
  AttentionBenchOptions() { iters = 0, warmup = 3; }  // iters 0: triton do_bench's time-based method
  std::vector<std::string> kinds{"pbb"};                // pbb | swa | full
  std::vector<int> Ts{4096}, hds{128};
  int B = 4;
};
int run_bench_attention(const AttentionBenchOptions& options);

struct DecodeBenchOptions : MaskBenchOptions {
  DecodeBenchOptions() { iters = 10, warmup = 2; }
  std::vector<int> batches{16, 64}, hds{64, 128};
};
int run_bench_decode(const DecodeBenchOptions& options);

// 8e: configs/moe-8e-pbb.yaml; 64e: 64 fine-grained experts at d 1024 (same active FLOPs as 8e);
// 2b: configs/moe-2b-pbb.yaml's routed experts.
inline const std::vector<std::string> kMoeBenchShapes{"8e", "64e", "2b"};
inline const std::vector<std::string> kMoeBenchPaths{"grouped", "loop"};

struct MoeBenchOptions {
  std::vector<std::string> shapes = kMoeBenchShapes;
  std::vector<std::string> paths = kMoeBenchPaths;
  int tokens = 16 * 2048;
  int iters = 20, warmup = 3;
  std::string json;
};
int run_bench_moe(const MoeBenchOptions& options);

struct TrainBenchOptions {
  std::string config;
  std::vector<std::string> overrides;  // --set
  int steps = 10, warmup = 3;
  std::string json;
  std::string expert_gemm;  // grouped | loop; empty: the build's default
};
int run_bench_train(const TrainBenchOptions& options);

// Whole-model greedy decoding (nn/generate.h) of random-initialised models, per config x batch x
// prompt length: prefill seconds, decode tokens/s, ms per step, KV cache bytes.
struct GenerateBenchOptions {
  std::vector<std::string> configs;
  std::vector<int> batches{1, 16, 64}, prompts{512, 4096};
  int new_tokens = 128;
  int repeat = 1;      // runs of each setting; the row is the one of median decode time
  std::string device;  // cpu | cuda; empty: each config's
  std::string json;
};
int run_bench_generate(const GenerateBenchOptions& options);

// Tokenizer throughput on the prepared corpus's raw documents: one thread, then `threads`.
struct TokenizerBenchOptions {
  std::string sources = "core", raw_dir = "data/raw", tokenizer = data::kDefaultTokenizerPath;
  int threads = 0;  // 0: every hardware thread
  int repeat = 3;   // best of: the machine is shared, noise only adds time
  std::string json;
};
int run_bench_tokenizer(const TokenizerBenchOptions& options);

}  // namespace hylo
