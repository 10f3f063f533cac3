// `hylo sweep` and `hylo report`: their flags; what they do is sweep/sweep_run.h and sweep/report.h.
#include <memory>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "sweep/report.h"
#include "sweep/status.h"
#include "sweep/sweep_run.h"

namespace hylo {

void add_sweep_command(CLI::App& app) {
  auto o = std::make_shared<SweepRunOptions>();
  CLI::App* cmd = cli::add_command(app, "sweep", "run every point of a sweep file, here or as a Slurm array job");
  // Not required by CLI11: `hylo sweep status DIR` has none.
  cmd->add_option("FILE", o->file, "the sweep file (e.g. experiments/pbb-vs-swa-tiny.yaml)");
  CLI::Option* local = cmd->add_flag("--local")->description("run the points here, one after another (the default)");
  CLI::Option* slurm = cmd->add_flag("--slurm", o->slurm,
                                     "write OUT/<name>/submit.sbatch, an array job of the unfinished points")
                           ->excludes(local);
  cmd->add_flag("--submit", o->submit, "with --slurm: sbatch the array job")->needs(slurm);
  cmd->add_option("--out", o->out, "where the sweep's directory goes");
  cmd->add_flag("--dry-run", o->dry_run, "print the points (with --slurm, the script too) and stop");
  cmd->add_option("--only", o->only, "run only these point indices (the NN of NN_name), e.g. --only 0,3")
      ->delimiter(',')
      ->excludes(slurm);
  cmd->add_option("--tuned", o->tuned,
                  "each point's value of a tuned key from `hylo report --tune`'s tuned.json (the group with the point's "
                  "settings)");
  SlurmSettings& s = o->slurm_flags;
  for (auto [flag, field] : {std::pair{"--partition", &s.partition}, {"--account", &s.account}, {"--qos", &s.qos},
                             {"--time", &s.time}, {"--mem", &s.mem}})
    cmd->add_option(flag, *field, std::string("with --slurm: #SBATCH ") + flag + " (over the sweep file's slurm:)")
        ->each([flag = std::string(flag)](const std::string& value) {
          try {
            check_slurm_value("sweep", flag, value);
          } catch (const Error& e) {
            cli::bad_value(e.what());
          }
        })
        ->needs(slurm);
  cli::add_positive(cmd, "--cpus-per-task", s.cpus_per_task, "with --slurm: CPUs per process (default 8 on cuda, 1 on cpu)")
      ->needs(slurm);
  cli::add_positive(cmd, "--signal-seconds", s.signal_seconds,
                    "with --slurm: USR1 this long before the time limit, to checkpoint and requeue (default 120)")
      ->needs(slurm);
  cli::add_overrides(cmd, o->set, "override a config key in every point (not one the sweep varies), repeatable");

  auto status_dir = std::make_shared<std::string>();
  CLI::App* status = cli::add_command(*cmd, "status", "where each point of a sweep stands, from its run directories");
  status->add_option("DIR", *status_dir, "the sweep's directory (OUT/<name>)")->required();
  cli::run_with(status, [status_dir] { return run_sweep_status(*status_dir); });

  cli::run_with(cmd, [o, cmd, status] {
    if (status->parsed()) return 0;
    if (o->file.empty()) cli::usage_error("sweep: FILE is required (or: hylo sweep status DIR)");
    return run_sweep(*o);
  });
}

void add_report_command(CLI::App& app) {
  auto o = std::make_shared<ReportOptions>();
  auto baseline = std::make_shared<std::string>();
  CLI::App* cmd = cli::add_command(app, "report", "markdown table of a sweep's final metrics (report.md), loss.png");
  cmd->add_option("SWEEP_DIR", o->dirs, "sweep directories; several (e.g. one per seed) pool into one table")
      ->required()
      ->default_str("");
  cmd->add_option("--out", o->out, "where report.md goes (default: the one SWEEP_DIR; needed for several)");
  CLI::Option* base = cmd->add_option("--baseline", *baseline,
                                      "pair by seed against the point whose values contain this text (default: the first)");
  auto tune = std::make_shared<std::string>();
  CLI::Option* tuned = cmd->add_option("--tune", *tune,
                                       "per group of runs that differ only in this key (e.g. train.lr), its best value "
                                       "(tuned.json)");
  cmd->add_option("--by", o->tune_by, "the metric --tune minimises (mean over seeds)")->default_str(o->tune_by);
  cmd->add_option("--where", o->where,
                  "KEY=VALUE: only the runs with this value of a key they vary, as written (e.g. train.lr=3.0e-3); "
                  "repeatable");
  cli::run_with(cmd, [o, baseline, base, tune, tuned] {
    if (base->count() > 0) o->baseline = *baseline;
    if (tuned->count() > 0) o->tune = *tune;
    return run_report(*o);
  });
}

}  // namespace hylo
