#include "ops/cpu/rmsnorm.h"

#include <cmath>

#include "core/error.h"

namespace hylo::cpu {

template <class T>
void rmsnorm_forward(int N, int D, T eps, const T* x_ND, const T* w_D, T* y_ND, T* rstd_N) {
  HYLO_CHECK(D > 0, "rmsnorm: width D={} must be positive", D);
  for (int n = 0; n < N; ++n) {
    const T* x = x_ND + int64_t(n) * D;
    T* y = y_ND + int64_t(n) * D;
    double ss = 0;
    for (int d = 0; d < D; ++d) ss += double(x[d]) * double(x[d]);
    T rstd = T(1.0 / std::sqrt(ss / D + double(eps)));
    rstd_N[n] = rstd;
    for (int d = 0; d < D; ++d) y[d] = x[d] * rstd * (w_D ? w_D[d] : T(1));
  }
}

template <class T>
void rmsnorm_backward(int N, int D, const T* x_ND, const T* w_D, const T* rstd_N, const T* dy_ND, T* dx_ND,
                      bool accumulate_dx, T* dw_D) {
  HYLO_CHECK(w_D || !dw_D, "rmsnorm: a weight gradient was requested without a weight");
  for (int n = 0; n < N; ++n) {
    const T* x = x_ND + int64_t(n) * D;
    const T* dy = dy_ND + int64_t(n) * D;
    T* dx = dx_ND + int64_t(n) * D;
    double r = double(rstd_N[n]);
    // y_i = x_i r w_i with r = (mean x² + eps)^-1/2, dr/dx_j = -r³ x_j / D:
    // dx_i = r (dy_i w_i) - (r³/D) x_i Σ_j dy_j w_j x_j
    double dot = 0;
    for (int d = 0; d < D; ++d) dot += double(dy[d]) * (w_D ? double(w_D[d]) : 1.0) * double(x[d]);
    if (dw_D)
      for (int d = 0; d < D; ++d) dw_D[d] += T(double(dy[d]) * double(x[d]) * r);
    double c = r * r * r * dot / D;
    for (int d = 0; d < D; ++d)
      dx[d] = T(r * double(dy[d]) * (w_D ? double(w_D[d]) : 1.0) - c * double(x[d]) +
                (accumulate_dx ? double(dx[d]) : 0.0));
  }
}

#define HYLO_INSTANTIATE(T)                                                                          \
  template void rmsnorm_forward<T>(int, int, T, const T*, const T*, T*, T*);                        \
  template void rmsnorm_backward<T>(int, int, const T*, const T*, const T*, const T*, T*, bool, T*);
HYLO_INSTANTIATE(float)
HYLO_INSTANTIATE(double)
#undef HYLO_INSTANTIATE

}  // namespace hylo::cpu
