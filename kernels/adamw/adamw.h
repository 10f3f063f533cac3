// Fused AdamW step on the GPU (oracle: src/ops/cpu/adamw.h, which gives the update formula).
// fp32 master weights p and moments m, v are updated in place from a bf16 (or fp32) gradient; the
// bf16 working copy of the weight that the forward pass reads is written in the same pass.
//
// The bf16 copy is rounded to nearest even, or stochastically (E[bf16(p)] = p, so updates smaller
// than a bf16 ulp are not systematically lost) with random bits from Philox4x32-10 keyed by `seed`,
// counter (element index / 4, step, param_index): a given (seed, step, param, element) always
// draws the same bits, on any GPU, independent of launch shape, and hylo::philox4x32 on the host
// reproduces them (element i uses word i % 4 of the block for counter
// {i / 4 low, i / 4 high, step, param_index}, key {seed low, seed high}).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace hylo {
struct bf16;
}

namespace hylo::cuda {

struct AdamWStep {
  float lr = 0.f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.f;  // 0 for norms and embeddings by default (SPEC §3)
  int64_t step = 1;          // 1-based; bias corrections 1 - beta^step are computed in double
  float grad_scale = 1.f;    // global-norm clipping factor applied to the gradient
  bool stochastic_rounding = false;
  uint64_t seed = 0;
  uint32_t param_index = 0;  // distinguishes parameters so their random streams differ
};

// p_bf16 may be nullptr (no working copy, e.g. an fp32-only parameter).
void adamw(int64_t n, float* p, float* m, float* v, const bf16* grad, bf16* p_bf16, const AdamWStep& hp,
           cudaStream_t stream);
void adamw(int64_t n, float* p, float* m, float* v, const float* grad, bf16* p_bf16, const AdamWStep& hp,
           cudaStream_t stream);

}  // namespace hylo::cuda
