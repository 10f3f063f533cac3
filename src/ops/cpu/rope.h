// CPU reference rotary position embedding (the oracle for kernels/rope).
// Legend: B batch, T sequence, H heads, D head dim (even), P table positions, D2 = D/2.
//
// Half-split convention (GPT-NeoX / Llama): channel i is paired with i + D/2, not 2i with 2i+1.
// For position p = t + pos_offset and i < D/2:
//   angle = p * theta^(-2i/D)
//   y[i]       = x[i] cos(angle) - x[i+D/2] sin(angle)
//   y[i+D/2]   = x[i] sin(angle) + x[i+D/2] cos(angle)
// Backward is the rotation by -angle (the map is orthogonal): dx OVERWRITTEN. Both directions work
// in place (y == x, dx == dy allowed). pos_offset lets decoding rotate a chunk that starts at a
// later position; every p must lie in [0, P).
#pragma once

namespace hylo::cpu {

// cos_PD2 / sin_PD2 (P, D/2) in fp32, computed in double then rounded once, so CPU and GPU rotate
// with identical tables.
void rope_tables(int P, int D, double theta, float* cos_PD2, float* sin_PD2);

template <class T>
void rope_forward(int B, int T_, int H, int D, int pos_offset, int P, const float* cos_PD2, const float* sin_PD2,
                  const T* x_BTHD, T* y_BTHD);

template <class T>
void rope_backward(int B, int T_, int H, int D, int pos_offset, int P, const float* cos_PD2, const float* sin_PD2,
                   const T* dy_BTHD, T* dx_BTHD);

}  // namespace hylo::cpu
