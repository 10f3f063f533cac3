// Expert parallelism's side of checkpoints (SPEC §6, §7). A checkpoint always holds every expert,
// as a single process lays them out, so that it loads on any layout: each rank of an
// expert-parallel group of P keeps rows [r E/P, (r + 1) E/P) of an expert-sharded parameter
// (Parameter::expert_shard) and its moments.
#pragma once
#include "core/tensor.h"
#include "parallel/communicator.h"

namespace hylo {

// The rows of `all` (E, ...) that rank `rank` of an expert-parallel group of `ranks` holds.
Tensor expert_rows(const Tensor& all, int rank, int ranks);

// The whole (E, ...) tensor, as a CPU tensor on rank 0 of `ep_group`, from every rank's rows
// `mine` (on the job's device) in rank order; an undefined tensor on the other ranks.
Tensor gather_expert_rows(const Tensor& mine, dist::Communicator& ep_group);

}  // namespace hylo
