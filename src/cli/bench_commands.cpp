// `hylo bench attention|decode|train|moe|generate`: their flags; the programs are bench/bench.h's.
#include <memory>

#include "bench/bench.h"
#include "cli/commands.h"
#include "cli/options.h"

namespace hylo {

namespace {

// The masks' sizes and heads, the timing and the JSON path, as attention and decode share them.
void add_mask_options(CLI::App* cmd, MaskBenchOptions& o) {
  cli::add_positive(cmd, "--block", o.block, "pbb block b");
  cli::add_positive(cmd, "--bridge", o.bridge, "pbb bridge w (at most the block)");
  cli::add_positive(cmd, "--window", o.window, "swa window W");
  cli::add_positive(cmd, "--H", o.H, "query heads");
  cli::add_number(cmd, "--Hkv", o.Hkv, "key/value heads, a divisor of --H; 0: --H (MHA)");
  cli::add_number(cmd, "--warmup", o.warmup, "untimed calls first");
  cmd->add_option("--json", o.json, "also write the rows here (bench/bench_table.h's layout)");
}

void add_attention(CLI::App& group) {
  auto o = std::make_shared<AttentionBenchOptions>();
  CLI::App* cmd = cli::add_command(group, "attention", "attention forward and backward kernels by mask (CUDA)");
  cli::add_choice_list(cmd, "--kind", o->kinds, {"pbb", "swa", "full"}, "masks");
  cli::add_positive_list(cmd, "--T", o->Ts, "sequence lengths");
  cli::add_positive_list(cmd, "--hd", o->hds, "head dims");
  cli::add_positive(cmd, "--B", o->B, "batch");
  add_mask_options(cmd, *o);
  cli::add_number(cmd, "--iters", o->iters, "timed calls; 0: triton do_bench's method (~250 ms of calls, L2 flushed)");
  cli::run_with(cmd, [o] { return run_bench_attention(*o); });
}

void add_decode(CLI::App& group) {
  auto o = std::make_shared<DecodeBenchOptions>();
  CLI::App* cmd = cli::add_command(group, "decode", "one decode step's attention: pbb, swa ring, linear swa (CUDA)");
  cli::add_positive_list(cmd, "--batch", o->batches, "batch sizes");
  cli::add_positive_list(cmd, "--hd", o->hds, "head dims (64, 128)");
  add_mask_options(cmd, *o);
  cli::add_positive(cmd, "--iters", o->iters, "timed steps per setting (median)");
  cli::run_with(cmd, [o] { return run_bench_decode(*o); });
}

void add_train(CLI::App& group) {
  auto o = std::make_shared<TrainBenchOptions>();
  CLI::App* cmd = cli::add_command(group, "train", "whole training steps on synthetic tokens: step time, tokens/s, MFU");
  cmd->add_option("CONFIG", o->config, "the config file")->required();
  cli::add_positive(cmd, "--steps", o->steps, "timed steps (median)");
  cli::add_number(cmd, "--warmup", o->warmup, "untimed steps first");
  cli::add_overrides(cmd, o->overrides);
  cmd->add_option("--json", o->json, "also write the row here (bench/bench_table.h's layout)");
  cli::add_choice(cmd, "--expert-gemm", o->expert_gemm, {"grouped", "loop"},
                  "how CUDA MoE layers issue their expert GEMMs (default: the build's)");
  cli::run_with(cmd, [o] { return run_bench_train(*o); });
}

void add_moe(CLI::App& group) {
  auto o = std::make_shared<MoeBenchOptions>();
  CLI::App* cmd = cli::add_command(group, "moe", "one MoE layer's expert GEMMs, grouped against one dense GEMM (CUDA)");
  cli::add_choice_list(cmd, "--shapes", o->shapes, kMoeBenchShapes, "layer shapes");
  cli::add_choice_list(cmd, "--paths", o->paths, kMoeBenchPaths, "grouped-GEMM issue paths");
  cli::add_positive(cmd, "--tokens", o->tokens, "tokens routed (top-k each)");
  cli::add_positive(cmd, "--iters", o->iters, "timed calls (median)");
  cli::add_positive(cmd, "--warmup", o->warmup, "untimed calls first");
  cmd->add_option("--json", o->json, "also write the rows here (bench/bench_table.h's layout)");
  cli::run_with(cmd, [o] { return run_bench_moe(*o); });
}

void add_generate(CLI::App& group) {
  auto o = std::make_shared<GenerateBenchOptions>();
  CLI::App* cmd =
      cli::add_command(group, "generate", "whole-model greedy decoding: prefill time, decode tokens/s, KV bytes");
  cmd->add_option("--config", o->configs, "model configs, one or more (random-initialised weights)")->required();
  cli::add_positive_list(cmd, "--batch", o->batches, "batch sizes (sequences decoded together)");
  cli::add_positive_list(cmd, "--prompt", o->prompts, "prompt lengths");
  cli::add_positive(cmd, "--new-tokens", o->new_tokens, "greedy decode steps after the prompt");
  cli::add_positive(cmd, "--repeat", o->repeat, "runs of each setting: the row is the median, with the range");
  cli::add_choice(cmd, "--device", o->device, {"cpu", "cuda"}, "where to decode (default: each config's)");
  cmd->add_option("--json", o->json, "also write the rows here (bench/bench_table.h's layout)");
  cli::run_with(cmd, [o] { return run_bench_generate(*o); });
}

}  // namespace

void add_bench_command(CLI::App& app) {
  CLI::App* group = cli::add_command(app, "bench", "benchmarks: attention, decode, train, moe, generate");
  cli::require_command(group);
  add_attention(*group);
  add_decode(*group);
  add_train(*group);
  add_moe(*group);
  add_generate(*group);
}

}  // namespace hylo
