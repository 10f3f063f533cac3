#include "ops/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "ops/cpu/gemm.h"

namespace hylo::cpu {

template <class T>
void router_scores_forward(int N, int E, bool sigmoid, const T* logits_NE, T* scores_NE) {
  for (int n = 0; n < N; ++n) {
    const T* l = logits_NE + int64_t(n) * E;
    T* s = scores_NE + int64_t(n) * E;
    if (sigmoid) {
      for (int e = 0; e < E; ++e) s[e] = T(1.0 / (1.0 + std::exp(-double(l[e]))));
      continue;
    }
    double mx = -INFINITY, sum = 0;
    for (int e = 0; e < E; ++e) mx = std::max(mx, double(l[e]));
    for (int e = 0; e < E; ++e) sum += std::exp(double(l[e]) - mx);
    for (int e = 0; e < E; ++e) s[e] = T(std::exp(double(l[e]) - mx) / sum);
  }
}

template <class T>
void router_scores_backward(int N, int E, bool sigmoid, const T* scores_NE, const T* dscores_NE, T* dlogits_NE) {
  for (int n = 0; n < N; ++n) {
    const T* s = scores_NE + int64_t(n) * E;
    const T* ds = dscores_NE + int64_t(n) * E;
    T* dl = dlogits_NE + int64_t(n) * E;
    if (sigmoid) {
      for (int e = 0; e < E; ++e) dl[e] = T(double(ds[e]) * double(s[e]) * (1.0 - double(s[e])));
      continue;
    }
    // softmax: dl_i = s_i (ds_i - Σ_j s_j ds_j); the dot is taken before dl (maybe ds) is written.
    double dot = 0;
    for (int e = 0; e < E; ++e) dot += double(s[e]) * double(ds[e]);
    for (int e = 0; e < E; ++e) dl[e] = T(double(s[e]) * (double(ds[e]) - dot));
  }
}

template <class T>
void router_topk(int N, int E, int K, const T* scores_NE, const float* bias_E, int32_t* expert_NK) {
  HYLO_CHECK(0 < K && K <= E, "moe: top_k={} must be in [1, experts={}]", K, E);
  std::vector<char> taken(static_cast<size_t>(E));
  for (int n = 0; n < N; ++n) {
    const T* s = scores_NE + int64_t(n) * E;
    std::fill(taken.begin(), taken.end(), 0);
    for (int k = 0; k < K; ++k) {
      // K passes of argmax: strict '>' keeps the lower index on ties, and K is small.
      int best = -1;
      double best_v = 0;
      for (int e = 0; e < E; ++e) {
        if (taken[size_t(e)]) continue;
        const double v = double(s[e]) + (bias_E ? double(bias_E[e]) : 0.0);
        if (best < 0 || v > best_v) best = e, best_v = v;
      }
      taken[size_t(best)] = 1;
      expert_NK[int64_t(n) * K + k] = best;
    }
  }
}

template <class T>
void gate_weights_forward(int N, int E, int K, const T* scores_NE, const int32_t* expert_NK, T* w_NK) {
  for (int n = 0; n < N; ++n) {
    const T* s = scores_NE + int64_t(n) * E;
    const int32_t* ex = expert_NK + int64_t(n) * K;
    double sum = 0;
    for (int k = 0; k < K; ++k) sum += double(s[ex[k]]);
    for (int k = 0; k < K; ++k) w_NK[int64_t(n) * K + k] = T(double(s[ex[k]]) / sum);
  }
}

template <class T>
void gate_weights_backward(int N, int E, int K, const T* scores_NE, const int32_t* expert_NK, const T* w_NK,
                           const T* dw_NK, T* dscores_NE) {
  std::fill(dscores_NE, dscores_NE + int64_t(N) * E, T(0));
  for (int n = 0; n < N; ++n) {
    const T* s = scores_NE + int64_t(n) * E;
    const int32_t* ex = expert_NK + int64_t(n) * K;
    const T* w = w_NK + int64_t(n) * K;
    const T* dw = dw_NK + int64_t(n) * K;
    // w_k = s_k / S  =>  ds_k = (dw_k - Σ_j w_j dw_j) / S
    double sum = 0, dot = 0;
    for (int k = 0; k < K; ++k) sum += double(s[ex[k]]), dot += double(w[k]) * double(dw[k]);
    for (int k = 0; k < K; ++k) dscores_NE[int64_t(n) * E + ex[k]] = T((double(dw[k]) - dot) / sum);
  }
}

int64_t plan_dispatch(int N, int E, int K, const int32_t* expert_NK, int64_t capacity, int32_t* routed_E,
                      int32_t* kept_E, int32_t* offsets_E1, int32_t* token_A, int32_t* row_NK) {
  std::fill(routed_E, routed_E + E, 0);
  std::fill(kept_E, kept_E + E, 0);
  int64_t dropped = 0;
  // Pass 1, in (token, slot) order: count, and decide who fits (first come, first kept).
  for (int64_t a = 0; a < int64_t(N) * K; ++a) {
    const int32_t e = expert_NK[a];
    HYLO_CHECK(0 <= e && e < E, "moe: expert index {} out of range [0, {})", e, E);
    ++routed_E[e];
    if (capacity > 0 && kept_E[e] >= capacity) {
      row_NK[a] = -1;
      ++dropped;
    } else {
      ++kept_E[e];
      row_NK[a] = 0;  // placeholder: kept
    }
  }
  offsets_E1[0] = 0;
  for (int e = 0; e < E; ++e) offsets_E1[e + 1] = offsets_E1[e] + kept_E[e];
  // Pass 2, same order: a counting sort by expert that is stable in (token, slot).
  std::vector<int32_t> cursor(offsets_E1, offsets_E1 + E);
  for (int64_t a = 0; a < int64_t(N) * K; ++a) {
    if (row_NK[a] < 0) continue;
    const int32_t row = cursor[size_t(expert_NK[a])]++;
    row_NK[a] = row;
    token_A[row] = int32_t(a / K);
  }
  return dropped;
}

template <class T>
void permute_forward(int A, int D, const int32_t* token_A, const T* x_ND, T* xs_AD) {
  for (int a = 0; a < A; ++a) std::copy_n(x_ND + int64_t(token_A[a]) * D, D, xs_AD + int64_t(a) * D);
}

template <class T>
void permute_backward(int N, int A, int D, const int32_t* token_A, const T* dxs_AD, T* dx_ND) {
  std::fill(dx_ND, dx_ND + int64_t(N) * D, T(0));
  for (int a = 0; a < A; ++a) {
    T* dx = dx_ND + int64_t(token_A[a]) * D;
    const T* g = dxs_AD + int64_t(a) * D;
    for (int d = 0; d < D; ++d) dx[d] += g[d];
  }
}

template <class T>
void combine_forward(int N, int K, int D, const int32_t* row_NK, const T* w_NK, const T* ys_AD, T* y_ND) {
  for (int n = 0; n < N; ++n) {
    T* y = y_ND + int64_t(n) * D;
    std::fill(y, y + D, T(0));
    for (int k = 0; k < K; ++k) {
      const int32_t row = row_NK[int64_t(n) * K + k];
      if (row < 0) continue;
      const T w = w_NK[int64_t(n) * K + k];
      const T* ys = ys_AD + int64_t(row) * D;
      for (int d = 0; d < D; ++d) y[d] += w * ys[d];
    }
  }
}

template <class T>
void combine_backward(int N, int K, int D, int A, const int32_t* row_NK, const T* w_NK, const T* ys_AD,
                      const T* dy_ND, T* dys_AD, T* dw_NK) {
  std::fill(dys_AD, dys_AD + int64_t(A) * D, T(0));  // every row is written below; zero for safety
  for (int n = 0; n < N; ++n) {
    const T* dy = dy_ND + int64_t(n) * D;
    for (int k = 0; k < K; ++k) {
      const int32_t row = row_NK[int64_t(n) * K + k];
      T& dw = dw_NK[int64_t(n) * K + k];
      if (row < 0) {
        dw = T(0);
        continue;
      }
      const T w = w_NK[int64_t(n) * K + k];
      const T* ys = ys_AD + int64_t(row) * D;
      T* dys = dys_AD + int64_t(row) * D;
      double dot = 0;
      for (int d = 0; d < D; ++d) {
        dot += double(dy[d]) * double(ys[d]);
        dys[d] = w * dy[d];
      }
      dw = T(dot);
    }
  }
}

template <class T>
void grouped_linear_forward(int E, int I, int O, const int32_t* offsets_E1, const T* x_AI, const T* w_EOI, T* y_AO) {
  for (int e = 0; e < E; ++e) {
    const int64_t begin = offsets_E1[e], rows = offsets_E1[e + 1] - begin;
    if (rows == 0) continue;
    gemm<T>(false, true, int(rows), O, I, T(1), x_AI + begin * I, w_EOI + int64_t(e) * O * I, T(0), y_AO + begin * O);
  }
}

template <class T>
void grouped_linear_backward(int E, int I, int O, const int32_t* offsets_E1, const T* x_AI, const T* w_EOI,
                             const T* dy_AO, T* dx_AI, T* dw_EOI, bool accumulate_dw) {
  for (int e = 0; e < E; ++e) {
    const int64_t begin = offsets_E1[e], rows = offsets_E1[e + 1] - begin;
    const T* w = w_EOI + int64_t(e) * O * I;
    T* dw = dw_EOI ? dw_EOI + int64_t(e) * O * I : nullptr;
    if (rows == 0) {
      // An expert that received no token still owns a gradient slot: zero, not garbage.
      if (dw && !accumulate_dw) std::fill(dw, dw + int64_t(O) * I, T(0));
      continue;
    }
    const T* x = x_AI + begin * I;
    const T* dy = dy_AO + begin * O;
    if (dx_AI) gemm<T>(false, false, int(rows), I, O, T(1), dy, w, T(0), dx_AI + begin * I);  // dx = dy @ w
    if (dw) gemm<T>(true, false, O, I, int(rows), T(1), dy, x, accumulate_dw ? T(1) : T(0), dw);  // dw (+)= dy^T x
  }
}

// P_i accumulation shared by forward and backward: q[n, i] and the per-row normaliser.
template <class T>
static double row_normaliser(int E, bool normalize, const T* s) {
  if (!normalize) return 1.0;
  double sum = 0;
  for (int e = 0; e < E; ++e) sum += double(s[e]);
  return sum;
}

template <class T>
double aux_loss_forward(int N, int E, int K, bool normalize, const T* scores_NE, const int32_t* routed_E,
                        double coef) {
  if (N == 0) return 0.0;
  std::vector<double> P(static_cast<size_t>(E), 0.0);
  for (int n = 0; n < N; ++n) {
    const T* s = scores_NE + int64_t(n) * E;
    const double z = row_normaliser(E, normalize, s);
    for (int e = 0; e < E; ++e) P[size_t(e)] += double(s[e]) / z;
  }
  double acc = 0;
  for (int e = 0; e < E; ++e) acc += (double(routed_E[e]) / (double(N) * K)) * (P[size_t(e)] / N);
  return coef * E * acc;
}

template <class T>
void aux_loss_backward(int N, int E, int K, bool normalize, const T* scores_NE, const int32_t* routed_E, double coef,
                       double dloss, T* dscores_NE) {
  // d aux / d q[n, i] = c_i = coef * E * f_i / N, the same for every token.
  std::vector<double> c(static_cast<size_t>(E));
  for (int e = 0; e < E; ++e) c[size_t(e)] = dloss * coef * E * (double(routed_E[e]) / (double(N) * K)) / N;
  for (int n = 0; n < N; ++n) {
    const T* s = scores_NE + int64_t(n) * E;
    T* ds = dscores_NE + int64_t(n) * E;
    if (!normalize) {
      for (int e = 0; e < E; ++e) ds[e] = T(c[size_t(e)]);
      continue;
    }
    // q_i = s_i / Z  =>  ds_j = (c_j - Σ_i q_i c_i) / Z
    const double z = row_normaliser(E, true, s);
    double dot = 0;
    for (int e = 0; e < E; ++e) dot += double(s[e]) / z * c[size_t(e)];
    for (int e = 0; e < E; ++e) ds[e] = T((c[size_t(e)] - dot) / z);
  }
}

#define HYLO_INSTANTIATE(T)                                                                                         \
  template void router_scores_forward<T>(int, int, bool, const T*, T*);                                            \
  template void router_scores_backward<T>(int, int, bool, const T*, const T*, T*);                                 \
  template void router_topk<T>(int, int, int, const T*, const float*, int32_t*);                                   \
  template void gate_weights_forward<T>(int, int, int, const T*, const int32_t*, T*);                              \
  template void gate_weights_backward<T>(int, int, int, const T*, const int32_t*, const T*, const T*, T*);         \
  template void permute_forward<T>(int, int, const int32_t*, const T*, T*);                                        \
  template void permute_backward<T>(int, int, int, const int32_t*, const T*, T*);                                  \
  template void combine_forward<T>(int, int, int, const int32_t*, const T*, const T*, T*);                         \
  template void combine_backward<T>(int, int, int, int, const int32_t*, const T*, const T*, const T*, T*, T*);     \
  template void grouped_linear_forward<T>(int, int, int, const int32_t*, const T*, const T*, T*);                  \
  template void grouped_linear_backward<T>(int, int, int, const int32_t*, const T*, const T*, const T*, T*, T*,    \
                                           bool);                                                                   \
  template double aux_loss_forward<T>(int, int, int, bool, const T*, const int32_t*, double);                      \
  template void aux_loss_backward<T>(int, int, int, bool, const T*, const int32_t*, double, double, T*);
HYLO_INSTANTIATE(float)
HYLO_INSTANTIATE(double)
#undef HYLO_INSTANTIATE

}  // namespace hylo::cpu
