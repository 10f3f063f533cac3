// Decode-time ops on a layer's KV cache tensors (SPEC §1, §5): writing one new position and
// attending one query token over the live slots. Plain tensor functions, no autograd (decoding
// never differentiates). Each dispatches by device: the CPU reference
// (ops/cpu/decode_attention.h, f32/f64) or the CUDA kernels (kernels/decode/decode.h, bf16). Which
// slots are written and live is the cache's business (nn/kv_cache.h).
//
// Shape legend: B batch, Hq query heads, Hkv kv heads, S cache slots, D head dim.
//   k_BHSD / v_BHSD (B, Hkv, S, D) the cache; k_BHD / v_BHD (B, Hkv, D) the new position;
//   q_BHD (B, Hq, D) the query. All contiguous, on one device, of one dtype.
#pragma once
#include "core/tensor.h"
#include "ops/cpu/decode_attention.h"

namespace hylo {

// First applies `move` (linear-SWA compaction, count 0: none), then writes k_BHD / v_BHD into
// `slot` of every (sequence, kv head) of the cache tensors, in place.
void kv_cache_write(const Tensor& k_BHSD, const Tensor& v_BHSD, const SlotMove& move, int slot, const Tensor& k_BHD,
                    const Tensor& v_BHD);

// softmax(q k^T / sqrt(D)) v over the live slots of every sequence -> (B, Hq, D).
Tensor decode_attention(const Tensor& q_BHD, const Tensor& k_BHSD, const Tensor& v_BHSD, const LiveSlots& live);

}  // namespace hylo
