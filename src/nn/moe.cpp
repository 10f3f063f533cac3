#include "nn/moe.h"

#include <algorithm>
#include <cmath>

#include "ops/ops.h"

namespace hylo {

int64_t MoeLayerStats::min_load() const {
  return tokens_per_expert.empty() ? 0 : *std::min_element(tokens_per_expert.begin(), tokens_per_expert.end());
}

int64_t MoeLayerStats::max_load() const {
  return tokens_per_expert.empty() ? 0 : *std::max_element(tokens_per_expert.begin(), tokens_per_expert.end());
}

double MoeLayerStats::load_cv() const {
  if (tokens_per_expert.empty()) return 0.0;
  double mean = 0, var = 0;
  for (int64_t c : tokens_per_expert) mean += double(c);
  mean /= double(tokens_per_expert.size());
  if (mean == 0) return 0.0;
  for (int64_t c : tokens_per_expert) var += (double(c) - mean) * (double(c) - mean);
  return std::sqrt(var / double(tokens_per_expert.size())) / mean;
}

MoeFeedForward::MoeFeedForward(ParamList& params, int layer, const ModelConfig& c, uint64_t seed)
    : experts_(c.moe.experts),
      top_k_(c.moe.top_k),
      router_(router_kind(c.moe.router)),
      aux_coef_(c.moe.aux_loss_coef),
      bias_rate_(c.moe.bias_update_rate),
      capacity_factor_(c.moe.capacity_factor) {
  HYLO_CHECK(experts_ > 0 && 0 < top_k_ && top_k_ <= experts_, "moe: top_k={} must be in [1, experts={}]", top_k_,
             experts_);
  const int64_t D = c.d_model, E = experts_, F = c.expert_hidden_size();
  const double std = c.init_std, out_std = c.init_std / std::sqrt(2.0 * c.n_layers);  // as the dense FFN
  const std::string p = "blocks." + std::to_string(layer) + ".moe.";
  router_ED = make_parameter(params, p + "router", {E, D}, std, true, seed);
  w_in_E2FD = make_parameter(params, p + "w_in", {E, 2 * F, D}, std, true, seed);
  w_out_EDF = make_parameter(params, p + "w_out", {E, D, F}, out_std, true, seed);
  if (c.moe.shared_experts > 0) {
    const int64_t S = int64_t(c.moe.shared_experts) * F;
    shared_w_in_2SD = make_parameter(params, p + "shared.w_in", {2 * S, D}, std, true, seed);
    shared_w_out_DS = make_parameter(params, p + "shared.w_out", {D, S}, out_std, true, seed);
  }
  bias_name_ = p + "router_bias";
  bias_E_ = Tensor::zeros({E}, DType::f32, Device::cpu, "moe router bias");
  load_tally_E_.assign(size_t(E), 0);
  stats_.layer = layer;
}

Var MoeFeedForward::forward(const Var& x_ND, Var* aux_loss) const {
  HYLO_CHECK(x_ND.value().dim() == 2, "moe: input {} must be (N, D)", shape_str(x_ND.shape()));
  const int64_t N = x_ND.shape()[0];
  Var scores_NE = moe_router_scores(moe_router_logits(x_ND, router_ED), router_);
  const Tensor expert_NK = moe_topk(scores_NE.value(), selection_bias(x_ND.value().device()), top_k_);
  Var w_NK = moe_gate_weights(scores_NE, expert_NK);
  const MoePlan plan = moe_plan(expert_NK, experts_, moe_capacity(capacity_factor_, N, top_k_, experts_));

  // Step 1 (permute) and step 2 (combine) bracket the experts; see ops/moe.h.
  Var y_ND = moe_combine(experts(moe_permute(x_ND, plan), plan), w_NK, plan);
  if (shared_w_in_2SD.defined())  // summed into the shared branch's linear output, read by no backward
    y_ND = residual_add(y_ND, linear(swiglu(linear(x_ND, shared_w_in_2SD)), shared_w_out_DS));

  stats_.aux_loss = 0;
  pending_aux_ = Tensor();
  if (aux_loss && aux_coef_ > 0) {
    *aux_loss = moe_aux_loss(scores_NE, plan, router_, aux_coef_);
    pending_aux_ = aux_loss->value();
  }
  const std::vector<int32_t> routed = plan.routed_E.to_vector<int32_t>();
  stats_.tokens_per_expert.assign(routed.begin(), routed.end());
  stats_.assignments = N * top_k_;
  stats_.dropped = plan.dropped;
  // Only training passes steer the bias: evaluation (no grad) must not change the model.
  if (grad_enabled())
    for (int e = 0; e < experts_; ++e) load_tally_E_[size_t(e)] += routed[size_t(e)];
  return y_ND;
}

Var MoeFeedForward::experts(const Var& xs_AD, const MoePlan& plan) const {
  if (!exchange_) return local_experts(xs_AD, plan);
  return exchange_->run(xs_AD, plan, [this](const Var& rows, const MoePlan& local) { return local_experts(rows, local); });
}

Var MoeFeedForward::local_experts(const Var& xs_AD, const MoePlan& plan) const {
  return moe_grouped_linear(swiglu(moe_grouped_linear(xs_AD, w_in_E2FD, plan)), w_out_EDF, plan);
}

void MoeFeedForward::shard_experts(ParamList& params, const ExpertExchange& exchange) {
  const int P = exchange.ranks();
  HYLO_CHECK(experts_ % P == 0, "moe: {} experts do not split over {} expert-parallel ranks", experts_, P);
  const int L = experts_ / P, first = exchange.rank() * L;
  for (Var* w : {&w_in_E2FD, &w_out_EDF}) {
    const Tensor rows = w->value().slice(0, first, first + L);
    Tensor mine = Tensor::empty(rows.shape(), rows.dtype(), rows.device(), "expert shard");
    mine.copy_from(rows);  // a copy: the other experts' rows are freed
    w->mutable_value() = mine;
    for (Parameter& p : params)
      if (p.name == w->name()) p.expert_shard = true;
  }
  exchange_ = &exchange;
}

const MoeLayerStats& MoeFeedForward::stats() const {
  if (pending_aux_.defined()) {
    stats_.aux_loss = pending_aux_.to(Device::cpu).to(DType::f64).to_vector<double>()[0];
    pending_aux_ = Tensor();
  }
  return stats_;
}

Tensor MoeFeedForward::selection_bias(Device device) const {
  const float* bias = bias_E_.data<float>();
  if (std::all_of(bias, bias + experts_, [](float b) { return b == 0.f; })) return Tensor();
  if (device == Device::cpu) return bias_E_;
  // Compared by value, not tracked by writer: an update and a restored checkpoint both show.
  if (!device_bias_E_.defined() || !std::equal(bias, bias + experts_, device_bias_of_.begin())) {
    device_bias_E_ = bias_E_.to(device);
    device_bias_of_.assign(bias, bias + experts_);
  }
  return device_bias_E_;
}

void MoeFeedForward::update_router_bias() {
  int64_t total = 0;
  for (int64_t c : load_tally_E_) total += c;
  if (bias_rate_ > 0 && total > 0) {
    // DeepSeek-V3: under-loaded experts gain bias, over-loaded lose it, by a fixed step.
    const double mean = double(total) / experts_;
    float* bias = bias_E_.data<float>();
    for (int e = 0; e < experts_; ++e) {
      const double gap = mean - double(load_tally_E_[size_t(e)]);
      bias[e] += float(bias_rate_) * float((gap > 0) - (gap < 0));
    }
  }
  discard_router_load();
}

void MoeFeedForward::discard_router_load() { std::fill(load_tally_E_.begin(), load_tally_E_.end(), 0); }

}  // namespace hylo
