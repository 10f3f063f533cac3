// A scheduler's signals and a second process on a live run (SPEC §7-8), through `hylo train`
// itself: SIGUSR1 mid-run checkpoints the step under way and exits 75, the resumed run follows the
// uninterrupted curve bit for bit, a second signal stops at once, and a second launch on the live
// run directory is refused naming the holder.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "checkpoint/checkpoint.h"
#include "checkpoint/run_state.h"
#include "core/file.h"
#include "run_command.h"
#include "train/stop_signal.h"
#include "training_workspace.h"

using namespace hylo;
namespace fs = std::filesystem;

namespace {

// `hylo train` in the background, its output in `log`; its own pid (the shell execs it).
pid_t spawn(const std::string& command, const fs::path& log) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const std::string line = "exec " + command + " >" + log.string() + " 2>&1";
    ::execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

// The last training step in the run's metrics.jsonl.
int64_t last_step(const fs::path& run) {
  std::ifstream in(run / "metrics.jsonl");
  int64_t step = 0;
  std::smatch m;
  for (std::string line; std::getline(in, line);)
    if (line.find("\"loss\"") != std::string::npos && std::regex_search(line, m, std::regex("\"step\":([0-9]+)")))
      step = std::stoll(m[1]);
  return step;
}

void wait_for_step(const fs::path& run, int64_t step, const fs::path& log) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (last_step(run) < step) {
    REQUIRE_MESSAGE(std::chrono::steady_clock::now() < until, read_file(log).value_or(""));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

int wait_status(pid_t pid) {
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return status;
}

// Long enough to be signalled mid-run (at step kSignalAt, with 700 steps still to go: about a second in a
// release build, far more under the sanitizers); evaluations take much of the time, so the signal
// often lands in one. (2000 steps with 60 eval batches took 191-228 s under ASan.)
constexpr int64_t kSteps = 800, kSignalAt = 100;
const std::string kLong = fmt::format("--set train.steps={} --set train.eval_every=10 --set train.eval_batches=30 "
                                      "--set train.log_every=500",
                                      kSteps);

}  // namespace

TEST_CASE("SIGUSR1 mid-run: checkpoint of the step under way, exit 75, a live run refuses a second launch, a "
          "relaunch without --resume is refused, and --resume auto follows the uninterrupted curve bit for bit") {
  test::TrainingWorkspace ws("preempt");
  const auto straight = test::run_command(ws.train("straight", kLong));
  REQUIRE_MESSAGE(straight.exit_code == 0, straight.output);

  const fs::path run = ws.dir / "run", log = ws.dir / "run.log";
  const pid_t pid = spawn(ws.train("run", kLong), log);
  wait_for_step(run, kSignalAt, log);
  // A second process on the live run directory: refused, naming the holder; nothing of it written.
  const auto second = test::run_command(ws.train("run", kLong + " --resume auto"));
  CHECK(second.exit_code == 1);
  CHECK_MESSAGE(second.output.find(fmt::format("hylo: error: run directory {} is in use by pid {} on host ", run.string(),
                                               pid)) != std::string::npos,
                second.output);
  CHECK(read_run_state(run.string())->state == "running");

  REQUIRE(::kill(pid, SIGUSR1) == 0);
  const int status = wait_status(pid);
  const std::string out = read_file(log).value_or("");
  REQUIRE_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) == kExitPreempted), out);
  std::smatch m;
  REQUIRE_MESSAGE(std::regex_search(out, m, std::regex("stopping after step ([0-9]+) on SIGUSR1: ([^;]+); exit 75")), out);
  const int64_t stop = std::stoll(m[1]);
  CHECK(stop >= kSignalAt);
  CHECK(stop < kSteps);
  CHECK(m[2] == checkpoint_path(run.string(), stop));
  CHECK(last_step(run) == stop);  // the step it was in finished; none after it began
  CHECK(load_checkpoint(checkpoint_path(run.string(), stop), false).step == stop);
  const RunState state = read_run_state(run.string()).value();
  CHECK((state.state == "preempted" && state.step == stop && state.detail == "SIGUSR1"));
  CHECK(run_report(run.string(), kSteps).status == RunStatus::preempted);

  // Without --resume: refused, every row kept.
  const std::string rows_before = read_file(run / "metrics.jsonl").value();
  const auto fresh = test::run_command(ws.train("run", kLong));
  CHECK(fresh.exit_code == 1);
  CHECK(fresh.output.find("already holds a run (") != std::string::npos);
  CHECK(fresh.output.find("use --resume auto to continue it or --overwrite to start over") != std::string::npos);
  CHECK(read_file(run / "metrics.jsonl").value() == rows_before);

  const auto resumed = test::run_command(ws.train("run", kLong + " --resume auto"));
  REQUIRE_MESSAGE(resumed.exit_code == 0, resumed.output);
  CHECK(resumed.output.find(fmt::format("step_{}.h5 at step {}", stop, stop)) != std::string::npos);
  const auto a = ws.loss_rows("straight"), b = ws.loss_rows("run");
  REQUIRE(a.size() == size_t(kSteps));
  CHECK(a == b);
  CHECK(read_run_state(run.string())->state == "finished");
  CHECK(run_report(run.string(), kSteps).status == RunStatus::finished);
}

TEST_CASE("a second stop signal ends hylo train at once, by that signal") {
  test::TrainingWorkspace ws("second_signal");
  const fs::path run = ws.dir / "run", log = ws.dir / "run.log";
  const pid_t pid = spawn(ws.train("run", kLong), log);
  wait_for_step(run, 50, log);
  // Two different signals: two of one kind may merge into one while the first is pending.
  REQUIRE(::kill(pid, SIGUSR1) == 0);
  REQUIRE(::kill(pid, SIGTERM) == 0);
  const int status = wait_status(pid);
  CHECK_MESSAGE(WIFSIGNALED(status), read_file(log).value_or(""));
  // The kernel picks which pending one comes first; the other is the second, and ends it.
  CHECK((WTERMSIG(status) == SIGTERM || WTERMSIG(status) == SIGUSR1));
}
