// The attention vocabulary shared by the ops (src/ops) and the CUDA kernels (kernels/): the
// shapes of a training attention call and of a decode step against a KV cache, and their checks.
// It sits below both so that kernels include nothing from src/ops. Plain declarations, no fmt:
// CUDA sources include this header.
//
// Shape legend: B batch, T sequence, Hq query heads, Hkv key/value heads (Hq % Hkv == 0), D head
// dim, S cache slots.
#pragma once
#include <cstdint>

#include "attn/mask.h"

namespace hylo {

struct AttnShape {
  int B = 0, T = 0, Hq = 0, Hkv = 0, D = 0;
};

// Throws (HYLO_CHECK) unless the shape and mask are usable: positive sizes, Hq % Hkv == 0,
// window >= 1 for swa, 1 <= bridge <= block for pbb.
void check_attention_args(const AttnShape& shape, const AttnMask& mask);

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

}  // namespace hylo
