// Standard-task scores as lm-evaluation-harness computes and writes them (SPEC §5), from users'
// files (eval/task_files.h) and texts (eval/perplexity.h). Definitions matched (lm_eval/api/task.py
// ConfigurableTask.process_results, lm_eval/api/metrics.py, lm_eval/evaluator_utils.py):
//   multiple choice: ll_i = summed log-likelihood of request i's continuation; acc = [argmax ll_i
//     is gold], acc_norm = [argmax ll_i / len(choice_i) is gold] with len in characters (lm-eval's
//     completion_len; its acc_bytes divides by bytes instead), argmax ties to the first;
//   loglikelihood (lambada): acc = [greedy decoding reproduces the continuation], perplexity =
//     exp(-mean over documents of ll) (per word, not per token);
//   stderr: of a mean, sample stdev / sqrt(n) ("N/A" for n = 1); of perplexity, the sample stdev of
//     `bootstrap_iters` resampled perplexities (lm-eval draws them with Python's random module,
//     hylo with its Philox stream: the same estimator, not the same draws); of the rolling-text
//     metrics, "N/A" as in lm-eval.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/tokenizer.h"
#include "eval/perplexity.h"
#include "eval/span_score.h"
#include "eval/task_files.h"
#include "nn/transformer.h"

namespace hylo {

struct TaskMetric {
  std::string name;  // acc, acc_norm, perplexity, word_perplexity, ...
  double value = 0;
  std::optional<double> stderr_value;  // none: "N/A"
  bool higher_is_better = true;
};

struct TaskScores {
  std::string name, data, output_type;  // output_type: multiple_choice, loglikelihood, loglikelihood_rolling
  int64_t original = 0, effective = 0;  // documents in the data, and scored
  std::vector<TaskMetric> metrics;      // in lm-eval's order
  const TaskMetric& metric(const std::string& name) const;
};

// Per document of a multiple-choice task: the choice by summed ll and by ll per character.
struct ChoicePick {
  int pred = 0, pred_norm = 0;
};
// scores holds the requests of every document in order (task.docs[0]'s, then task.docs[1]'s, ...).
std::vector<ChoicePick> pick_choices(const TaskData& task, const std::vector<SpanScore>& scores);

double mean_stderr(const std::vector<double>& values);
double bootstrap_perplexity_stderr(const std::vector<double>& logprobs, int iters, uint64_t seed = 1234);

TaskScores tally_task(const TaskData& task, const std::vector<SpanScore>& scores, int bootstrap_iters);
TaskScores tally_perplexity(const PerplexityResult& result, const std::string& data);

struct HarnessOptions {
  int max_length = 0;  // the model's config.train.seq_len
  int batch = 8;
  int bootstrap_iters = 100000;  // lm-eval's default
};

TaskScores evaluate_task(const Transformer& model, const data::Tokenizer& tokenizer, const TaskData& task,
                         const HarnessOptions& options, Device device);

// What lm-eval's results file says about the run beside the scores.
struct HarnessRun {
  std::string checkpoint, tokenizer, device;
  int64_t step = 0, limit = 0;  // limit 0: none
  HarnessOptions options;
};

// {"results", "group_subtasks", "configs", "versions", "n-shot", "higher_is_better", "n-samples",
// "config", "git_hash"} as lm-eval's results JSON has them.
nlohmann::ordered_json harness_json(const std::vector<TaskScores>& tasks, const HarnessRun& run);
// lm-eval's markdown table (Tasks, Version, Filter, n-shot, Metric, Value, Stderr).
std::string harness_table(const std::vector<TaskScores>& tasks);

}  // namespace hylo
