#include "ops/cpu/embedding.h"

#include <algorithm>

#include "core/error.h"

namespace hylo::cpu {

template <class T>
void embedding_forward(int N, int V, int D, const int32_t* ids_N, const T* table_VD, T* out_ND) {
  for (int n = 0; n < N; ++n) {
    int32_t id = ids_N[n];
    HYLO_CHECK(id >= 0 && id < V, "embedding: token id {} at position {} is outside the vocabulary [0, {})", id, n, V);
    std::copy_n(table_VD + int64_t(id) * D, D, out_ND + int64_t(n) * D);
  }
}

template <class T>
void embedding_backward(int N, int V, int D, const int32_t* ids_N, const T* dout_ND, T* dtable_VD) {
  for (int n = 0; n < N; ++n) {
    int32_t id = ids_N[n];
    HYLO_CHECK(id >= 0 && id < V, "embedding: token id {} at position {} is outside the vocabulary [0, {})", id, n, V);
    T* row = dtable_VD + int64_t(id) * D;
    const T* g = dout_ND + int64_t(n) * D;
    for (int d = 0; d < D; ++d) row[d] += g[d];
  }
}

#define HYLO_INSTANTIATE(T)                                                              \
  template void embedding_forward<T>(int, int, int, const int32_t*, const T*, T*);      \
  template void embedding_backward<T>(int, int, int, const int32_t*, const T*, T*);
HYLO_INSTANTIATE(float)
HYLO_INSTANTIATE(double)
#undef HYLO_INSTANTIATE

}  // namespace hylo::cpu
