// `hylo export` (hylo's own format, or Hugging Face's) and `hylo import` (Hugging Face's, back to
// a run directory).
#include <fmt/format.h>

#include "checkpoint/export.h"
#include "checkpoint/hf_export.h"
#include "checkpoint/hf_import.h"
#include "checkpoint/model_checkpoint.h"
#include "cli/commands.h"
#include "cli/options.h"

namespace hylo {

namespace {

struct ExportCommandOptions {
  std::string path, out_dir, format = "hylo", dtype = "f32", tokenizer = "data/tokenizer/r50k_base.tiktoken";
  std::vector<std::string> overrides;
  bool overwrite = false;
};

int run_export(const ExportCommandOptions& e) {
  const DType dtype = e.dtype == "f32" ? DType::f32 : DType::bf16;
  const LoadedModel loaded = load_model_checkpoint(e.path, e.overrides, Device::cpu);  // the probe runs the CPU reference
  if (e.format == "hylo") {
    export_model(loaded, {e.out_dir, dtype, e.overwrite});
    fmt::print("{} (step {}) -> {}/model.safetensors ({}), {}/config.json\n", loaded.path, loaded.step, e.out_dir,
               e.dtype, e.out_dir);
    return 0;
  }
  const HfModelClass cls = export_hf(loaded, {e.out_dir, e.tokenizer, dtype, e.overwrite});
  fmt::print("{} (step {}) -> {}: {} ({}), tokenizer, probe.safetensors\n  load with AutoModelForCausalLM."
             "from_pretrained(\"{}\"{}) and AutoTokenizer.from_pretrained(\"{}\")\n",
             loaded.path, loaded.step, e.out_dir, cls.architecture, e.dtype, e.out_dir,
             cls.remote_code ? ", trust_remote_code=True" : "", e.out_dir);
  return 0;
}

int run_import(const HfImportOptions& o) {
  const HfImportResult r = import_hf(o);
  fmt::print("{} -> {} (step {}; {})\n  continue training with: hylo train {}/config.yaml --run-dir {} --resume auto\n",
             o.hf_dir, r.checkpoint, r.step,
             r.hylo_config ? "hylo's own config from config.json"
                           : "the model from config.json, hylo's default train and data settings",
             o.run_dir, o.run_dir);
  return 0;
}

}  // namespace

void add_export_command(CLI::App& app) {
  auto o = std::make_shared<ExportCommandOptions>();
  CLI::App* cmd = cli::add_command(
      app, "export",
      "a checkpoint's model for use elsewhere: hylo's own safetensors + config.json with a probe, or a Hugging "
      "Face model directory (--format hf)");
  cmd->add_option("RUN_DIR_OR_CHECKPOINT", o->path, "a run directory or a checkpoint .h5")->required();
  cmd->add_option("--out", o->out_dir, "where the files go")->required();
  cli::add_choice(cmd, "--format", o->format, {"hylo", "hf"},
                  "hylo: hylo's names and a conventions list; hf: transformers' classes, names and GPT-2 tokenizer files");
  cli::add_choice(cmd, "--dtype", o->dtype, {"f32", "bf16"}, "of the parameters");
  cmd->add_option("--tokenizer", o->tokenizer, "the tiktoken rank file the hf tokenizer files are derived from");
  cmd->add_flag("--overwrite", o->overwrite, "replace the files of an earlier export there");
  cli::add_overrides(cmd, o->overrides);
  cli::run_with(cmd, [o] { return run_export(*o); });
}

void add_import_command(CLI::App& app) {
  auto o = std::make_shared<HfImportOptions>();
  CLI::App* cmd = cli::add_command(app, "import",
                                   "a Hugging Face model directory (llama, smollm3, qwen3, or hylo's own hf export) "
                                   "as a run directory for eval, generate and train --resume");
  cmd->add_option("HF_DIR", o->hf_dir, "the directory with config.json and model.safetensors")->required();
  cmd->add_option("--out", o->run_dir, "the run directory to write")->required();
  cmd->add_flag("--overwrite", o->overwrite, "replace a run directory's checkpoints, metrics and log");
  cli::run_with(cmd, [o] { return run_import(*o); });
}

}  // namespace hylo
