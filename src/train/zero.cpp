#include "train/zero.h"

#include <algorithm>
#include <numeric>

#include "train/expert_parallel.h"

namespace hylo {

std::vector<int> assign_owners(const ParamList& params, int ranks, int expert_ranks) {
  std::vector<size_t> order(params.size());
  std::iota(order.begin(), order.end(), size_t(0));
  auto size = [&](size_t i) { return params[i].var.value().numel(); };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return size(a) > size(b); });
  std::vector<int64_t> load(size_t(ranks), 0), expert_load(size_t(expert_ranks), 0);
  std::vector<int> owner(params.size(), 0);
  for (size_t i : order) {
    std::vector<int64_t>& group = params[i].expert_shard ? expert_load : load;
    const int r = int(std::min_element(group.begin(), group.end()) - group.begin());
    owner[i] = r;
    group[size_t(r)] += size(i);
  }
  return owner;
}

void share_updated_params(ParamList& params, const std::vector<int>& owner, const OwnerGroups& groups) {
  for (const bool experts : {false, true}) {
    if (experts && !groups.expert_replicas) break;
    dist::Communicator& comm = experts ? *groups.expert_replicas : groups.all;
    for (int root = 0; root < comm.size(); ++root) {
      std::vector<Tensor> values;
      for (size_t i = 0; i < params.size(); ++i)
        if (params[i].expert_shard == experts && owner[i] == root) values.push_back(params[i].var.value());
      if (!values.empty()) comm.broadcast(std::move(values), root);
    }
  }
}

OptimizerState optimizer_state_on_rank0(AdamW& optimizer, const ParamList& params, const std::vector<int>& owner,
                                        const OwnerGroups& groups) {
  OptimizerState state;
  // Only the expert group that holds rank 0 gathers its experts: the others' would be dropped.
  int64_t holds_rank0 = groups.all.rank() == 0;
  if (groups.expert_group) groups.expert_group->sum(std::span<int64_t>(&holds_rank0, 1));
  for (size_t i = 0; i < params.size(); ++i) {
    // Owners send their tensors; the others receive into scratch of the parameter's shape.
    std::vector<Tensor> tensors;
    if (optimizer.owns(i)) {
      tensors = {optimizer.masters()[i], optimizer.moments_m()[i], optimizer.moments_v()[i]};
    } else {
      const Tensor& value = params[i].var.value();
      for (int k = 0; k < 3; ++k)
        tensors.push_back(Tensor::empty(value.shape(), DType::f32, value.device(), "zero gather"));
    }
    if (!owner.empty()) groups.of(params[i]).broadcast(tensors, owner[i]);
    if (params[i].expert_shard && holds_rank0)  // every rank now holds its rows: the group gathers them
      for (Tensor& t : tensors) t = gather_expert_rows(t, *groups.expert_group);
    if (groups.all.rank() != 0) continue;
    state.masters.push_back(tensors[0].to(Device::cpu));
    state.m.push_back(tensors[1].to(Device::cpu));
    state.v.push_back(tensors[2].to(Device::cpu));
  }
  return state;
}

}  // namespace hylo
