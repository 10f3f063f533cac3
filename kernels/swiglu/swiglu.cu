// SwiGLU: one thread per VEC consecutive hidden units of one row.
#include "kernels/common/common.cuh"
#include "kernels/swiglu/swiglu.h"

namespace hylo::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float sigmoid(float a) { return 1.f / (1.f + expf(-a)); }

// This thread's units: row n, columns f..f+VEC-1 of its a and b halves, loaded into a and b;
// false for the threads past the last row.
template <int VEC>
__device__ __forceinline__ bool load_units(int N, int F, const nv_bf16* ab_N2F, int64_t& n, int& f, float (&a)[VEC],
                                           float (&b)[VEC]) {
  const int chunks = F / VEC;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= int64_t(N) * chunks) return false;
  n = idx / chunks;
  f = int(idx % chunks) * VEC;
  const nv_bf16* a_row = ab_N2F + n * 2 * F;
  load_floats<VEC>(a_row + f, a);
  load_floats<VEC>(a_row + F + f, b);
  return true;
}

template <int VEC>
__global__ void swiglu_forward_kernel(int N, int F, const nv_bf16* ab_N2F, nv_bf16* out_NF) {
  int64_t n;
  int f;
  float a[VEC], b[VEC], out[VEC];
  if (!load_units<VEC>(N, F, ab_N2F, n, f, a, b)) return;
#pragma unroll
  for (int k = 0; k < VEC; ++k) out[k] = a[k] * sigmoid(a[k]) * b[k];
  store_floats<VEC>(out_NF + n * F + f, out);
}

template <int VEC>
__global__ void swiglu_backward_kernel(int N, int F, const nv_bf16* ab_N2F, const nv_bf16* dout_NF,
                                       nv_bf16* dab_N2F) {
  int64_t n;
  int f;
  float a[VEC], b[VEC], g[VEC], da[VEC], db[VEC];
  if (!load_units<VEC>(N, F, ab_N2F, n, f, a, b)) return;
  load_floats<VEC>(dout_NF + n * F + f, g);
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    float sig = sigmoid(a[k]);
    float dsilu = sig * (1.f + a[k] * (1.f - sig));
    da[k] = g[k] * b[k] * dsilu;
    db[k] = g[k] * a[k] * sig;
  }
  nv_bf16* d_row = dab_N2F + n * 2 * F;  // this thread read its own a, b above: in place is safe
  store_floats<VEC>(d_row + f, da);
  store_floats<VEC>(d_row + F + f, db);
}

}  // namespace

void swiglu_forward(int N, int F, const bf16* ab_N2F, bf16* out_NF, cudaStream_t stream) {
  HYLO_CUDA_REQUIRE(N >= 0 && F > 0, "swiglu_forward: bad shape N=%d F=%d", N, F);
  if (N == 0) return;
  if (F % 8 == 0 && aligned16(ab_N2F) && aligned16(out_NF))
    swiglu_forward_kernel<8><<<ceil_div(int64_t(N) * F / 8, kThreads), kThreads, 0, stream>>>(N, F, as_nv(ab_N2F),
                                                                                             as_nv(out_NF));
  else
    swiglu_forward_kernel<1><<<ceil_div(int64_t(N) * F, kThreads), kThreads, 0, stream>>>(N, F, as_nv(ab_N2F),
                                                                                         as_nv(out_NF));
  HYLO_CUDA_LAUNCH_CHECK("swiglu_forward_kernel");
}

void swiglu_backward(int N, int F, const bf16* ab_N2F, const bf16* dout_NF, bf16* dab_N2F, cudaStream_t stream) {
  HYLO_CUDA_REQUIRE(N >= 0 && F > 0, "swiglu_backward: bad shape N=%d F=%d", N, F);
  if (N == 0) return;
  if (F % 8 == 0 && aligned16(ab_N2F) && aligned16(dout_NF) && aligned16(dab_N2F))
    swiglu_backward_kernel<8><<<ceil_div(int64_t(N) * F / 8, kThreads), kThreads, 0, stream>>>(
        N, F, as_nv(ab_N2F), as_nv(dout_NF), as_nv(dab_N2F));
  else
    swiglu_backward_kernel<1><<<ceil_div(int64_t(N) * F, kThreads), kThreads, 0, stream>>>(
        N, F, as_nv(ab_N2F), as_nv(dout_NF), as_nv(dab_N2F));
  HYLO_CUDA_LAUNCH_CHECK("swiglu_backward_kernel");
}

}  // namespace hylo::cuda
