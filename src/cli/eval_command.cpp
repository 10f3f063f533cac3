// `hylo eval`: hylo's own tasks (val, retrieval, lastword) and the standard ones users know from
// lm-evaluation-harness: `ppl` on any text, and `NAME=FILE` for a task file in its public format.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <optional>

#include "checkpoint/model_checkpoint.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "core/file.h"
#include "data/tokenizer.h"
#include "eval/evaluate.h"
#include "eval/harness.h"
#include "eval/last_word.h"
#include "eval/perplexity.h"
#include "eval/retrieval.h"
#include "eval/task_files.h"

namespace hylo {

namespace {

// Not in any training source (scripts/fetch_data.sh --heldout).
constexpr const char* kHeldoutText = "data/raw/heldout/devil.txt";

struct EvalOptions {
  std::string path;
  std::vector<std::string> overrides, tasks{"val"}, texts;
  std::string json_path, tokenizer_path = "data/tokenizer/r50k_base.tiktoken";
  int n = RetrievalOptions{}.per_distance;
  int batch = 8;
  int64_t limit = 0;
  int bootstrap_iters = HarnessOptions{}.bootstrap_iters;
};

bool is_own_task(const std::string& task) {
  return task == "val" || task == "retrieval" || task == "lastword" || task == "ppl";
}

// --tasks entries: hylo's own names, or NAME=FILE for a standard task.
void check_task(const std::string& text) {
  const size_t eq = text.find('=');
  const std::string name = text.substr(0, eq);
  if (eq == std::string::npos && is_own_task(text)) return;
  if (is_standard_task(name)) {
    if (eq == std::string::npos || eq + 1 == text.size())
      cli::bad_value(fmt::format("--tasks: {} needs its file: {}=PATH (a .jsonl in the task's public format)", name, name));
    return;
  }
  cli::bad_value(fmt::format("--tasks: unknown task '{}' (known: val, retrieval, lastword, ppl, and NAME=FILE for {})",
                             name, fmt::join(standard_task_names(), ", ")));
}

int run_eval(const EvalOptions& o) {
  const std::vector<std::string>& tasks = o.tasks;
  const bool ppl = std::find(tasks.begin(), tasks.end(), "ppl") != tasks.end();
  const bool lastword = std::find(tasks.begin(), tasks.end(), "lastword") != tasks.end();
  if (!o.texts.empty() && !ppl && !lastword)
    cli::usage_error("--text is the text of --tasks ppl and lastword, neither of which is among the tasks");
  // Everything a task reads is read before any task runs: a missing tokenizer or a bad line in a
  // task file fails the command at once, not after an hour of the others.
  std::vector<TaskData> standard;
  for (const std::string& task : tasks)
    if (const size_t eq = task.find('='); eq != std::string::npos)
      standard.push_back(read_task(task.substr(0, eq), task.substr(eq + 1), o.limit));
  std::vector<std::string> texts = o.texts;
  if (ppl && texts.empty()) {
    HYLO_CHECK(std::filesystem::exists(kHeldoutText),
               "eval: the default held-out text {} is missing (scripts/fetch_data.sh --heldout fetches it; or give "
               "--text FILE...)",
               kHeldoutText);
    texts.push_back(kHeldoutText);
  }
  const std::vector<TextDocument> documents =
      ppl || (lastword && !o.texts.empty()) ? read_text_documents(texts) : std::vector<TextDocument>{};
  std::optional<data::Tokenizer> tokenizer;
  if (ppl || !standard.empty() || lastword)
    tokenizer = data::Tokenizer::from_tiktoken(o.tokenizer_path);

  const LoadedModel loaded = load_model_checkpoint(o.path, o.overrides);
  const Device device = training_device(loaded.config);
  RetrievalOptions retrieval;
  LastWordOptions last_word;
  retrieval.per_distance = last_word.passages = o.n;
  HarnessRun run{loaded.path, o.tokenizer_path, device == Device::cuda ? "cuda" : "cpu", loaded.step, o.limit, {}};
  run.options = {loaded.config.train.seq_len, o.batch, o.bootstrap_iters};
  nlohmann::ordered_json json{{"checkpoint", loaded.path}, {"step", loaded.step}};
  std::vector<TaskScores> scores;
  size_t next_standard = 0;
  for (const std::string& task : tasks) {
    if (task == "val") {
      const EvalResult r = evaluate_val_loss(*loaded.model, loaded.config, device);
      fmt::print("{} (step {}): val_loss {:.4f} | val_ppl {:.2f} | {} tokens from {}\n", loaded.path, loaded.step, r.loss,
                 r.perplexity, r.tokens, loaded.config.data.val);
      json["val"] = {{"loss", r.loss}, {"perplexity", r.perplexity}, {"tokens", r.tokens}};
    } else if (task == "retrieval") {
      const RetrievalResult r = RetrievalTask(loaded.config, retrieval).score(*loaded.model, device);
      fmt::print("{}", r.table());
      json["retrieval"] = r.json();
    } else if (task == "lastword") {
      // Without --text the passages come from the run's val shard (the held-out default is ppl's).
      const LastWordResult r = evaluate_last_word(*loaded.model, loaded.config, device, *tokenizer, last_word,
                                                  o.texts.empty() ? std::vector<TextDocument>{} : documents);
      fmt::print("{}", r.table());
      json["lastword"] = r.json();
    } else if (task == "ppl") {
      PerplexityOptions p;
      p.max_length = run.options.max_length;
      p.batch = o.batch;
      const PerplexityResult r = evaluate_perplexity(*loaded.model, *tokenizer, documents, p, device);
      fmt::print("{}", r.table());
      scores.push_back(tally_perplexity(r, fmt::format("{}", fmt::join(texts, ","))));
    } else {
      scores.push_back(evaluate_task(*loaded.model, *tokenizer, standard[next_standard++], run.options, device));
    }
  }
  if (!scores.empty()) {
    fmt::print("{} (step {}), max_length {}, zero-shot:\n{}", loaded.path, loaded.step, run.options.max_length,
               harness_table(scores));
    json.update(harness_json(scores, run));
  }
  if (!o.json_path.empty()) {
    write_file_atomic(o.json_path, json.dump() + "\n");  // NaN and infinities as null
    fmt::print("wrote {}\n", o.json_path);
  }
  return 0;
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto o = std::make_shared<EvalOptions>();
  CLI::App* cmd = cli::add_command(app, "eval", "evaluate a run's newest valid checkpoint (or a checkpoint file)");
  cmd->add_option("RUN_DIR_OR_CHECKPOINT", o->path, "a run directory or a checkpoint .h5")->required();
  cmd->add_option("--tasks", o->tasks,
                  fmt::format("what to score, comma-separated: val, retrieval, lastword, ppl (bits per byte of --text), "
                              "NAME=FILE for {} (lm-evaluation-harness's definitions, zero-shot)",
                              fmt::join(standard_task_names(), ", ")))
      ->delimiter(',')
      ->allow_extra_args(false)
      ->each(check_task);
  cmd->add_option("--text", o->texts,
                  fmt::format("held-out UTF-8 text files (.jsonl: a document per line's \"text\") for ppl (default {}) "
                              "and lastword (default: the run's val shard)",
                              kHeldoutText))
      ->default_str("");
  cli::add_positive(cmd, "--n", o->n, "retrieval sequences per distance; last-word passages");
  cli::add_positive(cmd, "--batch-size", o->batch, "sequences per forward pass (ppl and the NAME=FILE tasks)");
  cli::add_positive(cmd, "--limit", o->limit, "score only the first N documents of each task file")->default_str("");
  cli::add_number(cmd, "--bootstrap-iters", o->bootstrap_iters, "resamples for the stderr of lambada's perplexity (0: none)")
      ->check(CLI::NonNegativeNumber);
  // A path given twice: the last one counts, as a wrapper script appending its own expects.
  cmd->add_option("--json", o->json_path, "also write the results here as JSON (the NAME=FILE and ppl tasks as lm-eval's results file)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  cmd->add_option("--tokenizer", o->tokenizer_path, "a .tiktoken file (lastword, ppl, NAME=FILE)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  cli::add_overrides(cmd, o->overrides);
  cli::run_with(cmd, [o] { return run_eval(*o); });
}

}  // namespace hylo
