// ZeRO-1 (SPEC §6; train.zero1): the optimizer state sharded over the data-parallel ranks. Each
// parameter has one owner rank, which alone receives the parameter's summed gradient (a reduce,
// GradientSync), keeps its moments (and on CUDA its fp32 master) and updates it; the new value then
// goes from the owner to the other ranks. The state is sharded by whole parameters, so the
// optimizer and the checkpoint format stay per parameter: a ZeRO-1 checkpoint resumes without
// ZeRO-1 or on another number of ranks.
#pragma once
#include <vector>

#include "dist/communicator.h"
#include "nn/parameter.h"
#include "train/optimizer.h"

namespace hylo {

// Owners, the same on every rank: largest parameter first, each to the rank with the fewest
// elements so far (ties: the lower rank).
std::vector<int> assign_owners(const ParamList& params, int ranks);

// After the owners' updates: each parameter's value (on CUDA the bf16 copy the forward reads) from
// its owner to the other ranks, one message per owner.
void share_updated_params(ParamList& params, const std::vector<int>& owner, dist::Communicator& comm);

// Every parameter's fp32 master and moments as CPU tensors on rank 0 (other ranks get empty
// vectors): what a checkpoint saves. Under ZeRO-1 each comes from its owner; without (owner
// empty) rank 0 holds them all.
struct OptimizerState {
  std::vector<Tensor> masters, m, v;
};
OptimizerState optimizer_state_on_rank0(AdamW& optimizer, const ParamList& params, const std::vector<int>& owner,
                                        dist::Communicator& comm);

}  // namespace hylo
