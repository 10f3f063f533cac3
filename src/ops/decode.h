// Decode-time ops (SPEC §1, §5): on a layer's KV cache tensors, writing one new position and
// attending one query token over the live slots; on the logits, the greedy tokens and the targets'
// log-probabilities (what decoding and scoring read of a row). Plain tensor functions, no autograd
// (decoding never differentiates). Each dispatches by device: the CPU reference
// (ops/cpu/decode_attention.h, f32/f64) or the CUDA kernels (kernels/decode/decode.h, bf16). Which
// slots are written and live is the cache's business (nn/kv_cache.h).
//
// Shape legend: B batch, Hq query heads, Hkv kv heads, S cache slots, D head dim.
//   k_BHSD / v_BHSD (B, Hkv, S, D) the cache; k_BHD / v_BHD (B, Hkv, D) the new position;
//   q_BHD (B, Hq, D) the query. All contiguous, on one device, of one dtype.
#pragma once
#include <cmath>
#include <span>
#include <type_traits>
#include <vector>

#include "core/tensor.h"
#include "ops/cpu/decode_attention.h"

namespace hylo {

// First applies `move` (linear-SWA compaction, count 0: none), then writes k_BHD / v_BHD into
// `slot` of every (sequence, kv head) of the cache tensors, in place.
void kv_cache_write(const Tensor& k_BHSD, const Tensor& v_BHSD, const SlotMove& move, int slot, const Tensor& k_BHD,
                    const Tensor& v_BHD);

// softmax(q k^T / sqrt(D)) v over the live slots of every sequence -> (B, Hq, D).
Tensor decode_attention(const Tensor& q_BHD, const Tensor& k_BHSD, const Tensor& v_BHSD, const LiveSlots& live);

// The greedy token: the first index of the largest of values[0, n), NaN skipped (a row of NaN
// gives 0). The CPU reference of greedy_tokens, and sample_token's at temperature 0.
template <class T>
int32_t first_argmax(const T* values, int n) {
  using Wide = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const auto value = [](T v) -> Wide {
    if constexpr (std::is_same_v<T, bf16>) return bf16_to_float(v);
    else return Wide(v);
  };
  int32_t best = -1;
  Wide top = 0;
  for (int i = 0; i < n; ++i)
    if (const Wide v = value(values[i]); !std::isnan(v) && (best < 0 || v > top)) top = v, best = i;
  return best < 0 ? 0 : best;
}

// first_argmax of the first n_valid values of every row of logits_BV (B, V), as host ids. On
// CUDA the rows are reduced on the device and only the B ids come back: copying the logits to the
// host and scanning them there took most of a decode step at batch 64 (64 x 50304 values).
std::vector<int32_t> greedy_tokens(const Tensor& logits_BV, int n_valid);

// log softmax(logits_NV[n, :n_valid])[targets_N[n]] of every row, as host values; a row whose
// target is -1 gives 0. On CUDA (bf16 logits) the rows are reduced on the device by the fused
// cross-entropy kernel (fp32 log-sum-exp) on a copy of the logits, and only N values come back:
// scoring 489k held-out tokens by copying their 50304-wide rows to the host and reducing them there
// took minutes of CPU a run. The CPU reference sums the exponentials in double around the row's max.
std::vector<double> target_logprobs(const Tensor& logits_NV, std::span<const int32_t> targets_N, int n_valid);

}  // namespace hylo
