#include "ops/cpu/adamw.h"

#include <cmath>

#include "core/error.h"

namespace hylo::cpu {

template <class T>
void adamw_step(int64_t n, T* p, T* m, T* v, const T* grad, float lr, float beta1, float beta2, float eps,
                float weight_decay, int64_t step, float grad_scale) {
  HYLO_CHECK(step >= 1, "adamw: step {} must be >= 1 (bias correction divides by 1 - beta^step)", step);
  const T step_size = T(double(lr) / (1.0 - std::pow(double(beta1), double(step))));
  const T inv_sqrt_bc2 = T(1.0 / std::sqrt(1.0 - std::pow(double(beta2), double(step))));
  const T decay = T(1) - T(lr) * T(weight_decay);
  const T b1 = T(beta1), b2 = T(beta2);
  for (int64_t i = 0; i < n; ++i) {
    T g = grad[i] * T(grad_scale);
    m[i] = b1 * m[i] + (T(1) - b1) * g;
    v[i] = b2 * v[i] + (T(1) - b2) * g * g;
    T denom = std::sqrt(v[i]) * inv_sqrt_bc2 + T(eps);
    p[i] = p[i] * decay - step_size * m[i] / denom;
  }
}

template void adamw_step<float>(int64_t, float*, float*, float*, const float*, float, float, float, float, float,
                                int64_t, float);
template void adamw_step<double>(int64_t, double*, double*, double*, const double*, float, float, float, float,
                                 float, int64_t, float);

}  // namespace hylo::cpu
