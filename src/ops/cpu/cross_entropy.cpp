#include "ops/cpu/cross_entropy.h"

#include <Eigen/Core>

#include <algorithm>
#include <cmath>

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

// The rows are V wide (50304 for GPT-2's vocabulary): their exps are Eigen's vectorised ones, each
// in T (a max-shifted float loses nothing to a float exp), and the forward's sums are taken in
// double, so that the reference does not lose what the GPU keeps. Scalar double exps were 40% of a
// CPU training step.
template <class T>
using Array = Eigen::Array<T, Eigen::Dynamic, 1>;
template <class T>
using Row = Eigen::Map<Array<T>>;
template <class T>
using ConstRow = Eigen::Map<const Array<T>>;

// The sum in double of `x`, in 8 independent lanes that the compiler vectorises (one running
// double sum is one add latency per element).
template <class T>
double sum_in_double(const Array<T>& x) {
  double lane[8] = {};
  const Eigen::Index n = x.size(), whole = n / 8 * 8;
  for (Eigen::Index i = 0; i < whole; i += 8)
    for (int k = 0; k < 8; ++k) lane[k] += double(x[i + k]);
  for (Eigen::Index i = whole; i < n; ++i) lane[i - whole] += double(x[i]);
  double total = 0;
  for (double v : lane) total += v;
  return total;
}

template <class T>
void cross_entropy_forward(int N, int V, int V_valid, const T* logits_NV, const int32_t* targets_N, T* loss_N,
                           T* lse_N) {
  check_shape(N, V, V_valid, targets_N);
  Array<T> exps(V_valid);
  for (int n = 0; n < N; ++n) {
    const T* z = logits_NV + int64_t(n) * V;
    const ConstRow<T> row(z, V_valid);
    const T mx = row.maxCoeff();
    exps = (row - mx).exp();
    const double lse = double(mx) + std::log(sum_in_double(exps));
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
    std::fill(z + V_valid, z + V, T(0));
    const int32_t target = targets_N[n];
    if (target == kIgnoreIndex) {
      std::fill(z, z + V_valid, T(0));
      continue;
    }
    // (softmax (1 + 2 z lse) - onehot) * scale; z-loss adds the 2 z lse term.
    const T lse = lse_N[n];
    const double p_factor = 1.0 + 2.0 * double(z_loss) * double(lse), at_target = double(z[target]);
    Row<T> row(z, V_valid);
    row = (row - lse).exp() * T(p_factor * double(scale));
    z[target] = T((std::exp(at_target - double(lse)) * p_factor - 1.0) * double(scale));
  }
}

#define HYLO_INSTANTIATE(T)                                                                          \
  template void cross_entropy_forward<T>(int, int, int, const T*, const int32_t*, T*, T*);          \
  template void cross_entropy_backward<T>(int, int, int, const int32_t*, const T*, T, T, T*);
HYLO_INSTANTIATE(float)
HYLO_INSTANTIATE(double)
#undef HYLO_INSTANTIATE

}  // namespace hylo::cpu
