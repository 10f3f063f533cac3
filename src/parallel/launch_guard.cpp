#include "parallel/launch_guard.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "core/error.h"

namespace hylo::dist {
namespace {

// What Open MPI's mpirun, MPICH's hydra and Slurm's PMI-2 / PMIx plugins set in each rank.
constexpr const char* kLauncherVariables[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
                                              "PMIX_RANK"};

const char* process_env(const char* name) { return std::getenv(name); }

bool launched(const std::function<const char*(const char*)>& env) {
  for (const char* name : kLauncherVariables)
    if (env(name) != nullptr) return true;
  return false;
}

// The first of `names` that is set, as a number (-1: none set or not a number).
long first_number(const std::function<const char*(const char*)>& env, std::initializer_list<const char*> names) {
  for (const char* name : names)
    if (const char* text = env(name)) {
      char* end = nullptr;
      const long value = std::strtol(text, &end, 10);
      return end != text && *end == '\0' ? value : -1;
    }
  return -1;
}

// This process's argv, words quoted for a shell where they need it.
std::string own_command() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string command;
  for (size_t at = 0; at < raw.size();) {
    size_t end = raw.find('\0', at);
    if (end == std::string::npos) end = raw.size();
    const std::string word = raw.substr(at, end - at);
    const bool plain = !word.empty() && word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                               "0123456789_-+=./,:@%") == std::string::npos;
    std::string quoted = "'";
    for (char ch : word) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    command += (command.empty() ? "" : " ") + (plain ? word : quoted + "'");
    at = end + 1;
  }
  return command.empty() ? "hylo train CONFIG" : command;
}

}  // namespace

std::string unconnected_launch(const std::function<const char*(const char*)>& env, const std::string& command) {
  if (launched(env)) return "";
  const char* tasks_text = env("SLURM_STEP_NUM_TASKS");
  const long tasks = tasks_text ? std::strtol(tasks_text, nullptr, 10) : 0;
  if (tasks <= 1) return "";
  return fmt::format(
      "srun started {0} tasks without MPI (no PMIX_RANK, PMI_RANK or OMPI_COMM_WORLD_RANK: srun --mpi=none?), so "
      "each would train alone into the same run directory; launch with `srun --mpi=pmix -n {0} {1}` (`srun "
      "--mpi=list` shows the plugins) or, inside the allocation, `mpirun -np {0} {1}`",
      tasks, command);
}

void check_launch() {
  const std::string refusal = unconnected_launch(process_env, own_command());
  HYLO_CHECK(refusal.empty(), "{}", refusal);
}

bool started_by_mpi_launcher() { return launched(process_env); }

LaunchPlace launch_place(const std::function<const char*(const char*)>& env) {
  if (!launched(env)) return {};
  // PMIx states no size of its own; srun sets SLURM_STEP_NUM_TASKS for each task of the step.
  const long rank = first_number(env, {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"});
  const long size = first_number(env, {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"});
  return {int(std::max(rank, 0L)), int(std::max(size, 1L))};
}

LaunchPlace launch_place() { return launch_place(process_env); }

}  // namespace hylo::dist
