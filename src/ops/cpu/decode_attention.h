// Decode attention (SPEC §1, §5): one new query token per sequence against one layer's KV cache.
// Every cache kind (Flash-PBB b slots, SWA ring, linear SWA, full) keeps the keys a query may
// attend in at most two contiguous slot ranges, so one function serves them all; which slots are
// live is the cache's business (nn/kv_cache.h). CPU reference for the CUDA decode kernels.
//
// Shape legend: B batch, Hq query heads, Hkv kv heads (Hq % Hkv == 0; query head h reads kv head
// h / (Hq / Hkv)), S cache slots, D head dim.
//   q_BHD (B, Hq, D): the query of the token at position t of each sequence (all in lockstep),
//   k_BHSD / v_BHSD (B, Hkv, S, D): the cache, out_BHD (B, Hq, D), lse_BH (B, Hq) natural
//   log-sum-exp of the scaled scores. Scale 1/sqrt(D). Row-major, contiguous.
// Plain declarations, no fmt: the CUDA sources include this header.
#pragma once
#include <cstdint>

#include "attn/shape.h"

namespace hylo {

namespace cpu {

// out (and lse unless null) <- softmax(q k^T * scale) v over the live slots of each sequence.
template <class T>
void decode_attention_forward(const DecodeShape& shape, const LiveSlots& live, const T* q_BHD, const T* k_BHSD,
                              const T* v_BHSD, T* out_BHD, T* lse_BH);

}  // namespace cpu
}  // namespace hylo
