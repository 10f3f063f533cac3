// Rotary position embedding on the GPU (oracle: src/ops/cpu/rope.h, which defines the half-split
// convention: channel i pairs with i + D/2, angle = (t + pos_offset) * theta^(-2i/D)).
// Legend: B batch, T sequence, H heads, D head dim (even), P table positions, D2 = D/2.
// bf16 activations, fp32 cos/sin tables, fp32 arithmetic. Forward rotates by +angle, backward by
// -angle (dx OVERWRITTEN); both may run in place (y == x, dx == dy).
#pragma once
#include <cuda_runtime_api.h>

namespace hylo {
struct bf16;
}

namespace hylo::cuda {

// Fills cos_PD2/sin_PD2 (device, fp32) with the same double-precision formula as
// hylo::cpu::rope_tables; they agree to within an fp32 rounding step. Compute once per
// (P, D, theta) and keep.
void rope_tables(int P, int D, double theta, float* cos_PD2, float* sin_PD2, cudaStream_t stream);

void rope_forward(int B, int T, int H, int D, int pos_offset, int P, const float* cos_PD2, const float* sin_PD2,
                  const bf16* x_BTHD, bf16* y_BTHD, cudaStream_t stream);

void rope_backward(int B, int T, int H, int D, int pos_offset, int P, const float* cos_PD2, const float* sin_PD2,
                   const bf16* dy_BTHD, bf16* dx_BTHD, cudaStream_t stream);

}  // namespace hylo::cuda
