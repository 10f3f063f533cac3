#include "parallel/zero.h"

#include <algorithm>
#include <array>

#include "core/error.h"
#include "parallel/expert_parallel.h"

namespace hylo {

namespace {

int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

}  // namespace

ZeroLayout::ZeroLayout(const ParamList& params, const std::vector<std::vector<size_t>>& buckets,
                       const ParallelLayout& layout)
    : layout_(layout), flats_(buckets.size()), owned_(params.size()) {
  for (size_t b = 0; b < buckets.size(); ++b) {
    for (const bool experts : {false, true}) {
      Flat f;
      f.experts = experts;
      for (size_t i : buckets[b]) {
        if (params[i].expert_shard != experts) continue;
        f.params.push_back(i);
        f.offset.push_back(f.length);
        f.length = round_up(f.length + params[i].var.value().numel(), kAlign);
      }
      if (f.params.empty()) continue;
      HYLO_CHECK(!experts || layout.expert_replicas(), "ZeRO-1: expert shards without their replicas' communicator");
      f.length = round_up(f.length, layout.of(experts).size() * kAlign);
      flats_[b].push_back(std::move(f));
    }
  }
  // A parameter's owned elements: where this rank's part of its flat vector overlaps it.
  for (const std::vector<Flat>& bucket : flats_)
    for (const Flat& f : bucket) {
      const int64_t begin = part_begin(f), end = begin + part_size(f);
      for (size_t k = 0; k < f.params.size(); ++k) {
        const int64_t first = f.offset[k], last = first + params[f.params[k]].var.value().numel();
        if (std::max(begin, first) < std::min(end, last))
          owned_[f.params[k]] = {std::max(begin, first) - first, std::min(end, last) - first};
      }
    }
}

Tensor ZeroLayout::pack(const Flat& f, const std::function<Tensor(size_t)>& whole, DType dtype, Device device) const {
  Tensor flat = Tensor::zeros({f.length}, dtype, device, "zero flat");
  for (size_t k = 0; k < f.params.size(); ++k) {
    const Tensor t = whole(f.params[k]);
    flat.slice(0, f.offset[k], f.offset[k] + t.numel()).copy_from(t.view({-1}));
  }
  return flat;
}

Tensor ZeroLayout::gather(const Flat& f, const std::function<Tensor(size_t)>& owned_of, DType dtype,
                          Device device) const {
  Tensor flat = Tensor::zeros({f.length}, dtype, device, "zero gather");
  for (size_t k = 0; k < f.params.size(); ++k) {
    const ElementRange r = owned_[f.params[k]];
    if (r.size() == 0) continue;
    const int64_t at = f.offset[k] + r.begin;
    flat.slice(0, at, at + r.size()).copy_from(owned_of(f.params[k]));
  }
  comm(f).all_gather(flat);
  return flat;
}

Tensor ZeroLayout::param_view(const Tensor& flat, const Flat& f, size_t k, const Shape& shape) {
  return flat.slice(0, f.offset[k], f.offset[k] + shape_numel(shape)).view(shape);
}

void ZeroLayout::bind_values(ParamList& params) {
  HYLO_CHECK(values_.empty() && params.size() == owned_.size(), "ZeRO-1: bind_values once, on the layout's parameters");
  for (const std::vector<Flat>& bucket : flats_) {
    values_.emplace_back();
    for (const Flat& f : bucket) {
      const Tensor& first = params[f.params[0]].var.value();
      values_.back().push_back(pack(f, [&](size_t i) { return params[i].var.value(); }, first.dtype(), first.device()));
      for (size_t k = 0; k < f.params.size(); ++k) {
        Tensor& value = params[f.params[k]].var.mutable_value();
        value = param_view(values_.back().back(), f, k, value.shape());
      }
    }
  }
}

void ZeroLayout::share_updated_values() {
  HYLO_CHECK(!values_.empty(), "ZeRO-1: share_updated_values before bind_values");
  for (size_t b = 0; b < flats_.size(); ++b)
    for (size_t k = 0; k < flats_[b].size(); ++k) comm(flats_[b][k]).all_gather(values_[b][k]);
}

void ZeroLayout::zero_grads(ParamList& params) {
  HYLO_CHECK(params.size() == owned_.size(), "ZeRO-1: zero_grads on {} parameters, the layout has {}", params.size(),
             owned_.size());
  const bool first = grads_.empty();
  if (first) grads_.resize(flats_.size());
  for (size_t b = 0; b < flats_.size(); ++b)
    for (size_t k = 0; k < flats_[b].size(); ++k) {
      const Flat& f = flats_[b][k];
      if (first) {
        const Tensor& value = params[f.params[0]].var.value();
        grads_[b].push_back(Tensor::empty({f.length}, value.dtype(), value.device(), "zero grads"));
      }
      grads_[b][k].fill_(0.0);  // one fill, the padding with the rest (its sums are never read)
      for (size_t j = 0; j < f.params.size(); ++j) {
        Var& var = params[f.params[j]].var;
        var.mutable_grad() = param_view(grads_[b][k], f, j, var.shape());
      }
    }
}

const Tensor& ZeroLayout::flat_grads(size_t bucket, size_t k, const ParamList& params) const {
  HYLO_CHECK(bucket < grads_.size(), "ZeRO-1: gradients summed before zero_grads");
  const Tensor& flat = grads_[bucket][k];
  for (size_t i : flats_[bucket][k].params)
    HYLO_CHECK(params[i].var.has_grad() && params[i].var.grad().same_storage(flat),
               "ZeRO-1: the gradient of {} was replaced instead of accumulated into its flat vector", params[i].name);
  return flat;
}

OptimizerState optimizer_state_on_rank0(const AdamW& optimizer, const ParamList& params, const ZeroLayout* zero,
                                        const ParallelLayout& layout) {
  OptimizerState state;
  const bool leader = layout.leader();
  if (leader) {
    state.masters.resize(params.size());
    state.m.resize(params.size());
    state.v.resize(params.size());
  }
  // Only the expert group that holds rank 0 gathers its experts: the others' would be dropped.
  int64_t holds_rank0 = leader;
  if (layout.expert_group()) layout.expert_group()->sum(std::span<int64_t>(&holds_rank0, 1));
  // Parameter i's whole master and moments (on the job's device, this rank's expert rows) to rank 0.
  auto keep = [&](size_t i, std::array<Tensor, 3> whole) {
    if (params[i].expert_shard && holds_rank0)
      for (Tensor& t : whole) t = gather_expert_rows(t, *layout.expert_group());
    if (!leader) return;
    state.masters[i] = whole[0].to(Device::cpu);
    state.m[i] = whole[1].to(Device::cpu);
    state.v[i] = whole[2].to(Device::cpu);
  };
  if (!zero) {
    for (size_t i = 0; i < params.size(); ++i) {
      const Shape& shape = params[i].var.value().shape();
      keep(i, {optimizer.master(i).view(shape), optimizer.moment_m(i).view(shape), optimizer.moment_v(i).view(shape)});
    }
    return state;
  }
  const Device device = params.front().var.value().device();
  for (size_t b = 0; b < zero->buckets(); ++b)
    for (const ZeroLayout::Flat& f : zero->flats(b)) {
      const Tensor masters = zero->gather(f, [&](size_t i) { return optimizer.master(i); }, DType::f32, device);
      const Tensor m = zero->gather(f, [&](size_t i) { return optimizer.moment_m(i); }, DType::f32, device);
      const Tensor v = zero->gather(f, [&](size_t i) { return optimizer.moment_v(i); }, DType::f32, device);
      for (size_t k = 0; k < f.params.size(); ++k) {
        const Shape& shape = params[f.params[k]].var.value().shape();
        keep(f.params[k], {ZeroLayout::param_view(masters, f, k, shape), ZeroLayout::param_view(m, f, k, shape),
                           ZeroLayout::param_view(v, f, k, shape)});
      }
    }
  return state;
}

}  // namespace hylo
