// CPU global gradient norm: the optimizer's CPU path and the oracle for kernels/elementwise.
#pragma once
#include <cstdint>

namespace hylo::cpu {

// sqrt(Σ_buffers Σ x²) over `count` buffers, in double: the global gradient norm for clipping.
template <class T> double global_norm(int count, const T* const* buffers, const int64_t* sizes);

}  // namespace hylo::cpu
