// `hylo sweep status DIR`: where each point of a sweep stands (pending, running, finished, failed,
// preempted), read from its run directory (checkpoint/run_state.h), never from what sweep.json
// said when the sweep was launched.
#pragma once
#include <filesystem>
#include <string>

#include "checkpoint/run_state.h"

namespace hylo {

// The run in `run_dir` against its own resolved config's train.steps (config.yaml), or
// `planned_steps` when it has none yet.
RunReport point_report(const std::filesystem::path& run_dir, int64_t planned_steps = 0);

// Prints one line per point of DIR/sweep.json and a count per state; returns 0.
int run_sweep_status(const std::string& dir);

}  // namespace hylo
