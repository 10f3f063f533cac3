#include "ops/cpu/elementwise.h"

#include <cmath>

namespace hylo::cpu {

template <class T> double global_norm(int count, const T* const* buffers, const int64_t* sizes) {
  double ss = 0;
  for (int b = 0; b < count; ++b)
    for (int64_t i = 0; i < sizes[b]; ++i) ss += double(buffers[b][i]) * double(buffers[b][i]);
  return std::sqrt(ss);
}

template double global_norm<float>(int, const float* const*, const int64_t*);
template double global_norm<double>(int, const double* const*, const int64_t*);

}  // namespace hylo::cpu
