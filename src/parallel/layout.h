// How a training job's ranks are laid out (SPEC §6), in one object as torchtitan's ParallelDims:
// the degrees, their check against the world size, and the communicator of each group.
//
// Every rank is a data-parallel replica of the replicated parameters (dp = the world size) and
// reads its own data. Expert parallelism of degree ep > 1 borrows ep ranks at a time from them:
// ranks r with equal r / ep form an expert group, which shares out the experts; ranks with equal
// r % ep hold the same experts and sum their gradients (the expert replicas).
#pragma once
#include <memory>
#include <string>

#include "parallel/communicator.h"

namespace hylo {

class ParallelLayout {
 public:
  // Checks the degrees against `world` (errors are one line naming `where`, the config they come
  // from) and splits the groups: a collective, every rank calls it. `world` must outlive the layout.
  ParallelLayout(dist::Communicator& world, int expert_parallel, const std::string& where);
  // A layout over groups split elsewhere (tests pretend to be one rank of many with them): both
  // groups or neither, of sizes whose product is the world's.
  ParallelLayout(dist::Communicator& world, std::unique_ptr<dist::Communicator> expert_group,
                 std::unique_ptr<dist::Communicator> expert_replicas);
  ParallelLayout(const ParallelLayout&) = delete;
  ParallelLayout& operator=(const ParallelLayout&) = delete;

  int world_size() const { return world_.size(); }
  int rank() const { return world_.rank(); }
  bool leader() const { return world_.rank() == 0; }  // writes logs and checkpoints
  int dp() const { return world_.size(); }
  int ep() const { return expert_group_ ? expert_group_->size() : 1; }
  bool expert_parallel() const { return expert_group_ != nullptr; }

  dist::Communicator& world() const { return world_; }
  // Expert parallelism's groups; null without it.
  dist::Communicator* expert_group() const { return expert_group_.get(); }
  dist::Communicator* expert_replicas() const { return expert_replicas_.get(); }
  // The ranks over which a class of parameters sums its gradients and shards its optimizer
  // state: every rank, or for expert shards (Parameter::expert_shard) the expert replicas.
  dist::Communicator& of(bool experts) const;

  // "dp=4" or "dp=4,ep=2": the checkpoint's /meta/layout.
  std::string str() const;

 private:
  dist::Communicator& world_;
  std::unique_ptr<dist::Communicator> expert_group_, expert_replicas_;
};

}  // namespace hylo
