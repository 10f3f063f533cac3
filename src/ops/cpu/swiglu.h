// CPU reference SwiGLU activation (the oracle for kernels/swiglu).
// Legend: N rows (tokens), F hidden width. Row-major.
//
// The gate and up projections come from ONE matmul: ab_N2F row n = [a_0..a_{F-1} | b_0..b_{F-1}],
// first F columns the gate a, next F the up projection b.
//   forward : out_NF = silu(a) * b,  silu(a) = a * sigmoid(a)
//   backward: dab_N2F OVERWRITTEN: [dout * b * silu'(a) | dout * silu(a)],
//             silu'(a) = sigmoid(a) * (1 + a * (1 - sigmoid(a)))
//             dab may alias ab (the activation buffer is dead after backward).
#pragma once

namespace hylo::cpu {

template <class T>
void swiglu_forward(int N, int F, const T* ab_N2F, T* out_NF);

template <class T>
void swiglu_backward(int N, int F, const T* ab_N2F, const T* dout_NF, T* dab_N2F);

}  // namespace hylo::cpu
