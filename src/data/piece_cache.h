// Pre-token -> ids memo for one tokenizing thread (data/tokenizer.cpp): most words repeat, and BPE
// on them is the costly part.
//
// Open addressing over 64-byte slots that hold the key and its ids inline, so a lookup reads one
// cache line. (A std::unordered_map read three or four, bucket array, node and key, each a likely
// miss: perf put ~40% of a prepare worker's time on those loads, and 16 workers sharing one L3
// lose more.) The table starts at 8 slots and doubles up to `max_slots` (8 MiB by default);
// past that a new piece replaces one of its probe run. What is cached changes only speed, never
// the ids: a piece is either found with exactly the ids it was stored with, or not found.
#pragma once
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

namespace hylo::data {

class PieceCache {
 public:
  static constexpr size_t kMaxKey = 30, kMaxIds = 6;  // longer pieces (rules, whitespace runs) rarely repeat

  // `max_slots`: a power of two, at least 8 (tests make it small to reach replacement).
  explicit PieceCache(size_t max_slots = size_t(1) << 17) : max_slots_(max_slots) {}

  // The key of `piece` for the calls below: 0 for a piece too long to keep (never hashed, never
  // found, never stored), else its hash, never 0 (0 marks an empty slot).
  static uint64_t hash_of(std::string_view piece) {
    if (piece.size() > kMaxKey) return 0;
    const uint64_t h = std::hash<std::string_view>{}(piece);
    return h == 0 ? 1 : h;
  }

  // Starts loading the slot where `h`'s probe run begins. A lookup's cost is that one cache miss
  // (~70% of encode_plain's samples waited on it), so the tokenizer hashes a run of pieces and
  // prefetches all of their slots before it looks any up: the misses then overlap.
  void prefetch(uint64_t h) const {
    if (h != 0) __builtin_prefetch(&slots_[h & mask_]);
  }

  // Appends the ids of `piece` (hashed to `h`) to `out` when cached.
  bool append_cached(std::string_view piece, uint64_t h, std::vector<int32_t>& out) const {
    if (h == 0) return false;
    for (size_t k = 0; k < kProbe; ++k) {
      const Slot& s = slots_[(h + k) & mask_];
      if (s.hash == 0) return false;  // runs have no holes: nothing is ever erased
      if (s.hash == h && s.key_len == piece.size() && std::memcmp(s.key, piece.data(), piece.size()) == 0) {
        out.insert(out.end(), s.ids, s.ids + s.n_ids);
        return true;
      }
    }
    return false;
  }

  // Stores a piece (hashed to `h`) that append_cached did not find.
  void insert(std::string_view piece, uint64_t h, std::span<const int32_t> ids) {
    if (h == 0 || ids.size() > kMaxIds) return;
    if (2 * (used_ + 1) > slots_.size() && slots_.size() < max_slots_) grow();
    Slot* target = nullptr;
    while (!target) {
      for (size_t k = 0; k < kProbe && !target; ++k)
        if (slots_[(h + k) & mask_].hash == 0) target = &slots_[(h + k) & mask_];
      if (target) ++used_;
      else if (slots_.size() < max_slots_) grow();  // a full run before the table is: make room
      else target = &slots_[(h + (h >> 58) % kProbe) & mask_];  // at full size: replace a fixed pseudo-random one
    }
    target->hash = h;
    target->key_len = uint8_t(piece.size());
    target->n_ids = uint8_t(ids.size());
    std::memcpy(target->key, piece.data(), piece.size());
    std::copy(ids.begin(), ids.end(), target->ids);
  }

 private:
  static constexpr size_t kProbe = 8;
  struct Slot {
    uint64_t hash;  // 0: empty
    uint8_t key_len, n_ids;
    char key[kMaxKey];
    int32_t ids[kMaxIds];
  };
  static_assert(sizeof(Slot) == 64, "one slot, one cache line");

  void grow() {
    std::vector<Slot> old(2 * slots_.size());
    old.swap(slots_);
    mask_ = slots_.size() - 1;
    used_ = 0;
    for (const Slot& s : old)
      if (s.hash != 0) insert(std::string_view(s.key, s.key_len), s.hash, std::span(s.ids, s.n_ids));
  }

  size_t max_slots_;
  std::vector<Slot> slots_ = std::vector<Slot>(8);
  size_t mask_ = 7, used_ = 0;
};

}  // namespace hylo::data
