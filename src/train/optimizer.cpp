#include "train/optimizer.h"

#include <cmath>

#include "ops/cpu/adamw.h"
#include "ops/cpu/elementwise.h"

namespace hylo {

AdamW::AdamW(ParamList& params, AdamWOptions options, Device device)
    : params_(params), options_(options), device_(device) {
  for (Parameter& p : params_) {
    const Tensor& value = p.var.value();
    HYLO_CHECK(value.dtype() == DType::f32 && value.device() == Device::cpu,
               "optimizer: parameter {} must start as an fp32 CPU tensor", p.name);
    master_.push_back(device == Device::cpu ? value : value.to(device));
    m_.push_back(Tensor::zeros(value.shape(), DType::f32, device, "adam m"));
    v_.push_back(Tensor::zeros(value.shape(), DType::f32, device, "adam v"));
  }
  refresh_compute_copies();
}

void AdamW::refresh_compute_copies() {
  if (device_ == Device::cpu) return;  // the masters are the parameters
  for (size_t i = 0; i < params_.size(); ++i) params_[i].var.mutable_value() = master_[i].to(DType::bf16);
}

void AdamW::load_masters(const std::vector<Tensor>& values_cpu) {
  HYLO_CHECK(values_cpu.size() == master_.size(), "optimizer: {} master tensors for {} parameters", values_cpu.size(),
             master_.size());
  for (size_t i = 0; i < master_.size(); ++i) master_[i].copy_from(values_cpu[i].to(device_));
  refresh_compute_copies();
}

double AdamW::grad_norm() const {
  std::vector<const float*> buffers;
  std::vector<int64_t> sizes;
  for (const Parameter& p : params_) {
    if (!p.var.has_grad()) continue;
    HYLO_CHECK(device_ == Device::cpu, "optimizer: cuda grad norm not wired yet");
    buffers.push_back(p.var.grad().data<float>());
    sizes.push_back(p.var.grad().numel());
  }
  return cpu::global_norm(int(buffers.size()), buffers.data(), sizes.data());
}

void AdamW::step(double lr, double grad_scale) {
  ++step_;
  for (size_t i = 0; i < params_.size(); ++i) {
    Parameter& p = params_[i];
    if (!p.var.has_grad()) continue;
    const double decay = p.weight_decay ? options_.weight_decay : 0.0;
    const Tensor& g = p.var.grad();
    HYLO_CHECK(device_ == Device::cpu, "optimizer: cuda step not wired yet");
    cpu::adamw_step<float>(g.numel(), master_[i].data<float>(), m_[i].data<float>(), v_[i].data<float>(),
                           g.data<float>(), float(lr), float(options_.beta1), float(options_.beta2),
                           float(options_.eps), float(decay), step_, float(grad_scale));
  }
}

void AdamW::zero_grad() {
  for (Parameter& p : params_) p.var.zero_grad();
}

}  // namespace hylo
