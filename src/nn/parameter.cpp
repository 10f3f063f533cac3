#include "nn/parameter.h"

#include "core/rng.h"

namespace hylo {

static uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

Var make_parameter(ParamList& params, const std::string& name, const Shape& shape, double init_std,
                   bool weight_decay, uint64_t seed) {
  Tensor value = Tensor::empty(shape, DType::f32, Device::cpu, name.c_str());
  float* p = value.data<float>();
  if (init_std == 0.0) {
    value.fill_(1.0);
  } else {
    Rng rng{seed, fnv1a(name), 0};
    for (int64_t i = 0; i < value.numel(); ++i) p[i] = float(rng.normal() * init_std);
  }
  Var var(value, true, name);
  params.push_back({name, var, weight_decay, init_std});
  return var;
}

void place_parameter(Parameter& p, Device device) {
  if (device != Device::cpu) p.var.mutable_value() = p.var.value().to(device).to(DType::bf16);
}

}  // namespace hylo
