// Per-layer KV caches for decoding a batch of sequences in lockstep (SPEC §1, §5). The slot
// bookkeeping (KvSlotMap: where position t goes, which slots a query at t attends) is separate
// from the storage, so that one rule drives the CPU and the CUDA caches alike.
//
//   kind        slots  where t lives                  live keys for the query at t
//   pbb(b, w)   b      t mod b (never moved)           [b-(w-1-r), b) (previous block's tail, t >= b,
//                                                      r = t mod b < w-1), then [0, r]
//   swa ring W  W      t mod W (never moved)           [(t+1) mod W, W) (t >= W), then [0, t mod W]
//   swa linear  2W     t - base; when full, the last   [t-W+1-base, t-base] (one range, the layout
//               W-1 positions move to slots [0, W-1)  a FlashAttention-style positional cache needs)
//   full        max_len  t                             [0, t]
//
// Shape legend: B batch, Hkv kv heads, S slots, D head dim; k/v storage (B, Hkv, kv_row_stride(S), D)
// row-major (rows past S are never written or read), new tokens k_BHD / v_BHD (B, Hkv, D).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "ops/cpu/decode_attention.h"
#include "attn/mask.h"

namespace hylo {

enum class KvCacheKind : uint8_t { pbb, swa_ring, swa_linear, full };

// The Flash-PBB rule of SPEC §1 and the ring rule, as free functions of t (both are stateless).
LiveSlots pbb_live_slots(int64_t t, int block, int bridge);
LiveSlots ring_live_slots(int64_t t, int window);

class KvSlotMap {
 public:
  static KvSlotMap pbb(int block, int bridge);  // 1 <= bridge <= block
  static KvSlotMap swa_ring(int window);
  static KvSlotMap swa_linear(int window);
  static KvSlotMap full(int max_len);

  KvCacheKind kind() const { return kind_; }
  int slots() const { return slots_; }  // allocated per (sequence, kv head)
  AttnMask mask() const;                // the attention mask the cache serves
  int64_t length() const { return length_; }
  // Linear SWA: steps between compactions once the cache has filled (W + 1); 0 for the others.
  int compaction_period() const { return kind_ == KvCacheKind::swa_linear ? window_ + 1 : 0; }

  struct Append {
    int slot = 0;   // where position t is written
    SlotMove move;  // to apply before writing (linear SWA compaction)
  };
  // Position t joins the cache; t must equal length(). Throws when a full cache is out of slots.
  Append append(int64_t t);
  // Slots the query at t attends, oldest first; t must equal length() - 1 (its own k/v appended).
  LiveSlots live(int64_t t) const;

 private:
  KvSlotMap(KvCacheKind kind, int slots) : kind_(kind), slots_(slots) {}
  KvCacheKind kind_;
  int slots_ = 0, block_ = 0, bridge_ = 0, window_ = 0;
  int64_t length_ = 0, base_ = 0;  // base_: position held in slot 0 (linear SWA)
};

// Rows stored per (sequence, kv head) for a cache of `slots` slots: `slots`, plus 8 when it is a
// multiple of 64, so that consecutive (sequence, head) slices never start a multiple of 64 rows
// apart. At b = W = 512 rows every block of a decode step reads the same offset of its slice at
// once and they crowd the same DRAM channels: 520 rows made SWA decode 5-6% and PBB 1-5% faster at
// batch 64 (experiments/results/decode/LOG.md).
int kv_row_stride(int slots);

// One layer's cache: k and v (B, Hkv, kv_row_stride(S), D) tensors on the model's device, of its compute dtype
// (CPU f32/f64: the reference; CUDA bf16: the decode kernels). The slot rule stays on the host;
// ops/decode.h writes and attends on whichever device the tensors live.
class KvCache {
 public:
  KvCache(const KvSlotMap& map, int batch, int kv_heads, int head_dim, DType dtype = DType::f32,
          Device device = Device::cpu);

  // Appends position t (== length()) for every sequence from k_BHD / v_BHD (B, Hkv, D), of the
  // cache's dtype and device; returns the slot it went to.
  int append(int64_t t, const Tensor& k_BHD, const Tensor& v_BHD);
  // Positions 0 .. T-1 into the empty cache from k_TBHD / v_TBHD (T, B, Hkv, D, any strides): what T appends
  // leave, writing only the positions no later one overwrites (Flash-PBB and the ring: the last
  // `slots`), so that a long prompt costs one write per slot, not per position.
  void fill(const Tensor& k_TBHD, const Tensor& v_TBHD);
  // Decode attention of the query at t (the newest position, already appended) over its live
  // slots: q_BHD (B, Hq, D) -> (B, Hq, D).
  Tensor attend(int64_t t, const Tensor& q_BHD) const;
  LiveSlots live(int64_t t) const { return map_.live(t); }
  DecodeShape decode_shape(int q_heads) const { return DecodeShape{B_, q_heads, Hkv_, D_, int(k_.size(2))}; }

  const Tensor& k() const { return k_; }  // (B, Hkv, kv_row_stride(S), D)
  const Tensor& v() const { return v_; }
  const KvSlotMap& slot_map() const { return map_; }
  int slots() const { return map_.slots(); }
  int64_t length() const { return map_.length(); }
  size_t allocated_bytes() const { return k_.nbytes() + v_.nbytes(); }
  // Position stored in `slot` (-1 while empty), tracked independently of the slot rule.
  int64_t position_in(int slot) const { return position_[size_t(slot)]; }
  // Slot rows copied by compactions so far, per (sequence, kv head); 0 for PBB and the ring.
  int64_t rows_moved() const { return rows_moved_; }

 private:
  KvSlotMap map_;
  int B_, Hkv_, D_;
  Tensor k_, v_;
  std::vector<int64_t> position_;
  int64_t rows_moved_ = 0;
};

// Flash-PBB: b slots, position t in slot t mod b, no entry ever moved.
struct FlashPbbCache : KvCache {
  FlashPbbCache(int batch, int kv_heads, int head_dim, int block, int bridge, DType dtype = DType::f32,
                Device device = Device::cpu)
      : KvCache(KvSlotMap::pbb(block, bridge), batch, kv_heads, head_dim, dtype, device) {}
};
// Flash-SWA: a W-slot ring.
struct SwaRingCache : KvCache {
  SwaRingCache(int batch, int kv_heads, int head_dim, int window, DType dtype = DType::f32,
               Device device = Device::cpu)
      : KvCache(KvSlotMap::swa_ring(window), batch, kv_heads, head_dim, dtype, device) {}
};
// Linear SWA: 2W slots in position order, compacted every W + 1 steps once full.
struct LinearSwaCache : KvCache {
  LinearSwaCache(int batch, int kv_heads, int head_dim, int window, DType dtype = DType::f32,
                 Device device = Device::cpu)
      : KvCache(KvSlotMap::swa_linear(window), batch, kv_heads, head_dim, dtype, device) {}
};
// Full attention: preallocated to max_len positions.
struct FullCache : KvCache {
  FullCache(int batch, int kv_heads, int head_dim, int max_len, DType dtype = DType::f32, Device device = Device::cpu)
      : KvCache(KvSlotMap::full(max_len), batch, kv_heads, head_dim, dtype, device) {}
};

}  // namespace hylo
