// CPU decode attention: one query row per (sequence, query head), a two-pass softmax over the live
// slots in the order LiveSlots lists them (the same arithmetic as cpu::attention_forward's row).
#include "ops/cpu/decode_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"

namespace hylo {

namespace cpu {

template <class T>
void decode_attention_forward(const DecodeShape& shape, const LiveSlots& live, const T* q_BHD, const T* k_BHSD,
                              const T* v_BHSD, T* out_BHD, T* lse_BH) {
  check_decode_args(shape, live);
  const int D = shape.D, group = shape.Hq / shape.Hkv, n = live.keys();
  const T scale = T(1) / std::sqrt(T(D));
  std::vector<T> p_N(n);  // scores, then probabilities, of one query over the live keys
  for (int b = 0; b < shape.B; ++b)
    for (int h = 0; h < shape.Hq; ++h) {
      const size_t head = size_t(b) * shape.Hkv + h / group;  // (b, kv head) row of the cache
      const T* k_SD = k_BHSD + head * shape.slots * D;
      const T* v_SD = v_BHSD + head * shape.slots * D;
      const T* q_D = q_BHD + (size_t(b) * shape.Hq + h) * D;
      T row_max = -std::numeric_limits<T>::infinity();
      for (int j = 0; j < n; ++j) {
        const T* k_D = k_SD + size_t(live.slot(j)) * D;
        T dot = 0;
        for (int d = 0; d < D; ++d) dot += q_D[d] * k_D[d];
        p_N[j] = dot * scale;
        row_max = std::max(row_max, p_N[j]);
      }
      T sum = 0;
      for (int j = 0; j < n; ++j) sum += (p_N[j] = std::exp(p_N[j] - row_max));
      T* out_D = out_BHD + (size_t(b) * shape.Hq + h) * D;
      std::fill(out_D, out_D + D, T(0));
      for (int j = 0; j < n; ++j) {
        const T* v_D = v_SD + size_t(live.slot(j)) * D;
        for (int d = 0; d < D; ++d) out_D[d] += p_N[j] * v_D[d];
      }
      const T inv = T(1) / sum;
      for (int d = 0; d < D; ++d) out_D[d] *= inv;
      if (lse_BH) lse_BH[size_t(b) * shape.Hq + h] = row_max + std::log(sum);
    }
}

template void decode_attention_forward<float>(const DecodeShape&, const LiveSlots&, const float*, const float*,
                                              const float*, float*, float*);
template void decode_attention_forward<double>(const DecodeShape&, const LiveSlots&, const double*, const double*,
                                               const double*, double*, double*);

}  // namespace cpu
}  // namespace hylo
