// What the mpi suites share: rank micro-batches, and launching `mpirun -np N hylo ...`.
#pragma once
#include <doctest/doctest.h>

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

}  // namespace hylo::test
