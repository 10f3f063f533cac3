// The training CLI tests' workspace (TinyWorkspace): a 2-layer d32 PBB hybrid, 40 steps of 4
// sequences of 24 tokens, eval every 20; commands for `hylo train` and the loss column of a run.
#pragma once
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tiny_workspace.h"

namespace hylo::test {

struct TrainingWorkspace : TinyWorkspace {
  explicit TrainingWorkspace(const std::string& name)
      : TinyWorkspace(name,
                      "model:\n  vocab_size: 256\n  d_model: 32\n  n_layers: 2\n  n_heads: 2\n  ffn_hidden: 64\n"
                      "  pattern: LG\n  local: {kind: pbb, block: 8, bridge: 3}\n"
                      "train:\n  steps: 40\n  batch_size: 4\n  seq_len: 24\n  lr: 0.003\n  warmup_steps: 5\n"
                      "  eval_every: 20\n  eval_batches: 2\n  log_every: 10\n",
                      20000, 4000) {}

  std::string train(const std::string& run_name, const std::string& extra = "") const {
    return hylo + " train " + (dir / "tiny.yaml").string() + " --run-dir " + (dir / run_name).string() + " " + extra;
  }

  // Every row of the run's metrics.jsonl, parsed.
  std::vector<nlohmann::json> metrics_rows(const std::string& run_name) const {
    std::ifstream in(dir / run_name / "metrics.jsonl");
    std::vector<nlohmann::json> rows;
    for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
    return rows;
  }

  // {"step":S,"loss":L} of every row with a loss, as text: equal text is equal bits.
  std::vector<std::string> loss_rows(const std::string& run_name) const {
    std::vector<std::string> rows;
    for (const nlohmann::json& row : metrics_rows(run_name))
      if (row.contains("loss")) rows.push_back(nlohmann::ordered_json{{"step", row["step"]}, {"loss", row["loss"]}}.dump());
    return rows;
  }
};

}  // namespace hylo::test
