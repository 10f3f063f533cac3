// `hylo train`: builds model, optimizer and data from a config, runs the step loop with
// gradient accumulation, NaN/inf policy, in-loop validation, metrics and checkpoints, and
// resumes bit-exactly from a checkpoint.
#pragma once
#include <string>
#include <vector>

#include "config/config.h"

namespace hylo {

struct TrainOptions {
  std::string config_path;
  std::vector<std::string> overrides;  // "train.lr=3e-4"
  std::string run_dir;                 // default runs/<config file stem>
  std::string resume;                  // "", "auto" or a checkpoint path
  bool overwrite = false;
  int64_t stop_at = 0;  // > 0: exit after this step, as a preempted job would (the schedule is unchanged)
};

// Returns the process exit code.
int run_train(const TrainOptions& options);

}  // namespace hylo
