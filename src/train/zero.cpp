#include "train/zero.h"

#include <algorithm>
#include <numeric>

namespace hylo {

std::vector<int> assign_owners(const ParamList& params, int ranks) {
  std::vector<size_t> order(params.size());
  std::iota(order.begin(), order.end(), size_t(0));
  auto size = [&](size_t i) { return params[i].var.value().numel(); };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return size(a) > size(b); });
  std::vector<int64_t> load(size_t(ranks), 0);
  std::vector<int> owner(params.size(), 0);
  for (size_t i : order) {
    const int r = int(std::min_element(load.begin(), load.end()) - load.begin());
    owner[i] = r;
    load[size_t(r)] += size(i);
  }
  return owner;
}

void share_updated_params(ParamList& params, const std::vector<int>& owner, dist::Communicator& comm) {
  for (int root = 0; root < comm.size(); ++root) {
    std::vector<Tensor> values;
    for (size_t i = 0; i < params.size(); ++i)
      if (owner[i] == root) values.push_back(params[i].var.value());
    if (!values.empty()) comm.broadcast(std::move(values), root);
  }
}

OptimizerState optimizer_state_on_rank0(AdamW& optimizer, const ParamList& params, const std::vector<int>& owner,
                                        dist::Communicator& comm) {
  OptimizerState state;
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
    if (!owner.empty()) comm.broadcast(tensors, owner[i]);
    if (comm.rank() != 0) continue;
    state.masters.push_back(tensors[0].to(Device::cpu));
    state.m.push_back(tensors[1].to(Device::cpu));
    state.v.push_back(tensors[2].to(Device::cpu));
  }
  return state;
}

}  // namespace hylo
