// A run directory (SPEC §7): runs/<name>/{config.yaml, metrics.jsonl, log.txt, checkpoints/}, and the
// TensorBoard event files beside metrics.jsonl (train/tensorboard.h).
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace hylo {

// How `hylo train` treats a run directory: as given (fresh), --resume or --overwrite.
enum class RunDirMode { fresh, resume, overwrite };

// Creates `dir` and `dir/checkpoints`, and writes `dir/config.yaml` (temp file + rename).
// If config.yaml exists with different content:
//   fresh     -> error "runs/x already holds a different config (use --resume auto or --overwrite)";
// If it holds the same config and a run (metrics rows or checkpoints), fresh is refused too,
// "runs/x already holds a run (...): use --resume auto to continue it or --overwrite to start over":
// starting over would drop the old rows. Nothing is written or removed before these checks.
//   resume    -> the old one is kept as config.<N>.yaml (first free N), the new one written;
//   overwrite -> checkpoints/, metrics.jsonl, log.txt and TensorBoard's events.out.tfevents.* are
//                removed first (also when equal).
void prepare_run_dir(const std::string& dir, const std::string& resolved_config_yaml, RunDirMode mode);

// The keys of the rows the trainer writes to metrics.jsonl (trainer.cpp): every step's and every
// evaluation's, and per MoE layer L "moe.L.<suffix>". A sweep's `metrics` are checked against them.
inline const std::vector<std::string> kMetricsKeys = {
    "step", "loss", "lr", "grad_norm", "tokens", "tokens_per_s", "mfu", "skipped",
    "val_loss", "val_ppl", "retrieval_acc", "retrieval_tok_acc", "retrieval_logprob"};
inline const std::vector<std::string> kMoeMetricsSuffixes = {"aux_loss", "load_min", "load_max", "load_cv", "dropped"};
// One of kMetricsKeys, or moe.<layer>.<one of kMoeMetricsSuffixes>.
bool is_metrics_key(const std::string& key);

// Appends rows to dir/metrics.jsonl and tees console lines to dir/log.txt; both flushed per line
// so that a killed run keeps everything it printed.
class MetricsLog {
 public:
  explicit MetricsLog(const std::string& dir);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  // One object per line, compact, keys in insertion order; doubles as the shortest text that reads
  // back to the same value, NaN and inf as null (JSON has no spelling for them).
  void write(const nlohmann::ordered_json& row);
  void print(std::string_view line);  // stdout + log.txt, newline added

  // On resume from step N, rows past N were produced by the run being redone: drop them so the
  // file holds one curve; a line torn by a kill goes too, rows without an integer "step" stay.
  // Call before opening a MetricsLog on `dir` (the file is replaced by rename; an open log would
  // keep appending to the old one).
  static void truncate_after(const std::string& dir, int64_t step);

 private:
  std::FILE* metrics_ = nullptr;
  std::FILE* log_ = nullptr;
  std::string dir_;
};

}  // namespace hylo
