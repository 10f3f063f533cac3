#include "ops/cpu/rope.h"

#include <cmath>

#include "core/error.h"

namespace hylo::cpu {

void rope_tables(int P, int D, double theta, float* cos_PD2, float* sin_PD2) {
  HYLO_CHECK(D > 0 && D % 2 == 0, "rope: head dim {} must be even", D);
  int D2 = D / 2;
  for (int p = 0; p < P; ++p)
    for (int i = 0; i < D2; ++i) {
      double angle = double(p) * std::pow(theta, -2.0 * i / D);
      cos_PD2[int64_t(p) * D2 + i] = float(std::cos(angle));
      sin_PD2[int64_t(p) * D2 + i] = float(std::sin(angle));
    }
}

namespace {

// sign = +1 rotates by +angle (forward), -1 by -angle (backward).
template <class T>
void rotate(int B, int T_, int H, int D, int pos_offset, int P, const float* cos_PD2, const float* sin_PD2,
            const T* in, T* out, int sign) {
  HYLO_CHECK(D > 0 && D % 2 == 0, "rope: head dim {} must be even", D);
  HYLO_CHECK(pos_offset >= 0 && pos_offset + T_ <= P,
             "rope: positions [{}, {}) exceed the {} precomputed table rows", pos_offset, pos_offset + T_, P);
  int D2 = D / 2;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T_; ++t) {
      const float* c = cos_PD2 + int64_t(t + pos_offset) * D2;
      const float* s = sin_PD2 + int64_t(t + pos_offset) * D2;
      for (int h = 0; h < H; ++h) {
        int64_t base = ((int64_t(b) * T_ + t) * H + h) * D;
        for (int i = 0; i < D2; ++i) {
          T x1 = in[base + i], x2 = in[base + i + D2];
          T cs = T(c[i]), sn = T(sign * s[i]);
          out[base + i] = x1 * cs - x2 * sn;
          out[base + i + D2] = x1 * sn + x2 * cs;
        }
      }
    }
}

}  // namespace

template <class T>
void rope_forward(int B, int T_, int H, int D, int pos_offset, int P, const float* cos_PD2, const float* sin_PD2,
                  const T* x_BTHD, T* y_BTHD) {
  rotate(B, T_, H, D, pos_offset, P, cos_PD2, sin_PD2, x_BTHD, y_BTHD, +1);
}

template <class T>
void rope_backward(int B, int T_, int H, int D, int pos_offset, int P, const float* cos_PD2, const float* sin_PD2,
                   const T* dy_BTHD, T* dx_BTHD) {
  rotate(B, T_, H, D, pos_offset, P, cos_PD2, sin_PD2, dy_BTHD, dx_BTHD, -1);
}

#define HYLO_INSTANTIATE(T)                                                                                   \
  template void rope_forward<T>(int, int, int, int, int, int, const float*, const float*, const T*, T*);     \
  template void rope_backward<T>(int, int, int, int, int, int, const float*, const float*, const T*, T*);
HYLO_INSTANTIATE(float)
HYLO_INSTANTIATE(double)
#undef HYLO_INSTANTIATE

}  // namespace hylo::cpu
