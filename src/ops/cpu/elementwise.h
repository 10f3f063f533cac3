// CPU reference elementwise ops and reductions (the oracle for kernels/elementwise).
// Legend: n elements, R rows, C columns (row-major). Outputs are OVERWRITTEN; `out` may alias an
// input of the same shape. These are forward primitives; their backward passes are compositions
// of the same functions (d add = identity, d add_broadcast's vector = sum_rows, d mul = mul).
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace hylo::cpu {

template <class T> void add(int64_t n, const T* a, const T* b, T* out);
// out_RC[r, c] = x_RC[r, c] + v_C[c]: a trailing vector broadcast over rows.
template <class T> void add_broadcast(int64_t R, int64_t C, const T* x_RC, const T* v_C, T* out_RC);
template <class T> void mul(int64_t n, const T* a, const T* b, T* out);
template <class T> void scale(int64_t n, T alpha, const T* x, T* out);
// Σ x in double.
template <class T> double sum(int64_t n, const T* x);
// out_C[c] = Σ_r x_RC[r, c] (column sums; the gradient of add_broadcast's vector).
template <class T> void sum_rows(int64_t R, int64_t C, const T* x_RC, T* out_C);
// sqrt(Σ_buffers Σ x²) over `count` buffers, in double: the global gradient norm for clipping.
template <class T> double global_norm(int count, const T* const* buffers, const int64_t* sizes);

// bf16 <-> fp32 with round-to-nearest-even (core/dtype.h), bit-identical to the CUDA casts.
void cast(int64_t n, const float* in, bf16* out);
void cast(int64_t n, const bf16* in, float* out);

}  // namespace hylo::cpu
