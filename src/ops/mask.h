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

  // Smallest key position query t may attend; every s in [lowest_key(t), t] is allowed.
  // (For pbb the allowed set is contiguous: the block start or the bridge start, whichever is lower.)
  HYLO_HD int64_t lowest_key(int64_t t) const {
    switch (kind) {
      case MaskKind::full: return 0;
      case MaskKind::swa: return t - window + 1 > 0 ? t - window + 1 : 0;
      case MaskKind::pbb: {
        int64_t block_start = t / block * block, bridge_start = t - bridge + 1;
        int64_t lo = block_start < bridge_start ? block_start : bridge_start;
        return lo > 0 ? lo : 0;
      }
    }
    return 0;
  }
};

}  // namespace hylo
