#include "optim/optimizer.h"

#include "ops/optimizer_ops.h"

namespace hylo {

AdamW::AdamW(ParamList& params, AdamWOptions options, Device device, std::vector<ElementRange> owned)
    : params_(params), options_(options), device_(device), owned_(std::move(owned)) {
  if (owned_.empty())
    for (const Parameter& p : params_) owned_.push_back({0, p.var.value().numel()});
  HYLO_CHECK(owned_.size() == params_.size(), "optimizer: owned ranges of {} parameters for {}", owned_.size(),
             params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& value = params_[i].var.value();
    HYLO_CHECK(value.dtype() == DType::f32 && value.device() == Device::cpu,
               "optimizer: parameter {} must start as an fp32 CPU tensor", params_[i].name);
    const ElementRange r = owned_[i];
    HYLO_CHECK(r.begin >= 0 && r.begin <= r.end && r.end <= value.numel(),
               "optimizer: owned elements [{}, {}) of parameter {} outside its {}", r.begin, r.end, params_[i].name,
               value.numel());
    const bool own = r.size() > 0;
    master_.push_back(own && device != Device::cpu ? element_range(value, r).to(device) : Tensor());
    m_.push_back(own ? Tensor::zeros({r.size()}, DType::f32, device, "adam m") : Tensor());
    v_.push_back(own ? Tensor::zeros({r.size()}, DType::f32, device, "adam v") : Tensor());
    place_parameter(params_[i], device);
  }
}

Tensor AdamW::master(size_t i) const {
  if (owned_[i].size() == 0) return Tensor();
  return device_ == Device::cpu ? element_range(params_[i].var.value(), owned_[i]) : master_[i];
}

// Copies into the values, never replaces them: ZeRO-1 keeps them as views of its flat vectors.
void AdamW::load_masters(const std::vector<Tensor>& values_cpu) {
  HYLO_CHECK(values_cpu.size() == params_.size(), "optimizer: {} master tensors for {} parameters", values_cpu.size(),
             params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& value = params_[i].var.mutable_value();
    if (device_ == Device::cpu) {  // the masters are the parameters
      value.copy_from(values_cpu[i]);
      continue;
    }
    if (master_[i].defined()) master_[i].copy_from(element_range(values_cpu[i], owned_[i]).to(device_));
    value.copy_from(values_cpu[i].to(device_).to(DType::bf16));
  }
}

void AdamW::load_moments(const std::vector<Tensor>& m_cpu, const std::vector<Tensor>& v_cpu) {
  HYLO_CHECK(m_cpu.size() == m_.size() && v_cpu.size() == v_.size(), "optimizer: {} / {} moment tensors for {} parameters",
             m_cpu.size(), v_cpu.size(), m_.size());
  for (size_t i = 0; i < m_.size(); ++i) {
    if (!m_[i].defined()) continue;
    m_[i].copy_from(element_range(m_cpu[i], owned_[i]).to(device_));
    v_[i].copy_from(element_range(v_cpu[i], owned_[i]).to(device_));
  }
}

double AdamW::grad_norm(std::optional<bool> only) const {
  std::vector<Tensor> grads;  // views into the gradients' own storage
  for (size_t i = 0; i < params_.size(); ++i) {
    const Var& v = params_[i].var;
    if (owned_[i].size() == 0 || !v.has_grad() || (only && params_[i].expert_shard != *only)) continue;
    grads.push_back(element_range(v.grad(), owned_[i]));
  }
  return global_norm(grads);  // 0 for a ZeRO-1 rank that owns nothing
}

void AdamW::step(double lr, double grad_scale) {
  ++step_;
  for (size_t i = 0; i < params_.size(); ++i) {
    Parameter& p = params_[i];
    const ElementRange r = owned_[i];
    if (r.size() == 0 || !p.var.has_grad()) continue;
    AdamWHyper hp;
    hp.lr = float(lr);
    hp.beta1 = float(options_.beta1);
    hp.beta2 = float(options_.beta2);
    hp.eps = float(options_.eps);
    hp.weight_decay = p.weight_decay ? float(options_.weight_decay) : 0.0f;
    hp.grad_scale = float(grad_scale);
    hp.step = step_;
    hp.param_index = uint32_t(i);
    const Tensor compute = device_ == Device::cpu ? Tensor() : element_range(p.var.mutable_value(), r);
    adamw_update(master(i), m_[i], v_[i], element_range(p.var.grad(), r), compute, hp);
  }
}

void AdamW::zero_grad() {
  for (Parameter& p : params_) p.var.zero_grad();
}

}  // namespace hylo
