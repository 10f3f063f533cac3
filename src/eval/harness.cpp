#include "eval/harness.h"

#include <algorithm>
#include <array>
#include <cmath>

#include <fmt/format.h>

#include "core/error.h"
#include "core/parallel_for.h"
#include "core/revision.h"
#include "core/rng.h"
#include "eval/loglikelihood.h"

namespace hylo {

namespace {

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / double(v.size());
}

double sample_stddev(const std::vector<double>& v) {
  const double mu = mean(v);
  double s = 0;
  for (double x : v) s += (x - mu) * (x - mu);
  return std::sqrt(s / double(v.size() - 1));
}

// np.argmax: the first of the largest.
template <class F>
int argmax(size_t n, F value) {
  int best = 0;
  for (size_t i = 1; i < n; ++i)
    if (value(i) > value(size_t(best))) best = int(i);
  return best;
}

std::optional<double> stderr_of_mean(const std::vector<double>& v) {
  if (v.size() < 2) return std::nullopt;
  return mean_stderr(v);
}

}  // namespace

const TaskMetric& TaskScores::metric(const std::string& metric_name) const {
  for (const TaskMetric& m : metrics)
    if (m.name == metric_name) return m;
  HYLO_FAIL("task {} has no metric '{}'", name, metric_name);
}

double mean_stderr(const std::vector<double>& values) {
  HYLO_CHECK(values.size() >= 2, "mean_stderr: {} values (at least 2 needed)", values.size());
  return sample_stddev(values) / std::sqrt(double(values.size()));
}

double bootstrap_perplexity_stderr(const std::vector<double>& logprobs, int iters, uint64_t seed) {
  HYLO_CHECK(logprobs.size() >= 2 && iters >= 2, "bootstrap: {} values, {} resamples (at least 2 of each needed)",
             logprobs.size(), iters);
  // Resample i is drawn from Philox stream i, four 32-bit draws per block (an index is the high
  // half of draw * n): the same numbers on any number of threads.
  const size_t n = logprobs.size();
  std::vector<double> perplexities(static_cast<size_t>(iters));
  parallel_for(size_t(iters), [&](size_t i) {
    double sum = 0;
    for (size_t k = 0; k < n; k += 4) {
      const std::array<uint32_t, 4> words = philox4x32({uint32_t(k >> 2), uint32_t(k >> 34), uint32_t(i), uint32_t(i >> 32)},
                                                       {uint32_t(seed), uint32_t(seed >> 32)});
      for (size_t j = 0; j < 4 && k + j < n; ++j) sum += logprobs[size_t((uint64_t(words[j]) * n) >> 32)];
    }
    perplexities[i] = std::exp(-sum / double(n));
  });
  return sample_stddev(perplexities);
}

std::vector<ChoicePick> pick_choices(const TaskData& task, const std::vector<SpanScore>& scores) {
  std::vector<ChoicePick> picks;
  size_t at = 0;
  for (const TaskDoc& doc : task.docs) {
    const size_t n = doc.requests.size();
    HYLO_CHECK(at + n <= scores.size() && doc.choice_chars.size() == n, "pick_choices: {} scores for the requests",
               scores.size());
    picks.push_back({argmax(n, [&](size_t i) { return scores[at + i].logprob; }),
                     argmax(n, [&](size_t i) { return scores[at + i].logprob / double(doc.choice_chars[i]); })});
    at += n;
  }
  HYLO_CHECK(at == scores.size(), "pick_choices: {} scores for {} requests", scores.size(), at);
  return picks;
}

TaskScores tally_task(const TaskData& task, const std::vector<SpanScore>& scores, int bootstrap_iters) {
  TaskScores t{task.name, task.path, "", task.original, int64_t(task.docs.size()), {}};
  if (task.output == TaskOutput::loglikelihood) {
    t.output_type = "loglikelihood";
    HYLO_CHECK(scores.size() == task.docs.size(), "tally_task: {} scores for {} documents", scores.size(),
               task.docs.size());
    std::vector<double> ll, acc;
    for (const SpanScore& s : scores) {
      ll.push_back(s.logprob);
      acc.push_back(s.exact() ? 1.0 : 0.0);
    }
    std::optional<double> ppl_stderr;
    if (ll.size() >= 2 && bootstrap_iters >= 2) ppl_stderr = bootstrap_perplexity_stderr(ll, bootstrap_iters);
    t.metrics.push_back({"perplexity", std::exp(-mean(ll)), ppl_stderr, false});
    t.metrics.push_back({"acc", mean(acc), stderr_of_mean(acc), true});
    return t;
  }
  t.output_type = "multiple_choice";
  std::vector<double> acc, acc_norm;
  const std::vector<ChoicePick> picks = pick_choices(task, scores);
  for (size_t d = 0; d < picks.size(); ++d) {
    acc.push_back(picks[d].pred == task.docs[d].gold ? 1.0 : 0.0);
    acc_norm.push_back(picks[d].pred_norm == task.docs[d].gold ? 1.0 : 0.0);
  }
  t.metrics.push_back({"acc", mean(acc), stderr_of_mean(acc), true});
  if (task.acc_norm) t.metrics.push_back({"acc_norm", mean(acc_norm), stderr_of_mean(acc_norm), true});
  return t;
}

TaskScores tally_perplexity(const PerplexityResult& result, const std::string& data) {
  const int64_t n = int64_t(result.documents.size());
  TaskScores t{"ppl", data, "loglikelihood_rolling", n, n, {}};
  t.metrics.push_back({"word_perplexity", result.word_perplexity(), std::nullopt, false});
  t.metrics.push_back({"byte_perplexity", result.byte_perplexity(), std::nullopt, false});
  t.metrics.push_back({"bits_per_byte", result.bits_per_byte(), std::nullopt, false});
  t.metrics.push_back({"token_perplexity", result.token_perplexity(), std::nullopt, false});
  return t;
}

TaskScores evaluate_task(const Transformer& model, const data::Tokenizer& tokenizer, const TaskData& task,
                         const HarnessOptions& options, Device device) {
  std::vector<TokenRequest> requests;
  for (const TaskDoc& doc : task.docs)
    for (const auto& [context, continuation] : doc.requests)
      requests.push_back(encode_request(tokenizer, context, continuation));
  const int vocab_valid = std::min(tokenizer.vocab_size(), int(model.config().vocab_size));
  const std::vector<SpanScore> scores =
      score_requests(model, requests, options.max_length, vocab_valid, device, options.batch);
  return tally_task(task, scores, options.bootstrap_iters);
}

nlohmann::ordered_json harness_json(const std::vector<TaskScores>& tasks, const HarnessRun& run) {
  using nlohmann::ordered_json;
  ordered_json results = ordered_json::object(), groups = ordered_json::object(), configs = ordered_json::object(),
               versions = ordered_json::object(), shots = ordered_json::object(), better = ordered_json::object(),
               samples = ordered_json::object();
  for (const TaskScores& t : tasks) {
    ordered_json r = {{"alias", t.name}};
    ordered_json hib = ordered_json::object();
    for (const TaskMetric& m : t.metrics) {
      r[m.name + ",none"] = m.value;
      r[m.name + "_stderr,none"] = m.stderr_value ? ordered_json(*m.stderr_value) : ordered_json("N/A");
      hib[m.name] = m.higher_is_better;
    }
    results[t.name] = r;
    groups[t.name] = ordered_json::array();
    configs[t.name] = {{"task", t.name},          {"dataset_path", t.data}, {"output_type", t.output_type},
                       {"num_fewshot", 0},        {"target_delimiter", " "}, {"metadata", {{"version", 1.0}}}};
    versions[t.name] = 1.0;
    shots[t.name] = 0;
    better[t.name] = hib;
    samples[t.name] = {{"original", t.original}, {"effective", t.effective}};
  }
  ordered_json config = {{"model", "hylo"},
                         {"model_args", fmt::format("checkpoint={}", run.checkpoint)},
                         {"checkpoint", run.checkpoint},
                         {"step", run.step},
                         {"tokenizer", run.tokenizer},
                         {"max_length", run.options.max_length},
                         {"batch_size", run.options.batch},
                         {"device", run.device},
                         {"limit", run.limit > 0 ? ordered_json(run.limit) : ordered_json(nullptr)},
                         {"bootstrap_iters", run.options.bootstrap_iters}};
  return {{"results", results}, {"group_subtasks", groups}, {"configs", configs},   {"versions", versions},
          {"n-shot", shots},    {"higher_is_better", better}, {"n-samples", samples}, {"config", config},
          {"git_hash", git_revision()}};
}

std::string harness_table(const std::vector<TaskScores>& tasks) {
  size_t width = 5;
  for (const TaskScores& t : tasks) width = std::max(width, t.name.size());
  std::string out = fmt::format("|{:<{}}|Version|Filter|n-shot|{:<16}|   |{:>12}|   |{:>8}|\n", "Tasks", width, "Metric",
                                "Value", "Stderr");
  out += fmt::format("|{}|------:|------|-----:|{}|---|{}:|---|{}:|\n", std::string(width, '-'), std::string(16, '-'),
                     std::string(11, '-'), std::string(7, '-'));
  for (const TaskScores& t : tasks) {
    bool first = true;
    for (const TaskMetric& m : t.metrics) {
      out += fmt::format("|{:<{}}|{:>7}|none  |{:>6}|{:<16}|{}|{:>12.4f}|±  |{:>8}|\n", first ? t.name : "", width,
                         first ? "1" : "", 0, m.name, m.higher_is_better ? "↑  " : "↓  ", m.value,
                         m.stderr_value ? fmt::format("{:.4f}", *m.stderr_value) : "N/A");
      first = false;
    }
  }
  return out;
}

}  // namespace hylo
