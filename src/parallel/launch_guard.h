// Refuses a launch that would start unconnected copies of one job. `srun -n 2 hylo train ...`
// without an MPI plugin (srun's --mpi=none, the default of many clusters) starts two processes
// that each find no MPI launcher, so each trains alone into the same run directory: a doubled log
// and two curves in one metrics.jsonl. Such a task sees SLURM_STEP_NUM_TASKS > 1 (set by srun
// for its tasks, not in the batch script itself) and none of the variables an MPI launcher sets.
#pragma once
#include <functional>
#include <string>

namespace hylo::dist {

// The one-line refusal for a process with environment `env` started as `command` (its own
// argv, joined), or "" when the launch is fine. The refusal names the srun and mpirun lines to use.
std::string unconnected_launch(const std::function<const char*(const char*)>& env, const std::string& command);

// Throws unconnected_launch's refusal for this process (environment and /proc/self/cmdline).
void check_launch();

// Whether an MPI launcher (Open MPI's mpirun, MPICH's hydra, Slurm's PMI-2 / PMIx) started this process.
bool started_by_mpi_launcher();

// This process's rank and the job's size as the launcher's environment states them, read before
// MPI starts: the hang watchdog must watch MPI's own start-up, which waits for every rank. A job of
// one when no launcher started the process.
struct LaunchPlace {
  int rank = 0, world_size = 1;
};
LaunchPlace launch_place(const std::function<const char*(const char*)>& env);
LaunchPlace launch_place();  // this process's environment

}  // namespace hylo::dist
