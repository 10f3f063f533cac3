// KV cache slot rules and per-layer storage (see kv_cache.h for the table of rules).
#include "nn/kv_cache.h"

#include <algorithm>

#include "core/error.h"
#include "ops/decode.h"

namespace hylo {

LiveSlots pbb_live_slots(int64_t t, int block, int bridge) {
  const int r = int(t % block);
  LiveSlots live;
  live.newer = SlotRange{0, r + 1};
  // Bridge keys t-(w-1) .. t-r-1 sit in the previous block's last w-1-r slots, not yet overwritten
  // because this block has written only slots [0, r].
  if (t >= block && r < bridge - 1) live.older = SlotRange{block - (bridge - 1 - r), block};
  return live;
}

LiveSlots ring_live_slots(int64_t t, int window) {
  const int s = int(t % window);
  LiveSlots live;
  live.newer = SlotRange{0, s + 1};
  if (t >= window) live.older = SlotRange{s + 1, window};  // empty when s == W - 1
  return live;
}

KvSlotMap KvSlotMap::pbb(int block, int bridge) {
  HYLO_CHECK(block >= 1 && bridge >= 1 && bridge <= block,
             "kv cache: pbb needs 1 <= bridge <= block, got block={} bridge={}", block, bridge);
  KvSlotMap m(KvCacheKind::pbb, block);
  m.block_ = block;
  m.bridge_ = bridge;
  return m;
}

KvSlotMap KvSlotMap::swa_ring(int window) {
  HYLO_CHECK(window >= 1, "kv cache: swa window must be >= 1, got {}", window);
  KvSlotMap m(KvCacheKind::swa_ring, window);
  m.window_ = window;
  return m;
}

KvSlotMap KvSlotMap::swa_linear(int window) {
  HYLO_CHECK(window >= 1, "kv cache: swa window must be >= 1, got {}", window);
  KvSlotMap m(KvCacheKind::swa_linear, 2 * window);
  m.window_ = window;
  return m;
}

KvSlotMap KvSlotMap::full(int max_len) {
  HYLO_CHECK(max_len >= 1, "kv cache: full cache needs max_len >= 1, got {}", max_len);
  return KvSlotMap(KvCacheKind::full, max_len);
}

AttnMask KvSlotMap::mask() const {
  switch (kind_) {
    case KvCacheKind::pbb: return AttnMask{MaskKind::pbb, 0, block_, bridge_};
    case KvCacheKind::swa_ring:
    case KvCacheKind::swa_linear: return AttnMask{MaskKind::swa, window_, 0, 0};
    case KvCacheKind::full: break;
  }
  return AttnMask{MaskKind::full, 0, 0, 0};
}

KvSlotMap::Append KvSlotMap::append(int64_t t) {
  HYLO_CHECK(t == length_, "kv cache: appended position {} but the cache holds {} positions", t, length_);
  Append a;
  switch (kind_) {
    case KvCacheKind::pbb: a.slot = int(t % block_); break;
    case KvCacheKind::swa_ring: a.slot = int(t % window_); break;
    case KvCacheKind::swa_linear:
      if (t - base_ == slots_) {
        // Full: keep the W-1 newest positions (the window of t without t itself) at the front.
        a.move = SlotMove{window_ + 1, 0, window_ - 1};
        base_ = t - (window_ - 1);
      }
      a.slot = int(t - base_);
      break;
    case KvCacheKind::full:
      HYLO_CHECK(t < slots_, "kv cache: full cache of max_len {} cannot take position {}", slots_, t);
      a.slot = int(t);
      break;
  }
  ++length_;
  return a;
}

LiveSlots KvSlotMap::live(int64_t t) const {
  HYLO_CHECK(t >= 0 && t == length_ - 1, "kv cache: query at position {} but the newest cached position is {}", t,
             length_ - 1);
  switch (kind_) {
    case KvCacheKind::pbb: return pbb_live_slots(t, block_, bridge_);
    case KvCacheKind::swa_ring: return ring_live_slots(t, window_);
    case KvCacheKind::swa_linear: {
      const int64_t lo = std::max<int64_t>(0, t - window_ + 1);
      return LiveSlots{SlotRange{}, SlotRange{int(lo - base_), int(t - base_ + 1)}};
    }
    case KvCacheKind::full: break;
  }
  return LiveSlots{SlotRange{}, SlotRange{0, int(t + 1)}};
}

int kv_row_stride(int slots) { return slots % 64 == 0 ? slots + 8 : slots; }

KvCache::KvCache(const KvSlotMap& map, int batch, int kv_heads, int head_dim, DType dtype, Device device)
    : map_(map), B_(batch), Hkv_(kv_heads), D_(head_dim) {
  HYLO_CHECK(batch > 0 && kv_heads > 0 && head_dim > 0,
             "kv cache: sizes must be positive, got batch={} kv_heads={} head_dim={}", batch, kv_heads, head_dim);
  HYLO_CHECK(map.length() == 0, "kv cache: slot map already holds {} positions", map.length());
  const Shape shape{batch, kv_heads, kv_row_stride(map.slots()), head_dim};
  // Zeros, not garbage: a never-written slot is never live, but a NaN there would still poison a
  // kernel that loads whole tiles.
  k_ = Tensor::zeros(shape, dtype, device, "kv cache k");
  v_ = Tensor::zeros(shape, dtype, device, "kv cache v");
  position_.assign(size_t(map.slots()), -1);
}

int KvCache::append(int64_t t, const Tensor& k_BHD, const Tensor& v_BHD) {
  KvSlotMap next = map_;  // committed only once the write went through
  const KvSlotMap::Append a = next.append(t);
  kv_cache_write(k_, v_, a.move, a.slot, k_BHD, v_BHD);
  map_ = next;
  if (a.move.count > 0) {
    std::copy(position_.begin() + a.move.src, position_.begin() + a.move.src + a.move.count,
              position_.begin() + a.move.dst);
    std::fill(position_.begin() + a.move.dst + a.move.count, position_.end(), -1);
    rows_moved_ += a.move.count;
  }
  position_[size_t(a.slot)] = t;
  return a.slot;
}

void KvCache::fill(const Tensor& k_TBHD, const Tensor& v_TBHD) {
  HYLO_CHECK(map_.length() == 0, "kv cache: fill needs an empty cache, this one holds {} positions", map_.length());
  HYLO_CHECK(k_TBHD.dim() == 4 && v_TBHD.shape() == k_TBHD.shape(), "kv cache: fill from k {} and v {} (T, B, Hkv, D)",
             shape_str(k_TBHD.shape()), shape_str(v_TBHD.shape()));
  const int64_t T = k_TBHD.size(0);
  if (map_.kind() == KvCacheKind::swa_linear) {  // compactions move slots: append by append
    for (int64_t t = 0; t < T; ++t)
      append(t, k_TBHD.slice(0, t, t + 1).contiguous().view({B_, Hkv_, D_}),
             v_TBHD.slice(0, t, t + 1).contiguous().view({B_, Hkv_, D_}));
    return;
  }
  // Every other kind keeps position t in slot t mod slots and never moves it (full: slot t), so T
  // appends leave the last min(T, slots) positions, in at most two runs of slots (where the ring
  // wraps): each run is one strided copy, (T', B, Hkv, D) into slots (B, Hkv, T', D).
  KvSlotMap next = map_;  // committed only once the writes went through; a full cache out of slots throws here
  for (int64_t t = 0; t < T; ++t) next.append(t);
  const int64_t first = std::max<int64_t>(0, T - slots());
  for (int64_t p = first; p < T;) {
    const int64_t slot = p % slots(), n = std::min(T - p, slots() - slot);
    k_.slice(2, slot, slot + n).copy_from(k_TBHD.slice(0, p, p + n).transpose(0, 1).transpose(1, 2));
    v_.slice(2, slot, slot + n).copy_from(v_TBHD.slice(0, p, p + n).transpose(0, 1).transpose(1, 2));
    for (int64_t i = 0; i < n; ++i) position_[size_t(slot + i)] = p + i;
    p += n;
  }
  map_ = next;
}

Tensor KvCache::attend(int64_t t, const Tensor& q_BHD) const { return decode_attention(q_BHD, k_, v_, map_.live(t)); }

}  // namespace hylo
