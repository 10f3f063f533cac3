#include "ops/cpu/swiglu.h"

#include <cmath>
#include <cstdint>

namespace hylo::cpu {

template <class T>
void swiglu_forward(int N, int F, const T* ab_N2F, T* out_NF) {
  for (int n = 0; n < N; ++n) {
    const T* a = ab_N2F + int64_t(n) * 2 * F;
    const T* b = a + F;
    T* out = out_NF + int64_t(n) * F;
    for (int f = 0; f < F; ++f) {
      T sig = T(1) / (T(1) + std::exp(-a[f]));
      out[f] = a[f] * sig * b[f];
    }
  }
}

template <class T>
void swiglu_backward(int N, int F, const T* ab_N2F, const T* dout_NF, T* dab_N2F) {
  for (int n = 0; n < N; ++n) {
    const T* a = ab_N2F + int64_t(n) * 2 * F;
    const T* b = a + F;
    const T* dout = dout_NF + int64_t(n) * F;
    T* da = dab_N2F + int64_t(n) * 2 * F;
    T* db = da + F;
    for (int f = 0; f < F; ++f) {
      T sig = T(1) / (T(1) + std::exp(-a[f]));
      T silu = a[f] * sig;
      T dsilu = sig * (T(1) + a[f] * (T(1) - sig));
      T g = dout[f], bf = b[f];  // read before writing: dab may alias ab
      da[f] = g * bf * dsilu;
      db[f] = g * silu;
    }
  }
}

#define HYLO_INSTANTIATE(T)                                                  \
  template void swiglu_forward<T>(int, int, const T*, T*);                  \
  template void swiglu_backward<T>(int, int, const T*, const T*, T*);
HYLO_INSTANTIATE(float)
HYLO_INSTANTIATE(double)
#undef HYLO_INSTANTIATE

}  // namespace hylo::cpu
