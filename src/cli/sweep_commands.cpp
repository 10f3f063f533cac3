// `hylo sweep` and `hylo report`: their flags; what they do is sweep/sweep_run.h and sweep/report.h.
#include <memory>

#include "cli/commands.h"
#include "cli/options.h"
#include "sweep/report.h"
#include "sweep/sweep_run.h"

namespace hylo {

void add_sweep_command(CLI::App& app) {
  auto o = std::make_shared<SweepRunOptions>();
  CLI::App* cmd = cli::add_command(app, "sweep", "run every point of a sweep file, here or as a Slurm array job");
  cmd->add_option("FILE", o->file, "the sweep file (e.g. experiments/pbb-vs-swa-tiny.yaml)")->required();
  CLI::Option* local = cmd->add_flag("--local")->description("run the points here, one after another (the default)");
  cmd->add_flag("--slurm", o->slurm, "write OUT/<name>/submit.sbatch, an array job of one task per point")->excludes(local);
  cmd->add_option("--out", o->out, "where the sweep's directory goes");
  cmd->add_flag("--dry-run", o->dry_run, "print the points and stop");
  cli::add_overrides(cmd, o->set, "override a config key in every point (not one the sweep varies), repeatable");
  cli::run_with(cmd, [o] { return run_sweep(*o); });
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
  cli::run_with(cmd, [o, baseline, base] {
    if (base->count() > 0) o->baseline = *baseline;
    return run_report(*o);
  });
}

}  // namespace hylo
