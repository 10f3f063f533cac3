// `hylo train`, `hylo params`.
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "nn/flops.h"
#include "checkpoint/model_checkpoint.h"
#include "train/trainer.h"

namespace hylo {

void add_train_command(CLI::App& app) {
  auto o = std::make_shared<TrainOptions>();
  auto device = std::make_shared<std::string>();
  CLI::App* cmd = cli::add_command(app, "train", "train a model from a config (under mpirun: data parallel, one process per device)");
  cmd->add_option("CONFIG", o->config_path, "the config file (e.g. configs/tiny.yaml)")->required();
  cli::add_overrides(cmd, o->overrides);
  cmd->add_option("--run-dir", o->run_dir, "the run directory (default runs/<config file stem>)");
  cmd->add_option("--resume", o->resume, "auto (the newest valid checkpoint, if any) or a checkpoint path");
  cmd->add_flag("--overwrite", o->overwrite, "replace a run directory that holds another config");
  cli::add_choice(cmd, "--device", *device, {"cpu", "cuda"}, "as --set device=...");
  cli::add_positive(cmd, "--stop-at", o->stop_at, "exit after this step, as a preempted job would (the schedule is unchanged)");
  cli::run_with(cmd, [o, device] {
    if (!device->empty()) o->overrides.push_back("device=" + *device);
    return run_train(*o);
  });
}

namespace {

struct ParamsOptions {
  std::string config_path;
  std::vector<std::string> overrides;
  int ranks = 0;  // 0: as many as the expert parallelism needs
};


int run_params(const ParamsOptions& o) {
  const std::string& config_path = o.config_path;
  int ranks = o.ranks;
  Config config = load_config(config_path, o.overrides);
  const int P = config.train.expert_parallel;
  if (ranks == 0) ranks = P;
  HYLO_CHECK(ranks % P == 0, "params: --ranks {} is not a multiple of train.expert_parallel={}", ranks, P);
  fmt::print("{:<12} {:>14} {:>10} {:>14} {:>10}\n", "component", "stored", "", "active", "");
  const auto print_row = [](const ParamCount& row) {
    fmt::print("{:<12} {:>14} {:>9.2f}M {:>14} {:>9.2f}M\n", row.component, row.stored, row.stored / 1e6, row.active,
               row.active / 1e6);
  };
  const std::vector<ParamCount> rows = count_parameters(config.model);
  for (const ParamCount& row : rows) print_row(row);
  // The figure papers quote: everything but the (tied) token embedding.
  const ParamCount& embedding = rows.front();
  print_row({"non-embed", rows.back().stored - embedding.stored, rows.back().active - embedding.active});
  if (ranks > 1) {
    const int64_t per_rank = parameters_per_rank(config.model, P);
    const bool zero1 = config.train.zero1;
    fmt::print("per rank ({} ranks{}{}): {} stored ({:.2f}M); on CUDA {:.2f} GiB of weights, gradients and AdamW state\n",
               ranks, P > 1 ? fmt::format(" with train.expert_parallel={}", P) : "", zero1 ? " under ZeRO-1" : "",
               per_rank, per_rank / 1e6,
               training_state_bytes_per_rank(config.model, ranks, P, zero1) / double(1ull << 30));
  }
  const double flops = train_flops_per_token(config.model, config.train.seq_len);
  fmt::print("training FLOPs per token at seq_len {}: {:.4g} (6 x matmul params + 12 x H x hd x mean visited keys "
             "per layer)\n",
             config.train.seq_len, flops);
  return 0;
}

}  // namespace

void add_params_command(CLI::App& app) {
  auto o = std::make_shared<ParamsOptions>();
  CLI::App* cmd = cli::add_command(app, "params", "stored and active parameters by component, FLOPs per token");
  cmd->add_option("CONFIG", o->config_path, "the config file")->required();
  cli::add_positive(cmd, "--ranks", o->ranks, "also each rank's share on this many ranks (default: what train.expert_parallel needs)");
  cli::add_overrides(cmd, o->overrides);
  cli::run_with(cmd, [o] { return run_params(*o); });
}

}  // namespace hylo
