// CPU reference RMSNorm (the oracle for kernels/rmsnorm).
// Legend: N rows (tokens), D normalised width. Row-major.
//
//   forward : rstd_N[n] = 1 / sqrt(mean_d(x²) + eps);  y_ND = x_ND * rstd_N[n] * w_D
//   backward: dx_ND OVERWRITTEN, or ACCUMULATED with accumulate_dx; dw_D ACCUMULATED (+=, a
//             parameter gradient). dx may alias dy (each row is read completely before it is written).
// w_D == nullptr means a unit weight (QK-norm without gain); then dw_D must be nullptr too.
// dw_D == nullptr skips the weight gradient. Sums are taken in double.
#pragma once

namespace hylo::cpu {

template <class T>
void rmsnorm_forward(int N, int D, T eps, const T* x_ND, const T* w_D, T* y_ND, T* rstd_N);

template <class T>
void rmsnorm_backward(int N, int D, const T* x_ND, const T* w_D, const T* rstd_N, const T* dy_ND, T* dx_ND,
                      bool accumulate_dx, T* dw_D);

}  // namespace hylo::cpu
