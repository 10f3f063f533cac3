#include "parallel/layout.h"

#include "core/error.h"

namespace hylo {

ParallelLayout::ParallelLayout(dist::Communicator& world, int expert_parallel, const std::string& where)
    : world_(world) {
  HYLO_CHECK(expert_parallel >= 1, "{}: train.expert_parallel={} must be at least 1", where, expert_parallel);
  HYLO_CHECK(world.size() % expert_parallel == 0, "{}: train.expert_parallel={} does not divide the {} ranks", where,
             expert_parallel, world.size());
  if (expert_parallel == 1) return;
  expert_group_ = world.split(world.rank() / expert_parallel, world.rank());
  expert_replicas_ = world.split(world.rank() % expert_parallel, world.rank());
}

ParallelLayout::ParallelLayout(dist::Communicator& world, std::unique_ptr<dist::Communicator> expert_group,
                               std::unique_ptr<dist::Communicator> expert_replicas)
    : world_(world), expert_group_(std::move(expert_group)), expert_replicas_(std::move(expert_replicas)) {
  HYLO_CHECK(!expert_group_ == !expert_replicas_, "parallel layout: an expert group without its replicas or back");
  HYLO_CHECK(!expert_group_ || expert_group_->size() * expert_replicas_->size() == world.size(),
             "parallel layout: expert groups of {} and replicas of {} do not make the {} ranks",
             expert_group_ ? expert_group_->size() : 0, expert_replicas_ ? expert_replicas_->size() : 0, world.size());
}

dist::Communicator& ParallelLayout::of(bool experts) const {
  HYLO_CHECK(!experts || expert_replicas_, "parallel layout: expert shards without expert parallelism");
  return experts ? *expert_replicas_ : world_;
}

std::string ParallelLayout::str() const {
  return "dp=" + std::to_string(dp()) + (expert_group_ ? ",ep=" + std::to_string(ep()) : "");
}

}  // namespace hylo
