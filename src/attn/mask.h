// Attention masks of SPEC §1, shared by the CPU reference and the CUDA kernels. Query t may attend
// key s only when s <= t and the kind's rule allows it.
#pragma once
#include <cstdint>

#ifdef __CUDACC__
#define HYLO_HD __host__ __device__ __forceinline__
#else
#define HYLO_HD inline
#endif

namespace hylo {

enum class MaskKind : uint8_t { full, swa, pbb };

struct AttnMask {
  MaskKind kind = MaskKind::full;
  int window = 0;  // swa: W keys (t - s < W)
  int block = 0;   // pbb: block size b
  int bridge = 0;  // pbb: bridge width w, 1 <= w <= b

  HYLO_HD bool allowed(int64_t t, int64_t s) const {
    if (s > t) return false;
    switch (kind) {
      case MaskKind::full: return true;
      case MaskKind::swa: return t - s < window;
      case MaskKind::pbb: return s / block == t / block || t - s < bridge;
    }
    return false;
  }
};

// n / d for 0 <= n < 2^31 and a divisor d >= 1 fixed in advance, as a multiply-high and a shift
// (Granlund & Montgomery, "Division by invariant integers using multiplication", 1994). With
// s = ceil(log2 d) and m = ceil(2^(31+s) / d), which is below 2^32, floor(n m / 2^(31+s)) equals
// floor(n / d): the excess m d - 2^(31+s) is below d <= 2^s, so for n < 2^31 it adds less than 1/d.
// d = 1 (s = 0, whose shift would be negative) keeps m = 0 and returns n.
class FastDiv {
 public:
  FastDiv() = default;
  explicit FastDiv(int d) {
    int s = 0;
    while ((int64_t(1) << s) < d) ++s;
    if (s > 0) {
      mul_ = uint32_t(((uint64_t(1) << (31 + s)) + uint64_t(d) - 1) / uint64_t(d));
      shift_ = s - 1;
    }
  }
  HYLO_HD int operator()(int n) const {
    if (mul_ == 0) return n;
#ifdef __CUDA_ARCH__
    return int(__umulhi(uint32_t(n), mul_) >> shift_);
#else
    return int(((uint64_t(uint32_t(n)) * mul_) >> 32) >> shift_);
#endif
  }

 private:
  uint32_t mul_ = 0;
  int shift_ = 0;
};

// The range of keys a query may attend and of queries that may attend a key, for positions below
// 2^31: what the CPU reference loops over and what the CUDA kernels evaluate at the start of every
// block. pbb's division by the block size is FastDiv's multiply and shift; the general 64-bit
// division took ~20 dependent instructions there, four times per block, 8% of the pbb forward's
// warp time (experiments/results/attention/LOG.md, v22). tests/cpu/test_attention.cpp checks both bounds against SPEC §1.
class MaskBounds {
 public:
  MaskBounds() = default;
  explicit MaskBounds(const AttnMask& m)
      : kind_(m.kind), window_(m.window), block_(m.block), bridge_(m.bridge),
        per_block_(m.kind == MaskKind::pbb ? m.block : 1) {}

  // Smallest key position query t may attend; every s in [lowest_key(t), t] is allowed. (For pbb
  // the allowed set is contiguous: the block start or the bridge start, whichever is lower.)
  HYLO_HD int lowest_key(int t) const {
    switch (kind_) {
      case MaskKind::full: return 0;
      case MaskKind::swa: return t - window_ + 1 > 0 ? t - window_ + 1 : 0;
      case MaskKind::pbb: {
        const int block_start = per_block_(t) * block_, bridge_start = t - bridge_ + 1;
        const int lo = block_start < bridge_start ? block_start : bridge_start;
        return lo > 0 ? lo : 0;
      }
    }
    return 0;
  }
  // Highest query position that may attend key s (the inverse of lowest_key, which is
  // non-decreasing in t): a pass over key tiles visits only queries in [s, this]. Not clamped to
  // the sequence; 64-bit because s + window may pass 2^31.
  HYLO_HD int64_t highest_query(int s) const {
    switch (kind_) {
      case MaskKind::full: return INT64_MAX / 4;
      case MaskKind::swa: return int64_t(s) + window_ - 1;
      case MaskKind::pbb: {
        // Same block as s, or within the bridge after s: the later of the two ends.
        const int64_t block_end = int64_t(per_block_(s)) * block_ + block_ - 1, bridge_end = int64_t(s) + bridge_ - 1;
        return block_end > bridge_end ? block_end : bridge_end;
      }
    }
    return s;
  }

 private:
  MaskKind kind_ = MaskKind::full;
  int window_ = 0, block_ = 1, bridge_ = 0;
  FastDiv per_block_;
};

// Allowed (t, s) pairs of a sequence of length T (below 2^31): the work a perfect kernel does, and
// what FLOP counts and the attention bench's TFLOP/s count.
inline int64_t visited_pairs(const AttnMask& mask, int T) {
  const MaskBounds bounds(mask);
  int64_t pairs = 0;
  for (int t = 0; t < T; ++t) pairs += t - bounds.lowest_key(t) + 1;
  return pairs;
}

}  // namespace hylo
