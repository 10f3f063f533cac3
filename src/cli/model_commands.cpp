// `hylo train`, `hylo eval`, `hylo params`.
#include <fmt/format.h>


#include "cli/commands.h"
#include "train/evaluate.h"
#include "train/flops.h"
#include "train/model_checkpoint.h"
#include "train/trainer.h"

namespace hylo {


namespace {

// Takes the value after flag args[i] (advancing i) or fails naming the flag.
const std::string& flag_value(const Args& args, size_t& i) {
  HYLO_CHECK(i + 1 < args.size(), "{} needs a value", args[i]);
  return args[++i];
}

}  // namespace

int run_train_command(const Args& args) {
  TrainOptions o;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--set") o.overrides.push_back(flag_value(args, i));
    else if (a == "--run-dir") o.run_dir = flag_value(args, i);
    else if (a == "--resume") o.resume = flag_value(args, i);
    else if (a == "--overwrite") o.overwrite = true;
    else if (a == "--stop-at") o.stop_at = std::stoll(flag_value(args, i));
    else if (a == "--device") o.overrides.push_back("device=" + flag_value(args, i));
    else if (o.config_path.empty() && !a.starts_with("--")) o.config_path = a;
    else HYLO_FAIL("train: unexpected argument '{}'", a);
  }
  HYLO_CHECK(!o.config_path.empty(), "train: expected a config file (e.g. configs/tiny.yaml)");
  return run_train(o);
}

int run_eval_command(const Args& args) {
  HYLO_CHECK(!args.empty(), "eval: expected a run directory or checkpoint file");
  std::vector<std::string> overrides;
  for (size_t i = 1; i < args.size(); ++i) {
    HYLO_CHECK(args[i] == "--set", "eval: unexpected argument '{}'", args[i]);
    overrides.push_back(flag_value(args, i));
  }
  const LoadedModel loaded = load_model_checkpoint(args[0], overrides);
  const EvalResult r = evaluate_val_loss(*loaded.model, loaded.config, training_device(loaded.config));
  fmt::print("{} (step {}): val_loss {:.4f} | val_ppl {:.2f} | {} tokens from {}\n", loaded.path, loaded.step, r.loss,
             r.perplexity, r.tokens, loaded.config.data.val);
  return 0;
}

int run_params_command(const Args& args) {
  HYLO_CHECK(!args.empty(), "params: expected a config file");
  std::vector<std::string> overrides;
  for (size_t i = 1; i < args.size(); ++i) {
    HYLO_CHECK(args[i] == "--set", "params: unexpected argument '{}'", args[i]);
    overrides.push_back(flag_value(args, i));
  }
  Config config = load_config(args[0], overrides);
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
  const double flops = train_flops_per_token(config.model, config.train.seq_len);
  fmt::print("training FLOPs per token at seq_len {}: {:.4g} (6 x matmul params + 12 x H x hd x mean visited keys "
             "per layer)\n",
             config.train.seq_len, flops);
  return 0;
}

}  // namespace hylo
