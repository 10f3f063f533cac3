// Where a run stands, read from its directory alone (what `hylo sweep status` and `hylo report`
// show for a sweep's points, SPEC §7). The trainer records each change of its state in
// <dir>/run_state.json (started, preempted by a signal, finished, failed); the run directory's
// lock (run_lock.h) says whether a process is at it now, and the final checkpoint whether it
// finished. A process killed without a word (kill -9, a lost node) leaves "running" behind with
// no lock holder: reported as failed.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace hylo {

enum class RunStatus { pending, running, finished, failed, preempted };
const char* run_status_name(RunStatus status);

// What the trainer writes: state is "running", "preempted", "finished" or "failed".
struct RunState {
  std::string state;
  int64_t step = 0;    // the last step done (and checkpointed, for preempted and finished)
  std::string detail;  // the signal (preempted), the error (failed)
};

// <dir>/run_state.json, atomically (a reader sees the old state or the new one).
void write_run_state(const std::string& dir, const RunState& state);
// nullopt when the file is missing or unreadable (a run of an older hylo, or none yet).
std::optional<RunState> read_run_state(const std::string& dir);

struct RunReport {
  RunStatus status = RunStatus::pending;
  int64_t step = 0;        // the last step in metrics.jsonl (0 when none)
  int64_t final_step = 0;  // where the run ends (run_report's argument)
  std::string detail;      // the holder (running), the signal (preempted), the error (failed)
};

// The run in `dir` that ends at step `final_step`: running while a process holds the lock,
// finished once checkpoints/step_<final_step>.h5 exists, else what run_state.json says, and
// pending when nothing ran there yet.
RunReport run_report(const std::string& dir, int64_t final_step);

}  // namespace hylo
