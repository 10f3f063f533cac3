// CPU reference of masked attention. One query row at a time: its allowed keys are the contiguous
// range [lowest_key(t), t], so the loops never touch a masked pair (the CPU form of the kernels'
// tile skipping) and need no mask test inside.
#include "ops/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"

namespace hylo {

namespace cpu {
namespace {

template <class T>
T dot(const T* a, const T* b, int n) {
  T acc = 0;
  for (int i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

template <class T>
void axpy(T alpha, const T* x, T* y, int n) {
  for (int i = 0; i < n; ++i) y[i] += alpha * x[i];
}

// Offsets of row (b, t, head) in a (B, T, H, D) tensor and of (b, head, t) in a (B, H, T) one.
inline size_t row_BTHD(const AttnShape& s, int H, int b, int t, int h) {
  return ((size_t(b) * s.T + t) * H + h) * size_t(s.D);
}
inline size_t row_BHT(const AttnShape& s, int b, int h, int t) { return (size_t(b) * s.Hq + h) * s.T + t; }

}  // namespace

template <class T>
void attention_forward(const AttnShape& shape, const AttnMask& mask, const T* q, const T* k, const T* v,
                       T* out, T* lse) {
  check_attention_args(shape, mask);
  const MaskBounds bounds(mask);
  const int D = shape.D, group = shape.Hq / shape.Hkv;
  const T scale = T(1) / std::sqrt(T(D));
  std::vector<T> p_S(shape.T);  // scores, then probabilities, of one query row over its keys
  for (int b = 0; b < shape.B; ++b)
    for (int h = 0; h < shape.Hq; ++h) {
      const int hk = h / group;
      for (int t = 0; t < shape.T; ++t) {
        const int lo = bounds.lowest_key(t);
        const T* q_D = q + row_BTHD(shape, shape.Hq, b, t, h);
        T row_max = -std::numeric_limits<T>::infinity();
        for (int s = lo; s <= t; ++s) {
          p_S[s - lo] = dot(q_D, k + row_BTHD(shape, shape.Hkv, b, s, hk), D) * scale;
          row_max = std::max(row_max, p_S[s - lo]);
        }
        T sum = 0;
        for (int s = lo; s <= t; ++s) sum += (p_S[s - lo] = std::exp(p_S[s - lo] - row_max));
        T* out_D = out + row_BTHD(shape, shape.Hq, b, t, h);
        std::fill(out_D, out_D + D, T(0));
        for (int s = lo; s <= t; ++s) axpy(p_S[s - lo], v + row_BTHD(shape, shape.Hkv, b, s, hk), out_D, D);
        const T inv = T(1) / sum;
        for (int d = 0; d < D; ++d) out_D[d] *= inv;
        lse[row_BHT(shape, b, h, t)] = row_max + std::log(sum);
      }
    }
}

template <class T>
void attention_backward(const AttnShape& shape, const AttnMask& mask, const T* q, const T* k, const T* v,
                        const T* out, const T* lse, const T* dout, T* dq, T* dk, T* dv) {
  check_attention_args(shape, mask);
  const MaskBounds bounds(mask);
  const int D = shape.D, group = shape.Hq / shape.Hkv;
  const T scale = T(1) / std::sqrt(T(D));
  const size_t kv_count = size_t(shape.B) * shape.T * shape.Hkv * D;
  std::fill(dk, dk + kv_count, T(0));
  std::fill(dv, dv + kv_count, T(0));
  // Query heads of one group add into the same dk/dv rows; the order (h ascending) is fixed, so
  // the result is deterministic.
  for (int b = 0; b < shape.B; ++b)
    for (int h = 0; h < shape.Hq; ++h) {
      const int hk = h / group;
      for (int t = 0; t < shape.T; ++t) {
        const size_t row = row_BTHD(shape, shape.Hq, b, t, h);
        const T* q_D = q + row;
        const T* dout_D = dout + row;
        T* dq_D = dq + row;
        const T row_lse = lse[row_BHT(shape, b, h, t)];
        // dL/dscore_s = p_s * (dp_s - D_t) with D_t = sum_s p_s dp_s = rowsum(dout * out).
        const T d_t = dot(dout_D, out + row, D);
        std::fill(dq_D, dq_D + D, T(0));
        for (int s = bounds.lowest_key(t); s <= t; ++s) {
          const size_t kv_row = row_BTHD(shape, shape.Hkv, b, s, hk);
          const T p = std::exp(dot(q_D, k + kv_row, D) * scale - row_lse);
          const T ds = p * (dot(dout_D, v + kv_row, D) - d_t) * scale;
          axpy(ds, k + kv_row, dq_D, D);
          axpy(ds, q_D, dk + kv_row, D);
          axpy(p, dout_D, dv + kv_row, D);
        }
      }
    }
}

#define HYLO_INSTANTIATE(T)                                                                          \
  template void attention_forward<T>(const AttnShape&, const AttnMask&, const T*, const T*, const T*, \
                                     T*, T*);                                                        \
  template void attention_backward<T>(const AttnShape&, const AttnMask&, const T*, const T*, const T*, \
                                      const T*, const T*, const T*, T*, T*, T*);
HYLO_INSTANTIATE(float)
HYLO_INSTANTIATE(double)
#undef HYLO_INSTANTIATE

}  // namespace cpu
}  // namespace hylo
