// What the mpi suites share: rank micro-batches, launching `mpirun -np N hylo ...`, and reading
// a run's metrics.
#pragma once
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "../cpu/run_command.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace hylo::test {

// Micro-batch m of rank q, drawn from `seed`: (inputs (2, 9), targets (18)) over 29 tokens.
inline std::pair<Tensor, Tensor> rank_micro_batch(int q, int m, uint64_t seed) {
  Rng rng{seed, uint64_t(q), uint64_t(m)};
  std::vector<int32_t> ids(18), targets(18);
  for (auto& x : ids) x = int32_t(rng.below(29));
  for (auto& x : targets) x = int32_t(rng.below(29));
  return {Tensor::from_vector(ids, {2, 9}), Tensor::from_vector(targets, {18})};
}

// The launcher prefix for `ranks` processes. Open MPI refuses to start as root without the two
// variables (CI runs as root); --oversubscribe: any rank count on any core count.
inline std::string mpirun(int ranks) {
  return "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " MPIEXEC " -np " + std::to_string(ranks) +
         " --oversubscribe ";
}

inline CommandResult succeeds(const std::string& command) {
  auto result = run_command(command);
  REQUIRE_MESSAGE(result.exit_code == 0, result.output);
  return result;
}

// The last value of `key` in the rows of RUN_DIR/metrics.jsonl.
inline double last_metric(const std::filesystem::path& run_dir, const std::string& key) {
  std::ifstream in(run_dir / "metrics.jsonl");
  double value = 0;
  bool found = false;
  for (std::string line; std::getline(in, line);)
    if (const nlohmann::json row = nlohmann::json::parse(line); row.contains(key)) value = row[key].get<double>(), found = true;
  REQUIRE_MESSAGE(found, key << " in " << (run_dir / "metrics.jsonl").string());
  return value;
}

}  // namespace hylo::test
