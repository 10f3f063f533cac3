// Counter-based random numbers (Philox4x32-10). A value depends only on (seed, stream, counter),
// never on thread count or call order, and the whole state is three integers that a checkpoint
// stores exactly.
#pragma once
#include <array>
#include <cmath>
#include <cstdint>

namespace hylo {

constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ull;  // 2^64 / golden ratio: splitmix64's Weyl step

// splitmix64's output for the state x (its Weyl step included): a fixed 64-bit mix, where a seed or
// an index must become well-spread bits without a stream (data order, split rules, fingerprints).
inline uint64_t splitmix64(uint64_t x) {
  x += kGoldenGamma;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// One Philox4x32-10 block: 4 random words for counter `ctr` under key `key`.
inline std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key) {
  constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t(M0) * ctr[0], p1 = uint64_t(M1) * ctr[2];
    ctr = {uint32_t(p1 >> 32) ^ ctr[1] ^ key[0], uint32_t(p1), uint32_t(p0 >> 32) ^ ctr[3] ^ key[1], uint32_t(p0)};
    key[0] += W0;
    key[1] += W1;
  }
  return ctr;
}

// A sequential stream over Philox: element i of stream `stream` under `seed` is fixed forever.
struct Rng {
  uint64_t seed = 0;
  uint64_t stream = 0;
  uint64_t counter = 0;  // number of 32-bit words consumed

  uint32_t word_at(uint64_t i) const {
    auto r = philox4x32({uint32_t(i >> 2), uint32_t(i >> 34), uint32_t(stream), uint32_t(stream >> 32)},
                        {uint32_t(seed), uint32_t(seed >> 32)});
    return r[i & 3];
  }
  uint32_t next_u32() { return word_at(counter++); }
  uint64_t next_u64() { return (uint64_t(next_u32()) << 32) | next_u32(); }
  // Uniform in [0, n) without modulo bias worth caring about (n << 2^64).
  uint64_t below(uint64_t n) { return n ? next_u64() % n : 0; }
  // Uniform in (0, 1).
  double uniform() { return (double(next_u64() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
  // Standard normal (Box-Muller, one value per two uniforms so the stream position is simple).
  double normal() {
    double u1 = uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};

}  // namespace hylo
