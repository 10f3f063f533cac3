#include "parallel/launch_guard.h"

#include <cstdlib>
#include <fstream>
#include <iterator>

#include "core/error.h"

namespace hylo::dist {
namespace {

// What Open MPI's mpirun, MPICH's hydra and Slurm's PMI-2 / PMIx plugins set in each rank.
constexpr const char* kLauncherVariables[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
                                              "PMIX_RANK"};

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
  for (const char* name : kLauncherVariables)
    if (env(name) != nullptr) return "";
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
  const std::string refusal = unconnected_launch([](const char* name) { return std::getenv(name); }, own_command());
  HYLO_CHECK(refusal.empty(), "{}", refusal);
}

}  // namespace hylo::dist
