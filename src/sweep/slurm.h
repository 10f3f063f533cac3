// `hylo sweep FILE --slurm`: the array job of a sweep's unfinished points, its resources taken
// from the resolved configs (a GPU per process only for cuda configs) and the sweep's `slurm:`
// settings. Every task survives preemption and its time limit: Slurm signals the batch script
// (--signal=B:USR1@N), the script passes the signal to hylo, which checkpoints at the next step
// boundary and exits kExitPreempted (75); the script then requeues the task (--requeue), whose
// next start resumes from that checkpoint bit-identically, appending to the same log
// (--open-mode=append).
#pragma once
#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "config/config.h"
#include "sweep/sweep.h"

namespace hylo {

struct SlurmJob {
  std::string script;  // submit.sbatch
  std::string points;  // points.txt: line i+1 for point i, "RUN_DIR --set k=v ...", shell-quoted
};

// The job for `tasks` (indices into spec.points, all of them unfinished; not empty). configs[i] is
// spec.points[i] resolved. The tasks must agree on the device (one array asks for one shape of
// resources); the error names two points that do not.
SlurmJob slurm_job(const SweepSpec& spec, const std::vector<Config>& configs, const std::vector<size_t>& tasks,
                   const std::filesystem::path& sweep_dir, const SlurmSettings& settings);

// "0-2,5,7-8": Slurm's --array list of sorted indices.
std::string array_ranges(const std::vector<size_t>& indices);

// Runs `sbatch --parsable SCRIPT` and returns the job id, or fails with sbatch's own words.
std::string submit_job(const std::filesystem::path& script);

}  // namespace hylo
