// hylo: pretraining hybrid local/global attention language models.
#include <cstdio>
#include <map>

#include "cli/commands.h"
#include "core/error.h"
#include "parallel/communicator.h"

namespace {

constexpr const char* kUsage = R"(usage: hylo COMMAND [ARGS]
  train CONFIG [--set key=value]... [--run-dir DIR] [--resume auto|PATH] [--overwrite]
        [--device cpu|cuda] [--stop-at STEP]
  eval RUN_DIR_OR_CHECKPOINT [--tasks val,retrieval,lastword (default val)] [--json PATH]
        [--n 64 (retrieval sequences per distance; last-word passages)]
        [--tokenizer data/tokenizer/r50k_base.tiktoken] [--set key=value]...
  params CONFIG [--ranks N (default: what the expert parallelism needs)] [--set key=value]...
  generate RUN_DIR_OR_CHECKPOINT --prompt TEXT [--max-new-tokens 64] [--temperature 0 (greedy)]
        [--top-k K] [--top-p P] [--seed S] [--tokenizer data/tokenizer/r50k_base.tiktoken] [--print-ids]
        [--device cpu|cuda (default: the config's)] [--set key=value]...
  export RUN_DIR_OR_CHECKPOINT --out DIR [--dtype f32|bf16] [--overwrite] [--set key=value]...
        (model.safetensors + config.json with a probe for checking a reimplementation)
  data prepare|encode|decode|inspect|bench ...
  sweep FILE [--local (the default: run here) | --slurm] [--out runs/sweeps] [--dry-run] [--set key=value]...
  report SWEEP_DIR [SWEEP_DIR... --out DIR] [--baseline TEXT]   (markdown table of final metrics -> SWEEP_DIR/report.md,
        loss.png; several directories, e.g. one per seed: one table, seeds paired, into DIR; paired against the
        first point, or the one whose values contain TEXT)
  bench attention [--kind pbb|swa|full ...]
  bench decode [--batch 16,64 --hd 64,128 --block 512 --bridge 128 --window 512 ...]
  bench train CONFIG [--steps N] [--warmup N] [--set key=value]... [--json PATH]
        [--expert-gemm grouped|loop (CUDA MoE: the expert GEMMs' path)]
  bench moe [--shapes 8e,64e,2b] [--paths grouped,loop] [--tokens 32768] [--iters N] [--warmup N]
        [--json PATH]
)";

int run_bench(const hylo::Args& args) {
  HYLO_CHECK(!args.empty(), "bench: expected a benchmark name (attention, train, decode or moe)");
  hylo::Args rest(args.begin() + 1, args.end());
  if (args[0] == "attention") return hylo::run_bench_attention(rest);
  if (args[0] == "train") return hylo::run_bench_train(rest);
  if (args[0] == "decode") return hylo::run_bench_decode(rest);
  if (args[0] == "moe") return hylo::run_bench_moe(rest);
  HYLO_FAIL("bench: unknown benchmark '{}' (expected attention, train, decode or moe)", args[0]);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::map<std::string, int (*)(const hylo::Args&)> commands{
      {"train", hylo::run_train_command}, {"eval", hylo::run_eval_command},         {"params", hylo::run_params_command},
      {"data", hylo::run_data_command},   {"generate", hylo::run_generate_command}, {"bench", run_bench},
      {"sweep", hylo::run_sweep_command}, {"report", hylo::run_report_command}, {"export", hylo::run_export_command},
  };
  const std::string name = argv[1];
  const hylo::Args args(argv + 2, argv + argc);
  try {
    auto it = commands.find(name);
    HYLO_CHECK(it != commands.end(), "unknown command '{}' (run hylo --help)", name);
    return it->second(args);
  } catch (const std::exception& e) {  // hylo::Error and the rest
    std::fprintf(stderr, "hylo: error: %s\n", e.what());
    std::fflush(stderr);
    hylo::dist::abort_job(1);  // the other ranks of a parallel job would wait for this one forever
    return 1;
  }
}
