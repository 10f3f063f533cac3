// AdamW: one thread updates 4 consecutive elements, the 4 words of one Philox block.
#include <cmath>

#include "kernels/adamw/adamw.h"
#include "kernels/common/common.cuh"

namespace hylo::cuda {
namespace {

constexpr int kThreads = 256;

// Scalars derived on the host once per call, rounded to fp32 exactly as the CPU reference does.
struct Coefficients {
  float beta1, beta2, one_minus_beta1, one_minus_beta2, eps, grad_scale;
  float step_size;     // lr / (1 - beta1^step)
  float inv_sqrt_bc2;  // 1 / sqrt(1 - beta2^step)
  float decay;         // 1 - lr * weight_decay
  bool stochastic;
  bool vectorized;  // every pointer aligned for 4-element vector access
  uint2 key;
  uint32_t step, param_index;
};

__device__ __forceinline__ float grad_value(const nv_bf16* g, int64_t i) { return __bfloat162float(g[i]); }
__device__ __forceinline__ float grad_value(const float* g, int64_t i) { return g[i]; }

// Explicit _rn operations: no fused multiply-adds, so the result matches the CPU reference's
// plain fp32 arithmetic (up to the compiler's treatment of the host side).
// One element's update; all four elements of a thread share the code path (vector or tail).
__device__ __forceinline__ float adamw_element(float g_raw, float& p, float& m, float& v, const Coefficients& c) {
  float g = __fmul_rn(g_raw, c.grad_scale);
  m = __fadd_rn(__fmul_rn(c.beta1, m), __fmul_rn(c.one_minus_beta1, g));
  v = __fadd_rn(__fmul_rn(c.beta2, v), __fmul_rn(__fmul_rn(c.one_minus_beta2, g), g));
  float denom = __fadd_rn(__fmul_rn(sqrtf(v), c.inv_sqrt_bc2), c.eps);
  p = __fsub_rn(__fmul_rn(p, c.decay), __fdiv_rn(__fmul_rn(c.step_size, m), denom));
  return p;
}

__device__ __forceinline__ nv_bf16 round_weight(float p, uint32_t random_word, const Coefficients& c) {
  return c.stochastic ? bf16_stochastic(p, random_word) : __float2bfloat16_rn(p);
}

__device__ __forceinline__ void load_grad4(const float* g, int64_t i, float out[4]) {
  const float4 x = *reinterpret_cast<const float4*>(g + i);
  out[0] = x.x, out[1] = x.y, out[2] = x.z, out[3] = x.w;
}
__device__ __forceinline__ void load_grad4(const nv_bf16* g, int64_t i, float out[4]) {
  const uint2 x = *reinterpret_cast<const uint2*>(g + i);
  const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&x.x));
  const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&x.y));
  out[0] = a.x, out[1] = a.y, out[2] = b.x, out[3] = b.y;
}

// Full groups of four move as 16-byte vectors (allocations are 512-byte aligned and base is a
// multiple of 4); the arithmetic is adamw_element's.
template <class G>
__global__ void adamw_kernel(int64_t n, float* p, float* m, float* v, const G* grad, nv_bf16* p_bf16,
                             Coefficients c) {
  int64_t base = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
  if (base >= n) return;
  uint4 random = make_uint4(0, 0, 0, 0);
  if (c.stochastic && p_bf16) {
    uint64_t block = uint64_t(base) >> 2;
    random = philox4x32(make_uint4(uint32_t(block), uint32_t(block >> 32), c.step, c.param_index), c.key);
  }
  const uint32_t words[4] = {random.x, random.y, random.z, random.w};
  if (c.vectorized && base + 4 <= n) {
    float4 p4 = *reinterpret_cast<float4*>(p + base), m4 = *reinterpret_cast<float4*>(m + base),
           v4 = *reinterpret_cast<float4*>(v + base);
    float g[4];
    load_grad4(grad, base, g);
    float* pp = &p4.x;
    float* mm = &m4.x;
    float* vv = &v4.x;
#pragma unroll
    for (int k = 0; k < 4; ++k) adamw_element(g[k], pp[k], mm[k], vv[k], c);
    *reinterpret_cast<float4*>(p + base) = p4;
    *reinterpret_cast<float4*>(m + base) = m4;
    *reinterpret_cast<float4*>(v + base) = v4;
    if (p_bf16) {
      __nv_bfloat162 lo, hi;
      lo.x = round_weight(pp[0], words[0], c), lo.y = round_weight(pp[1], words[1], c);
      hi.x = round_weight(pp[2], words[2], c), hi.y = round_weight(pp[3], words[3], c);
      uint2 packed;
      packed.x = *reinterpret_cast<uint32_t*>(&lo);
      packed.y = *reinterpret_cast<uint32_t*>(&hi);
      *reinterpret_cast<uint2*>(p_bf16 + base) = packed;
    }
    return;
  }
  for (int k = 0; k < 4 && base + k < n; ++k) {
    const int64_t i = base + k;
    float pi = p[i], mi = m[i], vi = v[i];
    adamw_element(grad_value(grad, i), pi, mi, vi, c);
    m[i] = mi;
    v[i] = vi;
    p[i] = pi;
    if (p_bf16) p_bf16[i] = round_weight(pi, words[k], c);
  }
}

template <class G>
void launch(int64_t n, float* p, float* m, float* v, const G* grad, bf16* p_bf16, const AdamWStep& hp,
            cudaStream_t stream) {
  HYLO_CUDA_REQUIRE(n >= 0, "adamw: negative size %lld", static_cast<long long>(n));
  HYLO_CUDA_REQUIRE(hp.step >= 1 && hp.step <= 0xffffffffLL, "adamw: step %lld must be in [1, 2^32)",
                    static_cast<long long>(hp.step));
  if (n == 0) return;
  Coefficients c;
  c.beta1 = hp.beta1;
  c.beta2 = hp.beta2;
  c.one_minus_beta1 = 1.f - hp.beta1;
  c.one_minus_beta2 = 1.f - hp.beta2;
  c.eps = hp.eps;
  c.grad_scale = hp.grad_scale;
  c.step_size = float(double(hp.lr) / (1.0 - std::pow(double(hp.beta1), double(hp.step))));
  c.inv_sqrt_bc2 = float(1.0 / std::sqrt(1.0 - std::pow(double(hp.beta2), double(hp.step))));
  c.decay = 1.f - hp.lr * hp.weight_decay;
  c.stochastic = hp.stochastic_rounding;
  const auto misaligned = [](const void* ptr, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes != 0; };
  c.vectorized = !misaligned(p, 16) && !misaligned(m, 16) && !misaligned(v, 16) &&
                 !misaligned(grad, std::is_same_v<G, float> ? 16 : 8) && !misaligned(p_bf16, 8);
  c.key = make_uint2(uint32_t(hp.seed), uint32_t(hp.seed >> 32));
  c.step = uint32_t(hp.step);
  c.param_index = hp.param_index;
  adamw_kernel<<<ceil_div(ceil_div(n, 4), kThreads), kThreads, 0, stream>>>(
      n, p, m, v, reinterpret_cast<const std::conditional_t<std::is_same_v<G, float>, float, nv_bf16>*>(grad),
      p_bf16 ? as_nv(p_bf16) : nullptr, c);
  HYLO_CUDA_LAUNCH_CHECK("adamw_kernel");
}

}  // namespace

void adamw(int64_t n, float* p, float* m, float* v, const bf16* grad, bf16* p_bf16, const AdamWStep& hp,
           cudaStream_t stream) {
  launch(n, p, m, v, grad, p_bf16, hp, stream);
}

void adamw(int64_t n, float* p, float* m, float* v, const float* grad, bf16* p_bf16, const AdamWStep& hp,
           cudaStream_t stream) {
  launch(n, p, m, v, grad, p_bf16, hp, stream);
}

}  // namespace hylo::cuda
