#include "ops/cpu/elementwise.h"

#include <cmath>

namespace hylo::cpu {

template <class T> void add(int64_t n, const T* a, const T* b, T* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <class T> void add_broadcast(int64_t R, int64_t C, const T* x_RC, const T* v_C, T* out_RC) {
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) out_RC[r * C + c] = x_RC[r * C + c] + v_C[c];
}

template <class T> void mul(int64_t n, const T* a, const T* b, T* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
}

template <class T> void scale(int64_t n, T alpha, const T* x, T* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = alpha * x[i];
}

template <class T> double sum(int64_t n, const T* x) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += double(x[i]);
  return s;
}

template <class T> void sum_rows(int64_t R, int64_t C, const T* x_RC, T* out_C) {
  for (int64_t c = 0; c < C; ++c) {
    double s = 0;
    for (int64_t r = 0; r < R; ++r) s += double(x_RC[r * C + c]);
    out_C[c] = T(s);
  }
}

template <class T> double global_norm(int count, const T* const* buffers, const int64_t* sizes) {
  double ss = 0;
  for (int b = 0; b < count; ++b)
    for (int64_t i = 0; i < sizes[b]; ++i) ss += double(buffers[b][i]) * double(buffers[b][i]);
  return std::sqrt(ss);
}

void cast(int64_t n, const float* in, bf16* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = float_to_bf16(in[i]);
}

void cast(int64_t n, const bf16* in, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(in[i]);
}

#define HYLO_INSTANTIATE(T)                                                          \
  template void add<T>(int64_t, const T*, const T*, T*);                            \
  template void add_broadcast<T>(int64_t, int64_t, const T*, const T*, T*);         \
  template void mul<T>(int64_t, const T*, const T*, T*);                            \
  template void scale<T>(int64_t, T, const T*, T*);                                 \
  template double sum<T>(int64_t, const T*);                                        \
  template void sum_rows<T>(int64_t, int64_t, const T*, T*);                        \
  template double global_norm<T>(int, const T* const*, const int64_t*);
HYLO_INSTANTIATE(float)
HYLO_INSTANTIATE(double)
#undef HYLO_INSTANTIATE

}  // namespace hylo::cpu
