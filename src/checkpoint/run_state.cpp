#include "checkpoint/run_state.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "checkpoint/checkpoint.h"
#include "checkpoint/run_lock.h"
#include "core/file.h"

namespace fs = std::filesystem;

namespace hylo {
namespace {

constexpr const char* kStateFile = "run_state.json";

// The step of the last training row of metrics.jsonl (eval rows repeat a step; they count too).
int64_t last_logged_step(const fs::path& dir) {
  std::ifstream in(dir / "metrics.jsonl");
  int64_t step = 0;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (row.is_object() && row.contains("step") && row["step"].is_number_integer()) step = row["step"].get<int64_t>();
  }
  return step;
}

}  // namespace

const char* run_status_name(RunStatus status) {
  switch (status) {
    case RunStatus::pending: return "pending";
    case RunStatus::running: return "running";
    case RunStatus::finished: return "finished";
    case RunStatus::failed: return "failed";
    case RunStatus::preempted: return "preempted";
  }
  return "?";
}

void write_run_state(const std::string& dir, const RunState& state) {
  const nlohmann::ordered_json j{{"state", state.state}, {"step", state.step}, {"detail", state.detail}};
  write_file_atomic((fs::path(dir) / kStateFile).string(), j.dump() + "\n");
}

std::optional<RunState> read_run_state(const std::string& dir) {
  const std::optional<std::string> text = read_file((fs::path(dir) / kStateFile).string());
  if (!text) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("state") || !j["state"].is_string()) return std::nullopt;
  RunState s;
  s.state = j["state"].get<std::string>();
  if (j.contains("step") && j["step"].is_number_integer()) s.step = j["step"].get<int64_t>();
  if (j.contains("detail") && j["detail"].is_string()) s.detail = j["detail"].get<std::string>();
  return s;
}

RunReport run_report(const std::string& dir, int64_t final_step) {
  RunReport r;
  r.final_step = final_step;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return r;
  r.step = last_logged_step(dir);
  if (std::optional<std::string> holder = run_dir_holder(dir)) {
    r.status = RunStatus::running;
    r.detail = *holder;
    return r;
  }
  if (fs::exists(checkpoint_path(dir, final_step), ec)) {
    r.status = RunStatus::finished;
    return r;
  }
  const std::optional<RunState> state = read_run_state(dir);
  // A run directory copied without its checkpoints (a sweep's results brought back from a GPU
  // machine, kept under experiments/results) still shows in its metrics that it trained to the end.
  if ((!state || state->state == "finished") && final_step > 0 && r.step >= final_step) {
    r.status = RunStatus::finished;
    r.detail = "its metrics reach the last step; no final checkpoint here";
    return r;
  }
  if (!state) {
    if (r.step > 0) {
      r.status = RunStatus::failed;
      r.detail = "stopped without a run_state.json (an older hylo, or killed before it wrote one)";
    }
    return r;
  }
  if (state->state == "preempted") {
    r.status = RunStatus::preempted;
    r.detail = state->detail;
  } else {
    r.status = RunStatus::failed;
    r.detail = state->state == "failed" ? state->detail
                                        : "stopped without a word (killed, or its node lost) after step " +
                                              std::to_string(r.step);
  }
  return r;
}

}  // namespace hylo
