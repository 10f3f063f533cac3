// Sweeps (SPEC §7): experiments/<name>.yaml = a base config + overrides per point + metrics to
// collect. This file turns a sweep file into a list of points; sweep/sweep_run.h runs them
// (in-process or as a Slurm array job) and sweep/report.h reports on them. The file format is documented at the
// top of sweep.cpp and shown in experiments/pbb-vs-swa-tiny.yaml.
#pragma once
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "config/config.h"

namespace hylo {

using Override = std::pair<std::string, std::string>;  // {"train.lr", "0.001"}

struct SweepPoint {
  std::string name;                // "00_kind-pbb_lr-0.001": index + slug of `varied`, a safe dir name
  std::vector<Override> varied;    // what distinguishes this point (grid / points entries), file order
  std::vector<std::string> overrides;  // "key=value" for load_config: `set` first, then `varied`
};

// The array job's resources (`slurm:` in the sweep file; `hylo sweep --slurm` flags of the same
// names override them). Empty / 0: the cluster's default, or the one said.
struct SlurmSettings {
  std::string partition, account, qos;
  std::string time;        // --time, e.g. 04:00:00
  std::string mem;         // --mem per node, e.g. 64G
  int cpus_per_task = 0;   // 0: 8 per GPU on cuda, 1 on cpu
  int signal_seconds = 0;  // --signal=B:USR1@N before the time limit; 0: 120 (time to reach a step boundary and checkpoint)
};

struct SweepSpec {
  std::string path;  // the sweep file, for error messages
  std::string name, base;
  std::vector<Override> set;
  std::vector<std::string> metrics;
  std::vector<SweepPoint> points;
  int ranks = 1;  // processes (GPUs) per point
  SlurmSettings slurm;
};

// `slurm.key: value` text (sweep file or flag) checked for an #SBATCH line: one word of
// [A-Za-z0-9:._,+-], or one line "WHERE: KEY 'VALUE' ..." naming both.
void check_slurm_value(const std::string& where, const std::string& key, const std::string& value);

// Parses and expands a sweep file. Errors are one line naming the file and the key. Does not
// load the base config: call check_sweep_configs for that. `cli_set`: "key=value" overrides from
// the command line (`hylo sweep FILE --set k=v`), applied to every point after the file's `set`;
// a key the sweep varies is refused (it would collapse the points into one).
SweepSpec load_sweep(const std::string& path, const std::vector<std::string>& cli_set = {});

// The JSON file at `path`, parsed; fails in one line that starts with `who` and names the file.
nlohmann::json read_json_file(const std::filesystem::path& path, const std::string& who);

// `hylo sweep FILE --tuned tuned.json` (what `hylo report --tune KEY` writes): every point takes
// KEY's best value from the one tuned group whose settings are the point's own (the keys any group
// sets, compared as written; a key a group leaves unset must be unset in the point too), as one more
// varied override, so the value shows in the point's name and its sweep.json. Refused, naming the
// point: a point that sets KEY itself, matches no group or several, or whose group's best lies at
// the edge of the values it tried (experiments/PROTOCOL.md: such a grid is widened first).
void apply_tuned(SweepSpec& spec, const std::string& tuned_path);

// Loads the base config with each point's overrides, so that a bad key or value in any point
// fails before the first run starts. The error names the sweep file and the point. Returns the
// configs, one per point in spec.points order.
std::vector<Config> check_sweep_configs(const SweepSpec& spec);

// "model.local.kind=pbb,train.lr=0.001" -> "kind-pbb_lr-0.001": last key segment + value, only
// [A-Za-z0-9._-], at most ~48 characters (the index prefix keeps truncated names unique).
std::string point_slug(const std::vector<Override>& varied);

// Single-quotes `text` for a POSIX shell (the Slurm script evals points.txt lines).
std::string shell_quote(const std::string& text);

// This hylo executable: what a sweep's jobs run, and where scripts/ is found next to the build.
std::filesystem::path self_binary();

}  // namespace hylo
