// `hylo train`, `hylo eval`, `hylo params`, `hylo export`.
#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "cli/commands.h"
#include "cli/flags.h"
#include "core/file.h"
#include "data/tokenizer.h"
#include "eval/evaluate.h"
#include "checkpoint/export.h"
#include "nn/flops.h"
#include "core/json_text.h"
#include "eval/last_word.h"
#include "checkpoint/model_checkpoint.h"
#include "eval/retrieval.h"
#include "train/trainer.h"

namespace hylo {

int run_train_command(const Args& args) {
  TrainOptions o;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--set") o.overrides.push_back(flag_value(args, i));
    else if (a == "--run-dir") o.run_dir = flag_value(args, i);
    else if (a == "--resume") o.resume = flag_value(args, i);
    else if (a == "--overwrite") o.overwrite = true;
    else if (a == "--stop-at") o.stop_at = parse_positive_int("train", a, flag_value(args, i));
    else if (a == "--device") o.overrides.push_back("device=" + flag_value(args, i));
    else if (o.config_path.empty() && !a.starts_with("--")) o.config_path = a;
    else HYLO_FAIL("train: unexpected argument '{}'", a);
  }
  HYLO_CHECK(!o.config_path.empty(), "train: expected a config file (e.g. configs/tiny.yaml)");
  return run_train(o);
}

int run_eval_command(const Args& args) {
  const std::string& path = leading_path(args, "eval", "a run directory or checkpoint file");
  std::vector<std::string> overrides, tasks{"val"};
  std::string json_path, tokenizer_path = "data/tokenizer/r50k_base.tiktoken";
  RetrievalOptions retrieval;
  LastWordOptions last_word;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--set") overrides.push_back(flag_value(args, i));
    else if (a == "--tasks") tasks = split_commas(flag_value(args, i));
    else if (a == "--n") retrieval.per_distance = last_word.passages = parse_positive_int("eval", a, flag_value(args, i));
    else if (a == "--json") json_path = flag_value(args, i);
    else if (a == "--tokenizer") tokenizer_path = flag_value(args, i);
    else HYLO_FAIL("eval: unexpected argument '{}'", a);
  }
  for (const std::string& t : tasks)
    HYLO_CHECK(t == "val" || t == "retrieval" || t == "lastword", "eval: unknown task '{}' (known: val, retrieval, lastword)", t);
  // Read before any task runs: a missing tokenizer fails the command at once, not after the others.
  std::optional<data::Tokenizer> tokenizer;
  if (std::find(tasks.begin(), tasks.end(), "lastword") != tasks.end())
    tokenizer = data::Tokenizer::from_tiktoken(tokenizer_path);
  const LoadedModel loaded = load_model_checkpoint(path, overrides);
  const Device device = training_device(loaded.config);
  std::string json = fmt::format(R"({{"checkpoint": {}, "step": {})", json_string(loaded.path), loaded.step);
  for (const std::string& task : tasks) {
    if (task == "val") {
      const EvalResult r = evaluate_val_loss(*loaded.model, loaded.config, device);
      fmt::print("{} (step {}): val_loss {:.4f} | val_ppl {:.2f} | {} tokens from {}\n", loaded.path, loaded.step, r.loss,
                 r.perplexity, r.tokens, loaded.config.data.val);
      json += fmt::format(R"(, "val": {{"loss": {}, "perplexity": {}, "tokens": {}}})", json_number(r.loss),
                          json_number(r.perplexity), r.tokens);
    } else if (task == "retrieval") {
      const RetrievalResult r = RetrievalTask(loaded.config, retrieval).score(*loaded.model, device);
      fmt::print("{}", r.table());
      json += R"(, "retrieval": )" + r.json();
    } else {
      const LastWordResult r = evaluate_last_word(*loaded.model, loaded.config, device, *tokenizer, last_word);
      fmt::print("{}", r.table());
      json += R"(, "lastword": )" + r.json();
    }
  }
  if (!json_path.empty()) {
    write_file_atomic(json_path, json + "}\n");
    fmt::print("wrote {}\n", json_path);
  }
  return 0;
}

int run_params_command(const Args& args) {
  const std::string& config_path = leading_path(args, "params", "a config file");
  std::vector<std::string> overrides;
  int ranks = 0;  // 0: as many as the expert parallelism needs
  for (size_t i = 1; i < args.size(); ++i) {
    if (const std::string flag = args[i]; flag == "--ranks") {
      ranks = parse_positive_int("params", flag, flag_value(args, i));
      continue;
    }
    HYLO_CHECK(args[i] == "--set", "params: unexpected argument '{}'", args[i]);
    overrides.push_back(flag_value(args, i));
  }
  Config config = load_config(config_path, overrides);
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

int run_export_command(const Args& args) {
  const std::string& path = leading_path(args, "export", "a run directory or checkpoint file");
  std::vector<std::string> overrides;
  ExportOptions o;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--set") overrides.push_back(flag_value(args, i));
    else if (a == "--out") o.out_dir = flag_value(args, i);
    else if (a == "--overwrite") o.overwrite = true;
    else if (a == "--dtype") {
      const std::string dtype = flag_value(args, i);
      HYLO_CHECK(dtype == "f32" || dtype == "bf16", "export: --dtype '{}' is not f32 or bf16", dtype);
      o.dtype = dtype == "f32" ? DType::f32 : DType::bf16;
    } else HYLO_FAIL("export: unexpected argument '{}'", a);
  }
  HYLO_CHECK(!o.out_dir.empty(), "export: expected --out DIR (where model.safetensors and config.json go)");
  const LoadedModel loaded = load_model_checkpoint(path, overrides, Device::cpu);  // the probe runs the CPU reference
  export_model(loaded, o);
  fmt::print("{} (step {}) -> {}/model.safetensors ({}), {}/config.json\n", loaded.path, loaded.step, o.out_dir,
             o.dtype == DType::f32 ? "f32" : "bf16", o.out_dir);
  return 0;
}

}  // namespace hylo
