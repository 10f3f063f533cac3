// ZeRO-1 (SPEC §6; train.zero1): the optimizer state sharded over the data-parallel ranks. Each
// parameter has one owner rank, which alone receives the parameter's summed gradient (a reduce,
// GradientSync), keeps its moments (and on CUDA its fp32 master) and updates it; the new value then
// goes from the owner to the other ranks. The state is sharded by whole parameters, so the
// optimizer and the checkpoint format stay per parameter: a ZeRO-1 checkpoint resumes without
// ZeRO-1 or on another number of ranks. Under expert parallelism an expert shard is owned among
// the ranks that hold the same experts (its owner is a rank of that group), the rest among all.
#pragma once
#include <vector>

#include "dist/communicator.h"
#include "nn/parameter.h"
#include "train/optimizer.h"

namespace hylo {

// The ranks a parameter's owner is one of: `comm`, or for an expert shard `expert_replicas`.
struct OwnerGroups {
  dist::Communicator& all;
  dist::Communicator* expert_replicas = nullptr;  // expert parallelism's, or none
  dist::Communicator* expert_group = nullptr;     // the ranks that share out the experts, or none
  dist::Communicator& of(const Parameter& p) const { return p.expert_shard ? *expert_replicas : all; }
};

// Owners, the same on every rank: largest parameter first, each to the rank with the fewest
// elements so far (ties: the lower rank); the replicated parameters over `ranks`, the expert
// shards, separately, over `expert_ranks`.
std::vector<int> assign_owners(const ParamList& params, int ranks, int expert_ranks = 1);

// After the owners' updates: each parameter's value (on CUDA the bf16 copy the forward reads) from
// its owner to the other ranks of its group, one message per owner.
void share_updated_params(ParamList& params, const std::vector<int>& owner, const OwnerGroups& groups);

// Every parameter's fp32 master and moments as CPU tensors on rank 0 (other ranks get empty
// vectors): what a checkpoint saves. Under ZeRO-1 each comes from its owner; without (owner
// empty) rank 0 holds them all. Expert shards come whole: rank 0's expert group gathers its ranks'
// rows (train/expert_parallel.h). Every rank must call this.
struct OptimizerState {
  std::vector<Tensor> masters, m, v;
};
OptimizerState optimizer_state_on_rank0(AdamW& optimizer, const ParamList& params, const std::vector<int>& owner,
                                        const OwnerGroups& groups);

}  // namespace hylo
