// Shared by the decode kernels (decode.cu): their parameters and the merge of a block's partial
// softmax states. Included by decode.cu only.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "attn/shape.h"

namespace hylo::cuda::decode {

struct Params {
  const __nv_bfloat16 *q, *k, *v;
  __nv_bfloat16* out;
  float* part_acc;  // (B, Hq, splits, D): unnormalised sums, in units of exp2(s - max)
  float2* part_ml;  // (B, Hq, splits): (max of the scaled log2 scores, sum of exp2(s - max))
  LiveSlots live;
  int Hq, Hkv, group, chunks, slots, keys, splits, keys_per_split;
  float scale_log2;  // log2(e) / sqrt(D): scores in log2 units, exp2 instead of exp
};

// The block's Parts partial softmax states of Rows query heads (h0..h0 + rows - 1 of sequence b)
// merged, each rescaled to the common max: the output rows, or with splits the split's partial
// (unnormalised sums, max, sum) for decode_combine_kernel. m holds maxima of scaled log2 scores
// (-inf for a part that saw no key), l the sums of exp2(score - max), acc the weighted v sums
// (rows of Stride >= D floats).
template <int Parts, int Rows, int D, int Stride = D>
__device__ __forceinline__ void merge_and_store(const Params& p, const float (*m)[Rows], const float (*l)[Rows],
                                                const float (*acc)[Rows][Stride], int rows, int b, int h0, int split,
                                                int tid, int threads) {
  for (int idx = tid; idx < rows * D; idx += threads) {
    const int g = idx / D, d = idx % D;
    float M = -INFINITY;
#pragma unroll
    for (int r = 0; r < Parts; ++r) M = fmaxf(M, m[r][g]);
    float L = 0.f, A = 0.f;
#pragma unroll
    for (int r = 0; r < Parts; ++r) {
      const float w = exp2f(m[r][g] - M);  // 0 for a part that saw no key (M is finite)
      L = fmaf(l[r][g], w, L);
      A = fmaf(acc[r][g][d], w, A);
    }
    const size_t bh = size_t(b) * p.Hq + h0 + g;
    if (p.splits == 1) {
      p.out[bh * D + d] = __float2bfloat16(A / L);
    } else {
      const size_t row = bh * p.splits + split;
      p.part_acc[row * D + d] = A;
      if (d == 0) p.part_ml[row] = make_float2(M, L);
    }
  }
}

}  // namespace hylo::cuda::decode
