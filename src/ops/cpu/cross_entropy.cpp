#include "ops/cpu/cross_entropy.h"

#include <cmath>
#include <limits>

#include "core/error.h"

namespace hylo::cpu {
namespace {

void check_shape(int N, int V, int V_valid, const int32_t* targets_N) {
  HYLO_CHECK(V_valid > 0 && V_valid <= V, "cross_entropy: V_valid={} must be in [1, V={}]", V_valid, V);
  for (int n = 0; n < N; ++n)
    HYLO_CHECK(targets_N[n] == kIgnoreIndex || (targets_N[n] >= 0 && targets_N[n] < V_valid),
               "cross_entropy: target {} at row {} is outside [0, {}) and not the ignore index -1", targets_N[n], n,
               V_valid);
}

}  // namespace

template <class T>
void cross_entropy_forward(int N, int V, int V_valid, const T* logits_NV, const int32_t* targets_N, T* loss_N,
                           T* lse_N) {
  check_shape(N, V, V_valid, targets_N);
  for (int n = 0; n < N; ++n) {
    const T* z = logits_NV + int64_t(n) * V;
    // Max-shifted log-sum-exp in double: the reference must not lose what the GPU keeps.
    double mx = -std::numeric_limits<double>::infinity();
    for (int v = 0; v < V_valid; ++v) mx = std::max(mx, double(z[v]));
    double sum = 0;
    for (int v = 0; v < V_valid; ++v) sum += std::exp(double(z[v]) - mx);
    double lse = mx + std::log(sum);
    lse_N[n] = T(lse);
    loss_N[n] = targets_N[n] == kIgnoreIndex ? T(0) : T(lse - double(z[targets_N[n]]));
  }
}

template <class T>
void cross_entropy_backward(int N, int V, int V_valid, const int32_t* targets_N, const T* lse_N, T scale,
                            T z_loss, T* logits_NV) {
  check_shape(N, V, V_valid, targets_N);
  for (int n = 0; n < N; ++n) {
    T* z = logits_NV + int64_t(n) * V;
    int32_t target = targets_N[n];
    if (target == kIgnoreIndex) {
      for (int v = 0; v < V; ++v) z[v] = T(0);
      continue;
    }
    const double lse = double(lse_N[n]), p_factor = 1.0 + 2.0 * double(z_loss) * lse;  // z-loss: + 2 z lse p
    for (int v = 0; v < V_valid; ++v)
      z[v] = T((std::exp(double(z[v]) - lse) * p_factor - (v == target ? 1.0 : 0.0)) * double(scale));
    for (int v = V_valid; v < V; ++v) z[v] = T(0);
  }
}

#define HYLO_INSTANTIATE(T)                                                                          \
  template void cross_entropy_forward<T>(int, int, int, const T*, const int32_t*, T*, T*);          \
  template void cross_entropy_backward<T>(int, int, int, const int32_t*, const T*, T, T, T*);
HYLO_INSTANTIATE(float)
HYLO_INSTANTIATE(double)
#undef HYLO_INSTANTIATE

}  // namespace hylo::cpu
