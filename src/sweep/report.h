// `hylo report DIR [DIR...]` (SPEC §7): the final metrics of a sweep's runs as a markdown table
// (report.md), their spread over seeds and differences paired by seed where train.seed varies,
// the best value of a tuned key (--tune, e.g. the learning rate) per group of runs, and plots
// (loss.png, retrieval.png, paired.png, tune.png) by scripts/plot_*.py. Several directories of one sweep (or
// of sweeps with the same base and settings), e.g. launched once per seed or run in parts (--only),
// pool into one report, each point once; --where keeps the runs of one value of a varied key (the
// tuned rate's runs of a learning-rate grid, pooled with the seeded runs at that rate).
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace hylo {

struct ReportOptions {
  std::vector<std::string> dirs;  // sweep directories, or directories of run dirs
  std::string out;                // where report.md goes; empty: the one directory (required for several)
  std::optional<std::string> baseline;  // pair against the point whose values contain this text
  std::optional<std::string> tune;      // a key the runs vary (e.g. train.lr): its best value per group
  std::string tune_by = "val_loss";     // ... by the lowest of this metric (tuned.json)
  std::vector<std::string> where;       // KEY=VALUE: only the runs with this value of a key they vary
};

int run_report(const ReportOptions& options);

}  // namespace hylo
