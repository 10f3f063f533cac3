// The sweep file format is documented in sweep/sweep.cpp.
#include "sweep/sweep_run.h"

#include <fmt/format.h>
#include <sys/wait.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "core/file.h"
#include "config/config.h"
#include "sweep/slurm.h"
#include "sweep/status.h"
#include "sweep/sweep.h"
#include "train/stop_signal.h"
#include "train/trainer.h"

namespace hylo {

namespace fs = std::filesystem;

namespace {

// What one point will run, resolved before anything runs so that every problem shows up first.
struct PlannedRun {
  const SweepPoint* point = nullptr;
  fs::path run_dir;
  int64_t steps = 0;
  bool finished = false, running = false;
  std::string status;  // --local: planned | skipped | done | failed
  std::string job;     // --slurm --submit: JOBID_TASK
};

// configs[i] is spec.points[i] resolved (check_sweep_configs).
std::vector<PlannedRun> plan_runs(const SweepSpec& spec, const std::vector<Config>& configs,
                                  const fs::path& sweep_dir) {
  std::vector<PlannedRun> runs;
  for (size_t i = 0; i < spec.points.size(); ++i) {
    const SweepPoint& point = spec.points[i];
    const Config& config = configs[i];
    PlannedRun run;
    run.point = &point;
    run.run_dir = sweep_dir / point.name;
    run.steps = config.train.steps;
    const fs::path existing = run.run_dir / "config.yaml";
    if (fs::exists(existing)) {
      // A run dir from an edited sweep file would otherwise be resumed (or skipped) under a
      // config it was not trained with, and its row in the report would be a lie.
      HYLO_CHECK(read_file(existing) == to_yaml(config),
                 "{}: {} holds a different config than point {} now resolves to (rename the sweep or remove the dir)",
                 spec.path, run.run_dir.string(), point.name);
      const RunReport report = point_report(run.run_dir, run.steps);
      run.finished = report.status == RunStatus::finished;
      run.running = report.status == RunStatus::running;
    }
    run.status = run.finished ? "skipped" : "planned";
    runs.push_back(std::move(run));
  }
  return runs;
}

// In file order: the overrides read as the sweep file lists them.
nlohmann::ordered_json override_object(const std::vector<Override>& overrides) {
  nlohmann::ordered_json object = nlohmann::ordered_json::object();
  for (const auto& [k, v] : overrides) object[k] = v;
  return object;
}

// sweep.json, which `hylo report` reads (sweep/report.cpp): one point per line.
std::string sweep_json(const SweepSpec& spec, const std::vector<PlannedRun>& runs, bool slurm) {
  nlohmann::ordered_json head{{"name", spec.name},
                              {"sweep_file", spec.path},
                              {"base", spec.base},
                              {"set", override_object(spec.set)},
                              {"metrics", spec.metrics}};
  std::string text = head.dump();
  text.pop_back();  // the closing brace: the points follow
  text += ",\n  \"points\": [\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    const PlannedRun& run = runs[i];
    nlohmann::ordered_json point{{"name", run.point->name},
                                 {"run_dir", run.run_dir.string()},
                                 {"overrides", override_object(run.point->varied)},
                                 {"steps", run.steps}};
    if (!slurm) point["status"] = run.status;
    if (!run.job.empty()) point["job"] = run.job;
    text += "    " + point.dump() + (i + 1 < runs.size() ? ",\n" : "\n");
  }
  return text + "  ]}\n";
}

// The sweep file's `slurm:` settings, each replaced by its flag when given.
SlurmSettings merged(SlurmSettings file, const SlurmSettings& flags) {
  for (auto [field, flag] : {std::pair{&file.partition, &flags.partition}, {&file.account, &flags.account},
                             {&file.qos, &flags.qos}, {&file.time, &flags.time}, {&file.mem, &flags.mem}})
    if (!flag->empty()) *field = *flag;
  if (flags.cpus_per_task > 0) file.cpus_per_task = flags.cpus_per_task;
  if (flags.signal_seconds > 0) file.signal_seconds = flags.signal_seconds;
  return file;
}

// --slurm: the array job of the points neither finished nor running; returns the exit code.
int slurm_sweep(const SweepRunOptions& o, const SweepSpec& spec, const std::vector<Config>& configs,
                std::vector<PlannedRun>& runs, const fs::path& sweep_dir) {
  std::vector<size_t> tasks;
  for (size_t i = 0; i < runs.size(); ++i)
    if (!runs[i].finished && !runs[i].running) tasks.push_back(i);
  if (tasks.empty()) {
    fmt::print("sweep {}: every point is finished or running: no array job to write\n", spec.name);
    return 0;
  }
  const SlurmSettings settings = merged(spec.slurm, o.slurm_flags);
  const SlurmJob job = slurm_job(spec, configs, tasks, sweep_dir, settings);
  if (o.dry_run) {
    fmt::print("--- {}/submit.sbatch (not written: --dry-run)\n{}", fs::absolute(sweep_dir).string(), job.script);
    return 0;
  }
  fs::create_directories(sweep_dir);
  const fs::path dir = fs::absolute(sweep_dir);
  write_file_atomic((dir / "points.txt").string(), job.points);
  write_file_atomic((dir / "submit.sbatch").string(), job.script);
  if (o.submit) {
    const std::string id = submit_job(dir / "submit.sbatch");
    for (size_t t : tasks) runs[t].job = fmt::format("{}_{}", id, t);
    fmt::print("submitted job {} (array {}); see where it stands with: hylo sweep status {}\n", id,
               array_ranges(tasks), sweep_dir.string());
  } else {
    fmt::print("wrote {0}/submit.sbatch (array {1}) and {0}/points.txt\nsubmit with: sbatch {0}/submit.sbatch\n",
               dir.string(), array_ranges(tasks));
  }
  write_file_atomic((sweep_dir / "sweep.json").string(), sweep_json(spec, runs, /*slurm=*/true));
  return 0;
}

}  // namespace

int run_sweep(const SweepRunOptions& o) {
  const std::vector<std::string>& cli_set = o.set;
  SweepSpec spec = load_sweep(o.file, cli_set);
  if (!o.tuned.empty()) apply_tuned(spec, o.tuned);
  const std::vector<Config> configs = check_sweep_configs(spec);
  const fs::path sweep_dir = fs::path(o.out) / spec.name;
  std::vector<PlannedRun> runs = plan_runs(spec, configs, sweep_dir);
  for (int index : o.only)
    HYLO_CHECK(index >= 0 && size_t(index) < runs.size(), "sweep: --only {}: {} has points 0 to {}", index, o.file,
               runs.size() - 1);
  const auto selected = [&](size_t i) { return o.only.empty() || std::ranges::count(o.only, int(i)) > 0; };

  fmt::print("sweep {}: {} points from {} into {}\n", spec.name, runs.size(), spec.base, sweep_dir.string());
  if (!cli_set.empty()) fmt::print("  every point also: {}\n", fmt::join(cli_set, " "));
  for (size_t i = 0; i < runs.size(); ++i) {
    const PlannedRun& run = runs[i];
    std::string overrides;
    for (const auto& [k, v] : run.point->varied) overrides += fmt::format("{}{}={}", overrides.empty() ? "" : " ", k, v);
    fmt::print("  {:<32} {}{}\n", run.point->name, overrides,
               run.finished ? "  (finished)" : run.running ? "  (running)" : !selected(i) ? "  (not in --only)" : "");
  }
  HYLO_CHECK(!o.submit || o.slurm, "sweep: --submit goes with --slurm");
  if (o.slurm) return slurm_sweep(o, spec, configs, runs, sweep_dir);
  if (o.dry_run) return 0;

  fs::create_directories(sweep_dir);
  const std::string json_path = (sweep_dir / "sweep.json").string();
  write_file_atomic(json_path, sweep_json(spec, runs, /*slurm=*/false));
  int failed = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    PlannedRun& run = runs[i];
    if (!selected(i)) continue;
    if (run.finished || run.running) {
      fmt::print("sweep: {} already {}, skipping\n", run.point->name, run.finished ? "finished" : "running");
      continue;
    }
    fmt::print("sweep: running {} ({})\n", run.point->name, run.run_dir.string());
    std::fflush(stdout);
    // One point failing (a NaN abort, a full disk) should not cost the rest of the sweep.
    if (spec.ranks > 1) {  // a job of its own: mpirun -np N hylo train ...
      std::string command = fmt::format("mpirun -np {} {} train {} --run-dir {} --resume auto", spec.ranks,
                                        shell_quote(self_binary().string()), shell_quote(spec.base),
                                        shell_quote(run.run_dir.string()));
      for (const std::string& o : run.point->overrides) command += " --set " + shell_quote(o);
      const int status = std::system(command.c_str());
      const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
      run.status = rc == 0 ? "done" : rc == kExitPreempted ? "preempted" : "failed";
      if (run.status == "failed") std::fprintf(stderr, "hylo: error: sweep point %s failed\n", run.point->name.c_str());
    } else {
      try {
        const int rc = run_train(TrainOptions{spec.base, run.point->overrides, run.run_dir.string(), "auto"});
        run.status = rc == 0 ? "done" : rc == kExitPreempted ? "preempted" : "failed";
      } catch (const std::exception& e) {
        std::fprintf(stderr, "hylo: error: sweep point %s: %s\n", run.point->name.c_str(), e.what());
        run.status = "failed";
      }
    }
    failed += run.status == "failed";
    write_file_atomic(json_path, sweep_json(spec, runs, /*slurm=*/false));
    if (run.status == "preempted") {  // a signal stopped the run: it stops the sweep too
      fmt::print("sweep {}: stopped on a signal during {} (checkpointed); the same command continues it\n", spec.name,
                 run.point->name);
      return kExitPreempted;
    }
  }
  fmt::print("sweep {}: {} points, {} failed; report with: hylo report {}\n", spec.name, runs.size(), failed,
             sweep_dir.string());
  return failed > 0 ? 1 : 0;
}

}  // namespace hylo
