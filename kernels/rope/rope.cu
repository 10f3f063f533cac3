// RoPE: one thread rotates VEC consecutive pairs (i, i + D/2) of one (b, t, h) row.
#include "kernels/common/common.cuh"
#include "kernels/rope/rope.h"

namespace hylo::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void rope_tables_kernel(int P, int D, double theta, float* cos_PD2, float* sin_PD2) {
  int D2 = D / 2;
  int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= int64_t(P) * D2) return;
  int p = int(idx / D2), i = int(idx % D2);
  double angle = double(p) * pow(theta, -2.0 * i / D);  // same expression as the CPU tables
  cos_PD2[idx] = float(cos(angle));
  sin_PD2[idx] = float(sin(angle));
}

// sign = +1: forward rotation; -1: backward (rotation by -angle).
template <int VEC>
__global__ void rope_kernel(int64_t rows, int T, int H, int D, int pos_offset, const float* cos_PD2,
                            const float* sin_PD2, const nv_bf16* in, nv_bf16* out, float sign) {
  int D2 = D / 2, chunks = D2 / VEC;
  int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * chunks) return;
  int64_t row = idx / chunks;  // row = (b * T + t) * H + h
  int i = int(idx % chunks) * VEC;
  int t = int((row / H) % T);
  const float* c = cos_PD2 + int64_t(t + pos_offset) * D2 + i;
  const float* s = sin_PD2 + int64_t(t + pos_offset) * D2 + i;
  const nv_bf16* x = in + row * D + i;
  nv_bf16* y = out + row * D + i;
  float x1[VEC], x2[VEC], y1[VEC], y2[VEC];
  load_floats<VEC>(x, x1);
  load_floats<VEC>(x + D2, x2);
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    float cs = c[k], sn = sign * s[k];
    y1[k] = x1[k] * cs - x2[k] * sn;
    y2[k] = x1[k] * sn + x2[k] * cs;
  }
  store_floats<VEC>(y, y1);
  store_floats<VEC>(y + D2, y2);
}

void rope_launch(int B, int T, int H, int D, int pos_offset, int P, const float* cos_PD2, const float* sin_PD2,
                 const bf16* in, bf16* out, float sign, cudaStream_t stream) {
  HYLO_CUDA_REQUIRE(B >= 0 && T >= 0 && H >= 0 && D > 0 && D % 2 == 0, "rope: bad shape B=%d T=%d H=%d D=%d (D even)",
                    B, T, H, D);
  HYLO_CUDA_REQUIRE(pos_offset >= 0 && pos_offset + T <= P,
                    "rope: positions [%d, %d) exceed the %d precomputed table rows", pos_offset, pos_offset + T, P);
  int64_t rows = int64_t(B) * T * H;
  if (rows == 0) return;
  int D2 = D / 2;
  // Pack8 needs both halves 16-byte aligned: D2 % 8 == 0 keeps x + D2 aligned when x is.
  if (D2 % 8 == 0 && aligned16(in) && aligned16(out)) {
    rope_kernel<8><<<ceil_div(rows * (D2 / 8), kThreads), kThreads, 0, stream>>>(
        rows, T, H, D, pos_offset, cos_PD2, sin_PD2, as_nv(in), as_nv(out), sign);
  } else {
    rope_kernel<1><<<ceil_div(rows * D2, kThreads), kThreads, 0, stream>>>(rows, T, H, D, pos_offset, cos_PD2,
                                                                           sin_PD2, as_nv(in), as_nv(out), sign);
  }
  HYLO_CUDA_LAUNCH_CHECK("rope_kernel");
}

}  // namespace

void rope_tables(int P, int D, double theta, float* cos_PD2, float* sin_PD2, cudaStream_t stream) {
  HYLO_CUDA_REQUIRE(P >= 0 && D > 0 && D % 2 == 0, "rope_tables: bad shape P=%d D=%d (D even)", P, D);
  int64_t n = int64_t(P) * (D / 2);
  if (n == 0) return;
  rope_tables_kernel<<<ceil_div(n, kThreads), kThreads, 0, stream>>>(P, D, theta, cos_PD2, sin_PD2);
  HYLO_CUDA_LAUNCH_CHECK("rope_tables_kernel");
}

void rope_forward(int B, int T, int H, int D, int pos_offset, int P, const float* cos_PD2, const float* sin_PD2,
                  const bf16* x_BTHD, bf16* y_BTHD, cudaStream_t stream) {
  rope_launch(B, T, H, D, pos_offset, P, cos_PD2, sin_PD2, x_BTHD, y_BTHD, +1.f, stream);
}

void rope_backward(int B, int T, int H, int D, int pos_offset, int P, const float* cos_PD2, const float* sin_PD2,
                   const bf16* dy_BTHD, bf16* dx_BTHD, cudaStream_t stream) {
  rope_launch(B, T, H, D, pos_offset, P, cos_PD2, sin_PD2, dy_BTHD, dx_BTHD, -1.f, stream);
}

}  // namespace hylo::cuda
