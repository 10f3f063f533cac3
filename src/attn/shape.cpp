#include "attn/shape.h"

#include "core/error.h"

namespace hylo {

void check_attention_args(const AttnShape& s, const AttnMask& m) {
  HYLO_CHECK(s.B > 0 && s.T > 0 && s.Hq > 0 && s.Hkv > 0 && s.D > 0,
             "attention: sizes must be positive, got B={} T={} Hq={} Hkv={} D={}", s.B, s.T, s.Hq, s.Hkv, s.D);
  HYLO_CHECK(s.Hq % s.Hkv == 0, "attention: query heads {} not a multiple of kv heads {}", s.Hq, s.Hkv);
  switch (m.kind) {
    case MaskKind::full: break;
    case MaskKind::swa: HYLO_CHECK(m.window >= 1, "attention: swa window must be >= 1, got {}", m.window); break;
    case MaskKind::pbb:
      HYLO_CHECK(m.block >= 1 && m.bridge >= 1 && m.bridge <= m.block,
                 "attention: pbb needs 1 <= bridge <= block, got block={} bridge={}", m.block, m.bridge);
      break;
  }
}


void check_decode_args(const DecodeShape& s, const LiveSlots& live) {
  HYLO_CHECK(s.B > 0 && s.Hq > 0 && s.Hkv > 0 && s.D > 0 && s.slots > 0,
             "decode attention: sizes must be positive, got B={} Hq={} Hkv={} D={} slots={}", s.B, s.Hq, s.Hkv, s.D,
             s.slots);
  HYLO_CHECK(s.Hq % s.Hkv == 0, "decode attention: query heads {} not a multiple of kv heads {}", s.Hq, s.Hkv);
  for (const SlotRange& r : {live.older, live.newer})
    HYLO_CHECK(r.size() == 0 || (r.begin >= 0 && r.end <= s.slots),
               "decode attention: live slots [{}, {}) outside the cache's {} slots", r.begin, r.end, s.slots);
  HYLO_CHECK(live.keys() > 0, "decode attention: no live key (a query always attends itself)");
}

}  // namespace hylo
