// SPEC §8, a rank dying or hanging mid-run: the job ends with an error instead of waiting for ever.
// Runs as one process ("launch" suite): it starts `mpirun -np 2 hylo train` in the background,
// waits for training to be under way, then stops or kills rank 1.
#include <doctest/doctest.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <string>
#include <thread>

#include "../cpu/training_workspace.h"
#include "core/file.h"
#include "mpi_test_util.h"

using namespace hylo;
namespace fs = std::filesystem;

namespace {

// The pid of the rank `rank` process whose command line names `marker`, if it runs.
std::optional<pid_t> rank_pid(int rank, const std::string& marker) {
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string pid = entry.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string cmdline = read_file(entry.path().string() + "/cmdline").value_or("");
    if (cmdline.find(marker) == std::string::npos || cmdline.find("mpirun") != std::string::npos) continue;
    const std::string env = read_file(entry.path().string() + "/environ").value_or("");
    if (env.find("OMPI_COMM_WORLD_RANK=" + std::to_string(rank) + '\0') != std::string::npos) return pid_t(std::stoi(pid));
  }
  return std::nullopt;
}

// Waits up to `seconds` for `path` to exist.
bool appears(const fs::path& path, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!fs::exists(path)) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

// Every process whose command line names `marker` (mpirun and the ranks) gets SIGKILL: a failed
// check must not leave a job running.
struct KillOnExit {
  std::string marker;
  ~KillOnExit() { std::system(("pkill -9 -f '" + marker + "' >/dev/null 2>&1").c_str()); }
};

// When rank 1 gets the signal: as soon as its process exists (inside MPI's start-up or the work
// before step 1, each of which waits for every rank), or once 20 steps are logged.
enum class When { start_up, step_20 };

// Starts a long 2-rank run, sends `signal` to rank 1 at `when`, and returns mpirun's exit code
// and output (or fails when the job outlives 60 s).
std::pair<int, std::string> run_and_signal(const test::TrainingWorkspace& ws, const std::string& name, int signal,
                                           When when = When::step_20) {
  const fs::path run = ws.dir / name, rc = ws.dir / (name + ".rc"), log = ws.dir / (name + ".log");
  const KillOnExit cleanup{run.string()};
  const std::string command = test::mpirun(2) + ws.train(name, "--set train.steps=1000000 --set train.hang_timeout_s=5");
  REQUIRE(std::system(("(" + command + " >" + log.string() + " 2>&1; echo $? >" + rc.string() + ") &").c_str()) == 0);
  const auto started = std::chrono::steady_clock::now();
  auto give_up = [&] {
    REQUIRE_MESSAGE(std::chrono::steady_clock::now() - started < std::chrono::seconds(60), read_file(log.string()).value_or(""));
  };
  std::optional<pid_t> rank1;
  if (when == When::start_up) {
    while (!(rank1 = rank_pid(1, run.string()))) give_up();  // no sleep: the start-up lasts a second or so
  } else {
    while (read_file((run / "metrics.jsonl").string()).value_or("").find("\"step\":20,") == std::string::npos) {
      give_up();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    rank1 = rank_pid(1, run.string());
  }
  REQUIRE(rank1.has_value());
  REQUIRE(::kill(*rank1, signal) == 0);
  const bool ended = appears(rc, 60);
  const std::string why = "the job did not end after rank 1 got signal " + std::to_string(signal);
  REQUIRE_MESSAGE(ended, why);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the rc file's content
  return {std::stoi(read_file(rc.string()).value_or("0")), read_file(log.string()).value_or("")};
}

}  // namespace

TEST_SUITE("launch") {
  TEST_CASE("a rank that hangs: the others give up after train.hang_timeout_s with one line, and the job ends") {
    test::TrainingWorkspace ws("hang");
    const auto [rc, output] = run_and_signal(ws, "stopped", SIGSTOP);
    CHECK(rc != 0);
    CHECK_MESSAGE(output.find("hylo: error: rank 0: no progress for 5 s in step ") != std::string::npos, output);
  }

  TEST_CASE("a rank that hangs at start-up: the watchdog already watches MPI's start-up and what precedes step 1") {
    test::TrainingWorkspace ws("hang_start");
    const auto [rc, output] = run_and_signal(ws, "stopped", SIGSTOP, When::start_up);
    CHECK(rc != 0);
    CHECK_MESSAGE(std::regex_search(output, std::regex("hylo: error: rank 0: no progress for 5 s in (MPI's start-up|the "
                                                       "start-up: [a-z ]+) \\(another rank")),
                  output);
    CHECK(read_file((ws.dir / "stopped/metrics.jsonl").string()).value_or("").find("\"step\":1,") == std::string::npos);
  }

  TEST_CASE("a stop signal to one rank stops every rank at the same step boundary: one checkpoint, exit 75") {
    test::TrainingWorkspace ws("usr1");
    const auto [rc, output] = run_and_signal(ws, "preempted", SIGUSR1);
    CHECK_MESSAGE(rc == 75, output);
    std::smatch m;
    REQUIRE_MESSAGE(std::regex_search(output, m, std::regex("stopping after step ([0-9]+) on SIGUSR1")), output);
    const int64_t stop = std::stoll(m[1]);
    CHECK(fs::exists(ws.dir / "preempted/checkpoints" / ("step_" + std::to_string(stop) + ".h5")));
    CHECK(output.find("error") == std::string::npos);
  }

  TEST_CASE("a rank that dies: the job ends with an error instead of waiting") {
    test::TrainingWorkspace ws("dies");
    const auto [rc, output] = run_and_signal(ws, "killed", SIGKILL);
    CHECK(rc != 0);
  }
}
