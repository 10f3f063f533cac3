// `hylo sweep FILE` (SPEC §7): plans every point of a sweep file (sweep/sweep.h) before anything
// runs, then runs them here, one `hylo train` after another (under mpirun when the sweep has
// `ranks` > 1), or writes a Slurm array job for them. A sweep directory OUT/<name>/ holds
// sweep.json (points, their overrides, run dirs and planned steps; for --local what each run did,
// for --slurm the array task and job), one run dir per point, and for --slurm points.txt +
// submit.sbatch (sweep/slurm.h). Where a point stands is read from its run directory
// (sweep/status.h), not from sweep.json.
#pragma once
#include <string>
#include <vector>

#include "sweep/sweep.h"

namespace hylo {

struct SweepRunOptions {
  std::string file;
  std::string out = "runs/sweeps";
  std::vector<std::string> set;  // --set: every point, after the file's `set`
  bool slurm = false;            // write the array job instead of running here
  bool submit = false;           // --slurm: and sbatch it
  bool dry_run = false;          // print the plan (and with --slurm the script) only
  std::vector<int> only;         // --only: run just these point indices here (a sweep split across machines)
  std::string tuned;             // --tuned: each point's value of a tuned key from `hylo report --tune`'s tuned.json
  SlurmSettings slurm_flags;     // --partition ...: over the sweep file's `slurm:`
};

// Returns the process exit code: 1 when a point failed (the others still ran).
int run_sweep(const SweepRunOptions& options);

}  // namespace hylo
