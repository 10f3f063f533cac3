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

#include "ops/mask.h"  // HYLO_HD

namespace hylo {

// Slots [begin, end) of a cache.
struct SlotRange {
  int begin = 0, end = 0;
  HYLO_HD int size() const { return end > begin ? end - begin : 0; }
};

// The slots one decode query attends, oldest keys first: `older` (PBB: the previous block's tail;
// ring: the slots after the newest one), then `newer`. Either may be empty; the same for every
// sequence and kv head of the batch.
struct LiveSlots {
  SlotRange older, newer;
  HYLO_HD int keys() const { return older.size() + newer.size(); }
  // Slot of the j-th live key, 0 <= j < keys().
  HYLO_HD int slot(int j) const { return j < older.size() ? older.begin + j : newer.begin + (j - older.size()); }
};

// Rows [src, src + count) copied to [dst, dst + count) in every (sequence, kv head): linear-SWA
// compaction. The two never overlap; count == 0: nothing to move.
struct SlotMove {
  int src = 0, dst = 0, count = 0;
};

struct DecodeShape {
  int B = 0, Hq = 0, Hkv = 0, D = 0;
  int slots = 0;  // S: rows stored per (sequence, kv head), >= the cache's slots (kv_row_stride)
};

// Throws (HYLO_CHECK) unless sizes are positive, Hq % Hkv == 0, and the live ranges are non-empty
// in total and inside [0, slots).
void check_decode_args(const DecodeShape& shape, const LiveSlots& live);

namespace cpu {

// out (and lse unless null) <- softmax(q k^T * scale) v over the live slots of each sequence.
template <class T>
void decode_attention_forward(const DecodeShape& shape, const LiveSlots& live, const T* q_BHD, const T* k_BHSD,
                              const T* v_BHSD, T* out_BHD, T* lse_BH);

}  // namespace cpu
}  // namespace hylo
