// A run directory (SPEC §7): runs/<name>/{config.yaml, metrics.jsonl, log.txt, checkpoints/}.
#pragma once
#include <concepts>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace hylo {

// How `hylo train` treats a run directory: as given (fresh), --resume or --overwrite.
enum class RunDirMode { fresh, resume, overwrite };

// Creates `dir` and `dir/checkpoints`, and writes `dir/config.yaml` (temp file + rename).
// If config.yaml exists with different content:
//   fresh     -> error "runs/x already holds a different config (use --resume auto or --overwrite)";
//   resume    -> the old one is kept as config.<N>.yaml (first free N), the new one written;
//   overwrite -> checkpoints/, metrics.jsonl and log.txt are removed first (also when equal).
void prepare_run_dir(const std::string& dir, const std::string& resolved_config_yaml, RunDirMode mode);

// The keys of the rows the trainer writes to metrics.jsonl (trainer.cpp): every step's and every
// evaluation's, and per MoE layer L "moe.L.<suffix>". A sweep's `metrics` are checked against them.
inline const std::vector<std::string> kMetricsKeys = {
    "step", "loss", "lr", "grad_norm", "tokens", "tokens_per_s", "mfu", "skipped",
    "val_loss", "val_ppl", "retrieval_acc", "retrieval_tok_acc", "retrieval_logprob"};
inline const std::vector<std::string> kMoeMetricsSuffixes = {"aux_loss", "load_min", "load_max", "load_cv", "dropped"};
// One of kMetricsKeys, or moe.<layer>.<one of kMoeMetricsSuffixes>.
bool is_metrics_key(const std::string& key);

// One JSON object, keys in insertion order: MetricsRow().add("step", 5).add("loss", 2.3).
// Doubles print as the shortest text that reads back to the same value; NaN/inf print as the
// tokens NaN / Infinity / -Infinity (what Python's json reads; strict JSON has no spelling).
class MetricsRow {
 public:
  MetricsRow& add(std::string_view key, double value);
  MetricsRow& add(std::string_view key, bool value);
  MetricsRow& add(std::string_view key, std::string_view value);
  MetricsRow& add(std::string_view key, const char* value) { return add(key, std::string_view(value)); }
  template <std::integral T>
  MetricsRow& add(std::string_view key, T value) {
    return add_raw(key, std::to_string(value));
  }
  template <std::floating_point T>
  MetricsRow& add(std::string_view key, T value) {
    return add(key, double(value));
  }
  std::string json() const { return "{" + body_ + "}"; }

 private:
  MetricsRow& add_raw(std::string_view key, const std::string& json_value);
  std::string body_;
};

// Appends rows to dir/metrics.jsonl and tees console lines to dir/log.txt; both flushed per line
// so that a killed run keeps everything it printed.
class MetricsLog {
 public:
  explicit MetricsLog(const std::string& dir);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  void write(const MetricsRow& row);
  void print(std::string_view line);  // stdout + log.txt, newline added

  // On resume from step N, rows past N were produced by the run being redone: drop them so the
  // file holds one curve. Rows without a "step" key are kept. Call before opening a MetricsLog on
  // `dir` (the file is replaced by rename; an open log would keep appending to the old one).
  static void truncate_after(const std::string& dir, int64_t step);

 private:
  std::FILE* metrics_ = nullptr;
  std::FILE* log_ = nullptr;
  std::string dir_;
};

}  // namespace hylo
