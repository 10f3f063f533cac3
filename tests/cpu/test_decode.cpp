// Decoding through KV caches: feeding tokens one at a time through each cache kind and decode
// attention reproduces the training attention (cpu::attention_forward over the whole sequence)
// for the cache's mask, row for row; the slot rules hold (Flash-PBB never moves an entry and
// allocates b slots, the ring W, linear SWA 2W) and the live slots hold exactly the allowed keys.
// Shape legend: B batch, T sequence, Hq/Hkv heads, D head dim; training tensors (B, T, H, D).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "nn/kv_cache.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/decode_attention.h"
#include "ops/decode.h"

using namespace hylo;

namespace {

template <class T>
std::vector<T> random_values(size_t n, uint64_t seed) {
  Rng rng{seed, 0, 0};
  std::vector<T> v(n);
  for (auto& x : v) x = T(rng.normal());
  return v;
}

std::string describe(const KvSlotMap& m) {
  const AttnMask a = m.mask();
  switch (m.kind()) {
    case KvCacheKind::pbb: return "pbb(" + std::to_string(a.block) + "," + std::to_string(a.bridge) + ")";
    case KvCacheKind::swa_ring: return "swa ring(" + std::to_string(a.window) + ")";
    case KvCacheKind::swa_linear: return "swa linear(" + std::to_string(a.window) + ")";
    case KvCacheKind::full: break;
  }
  return "full";
}

// Decodes T tokens through `cache` and compares every (t, b, h) output row and lse with the
// training reference. Returns the worst relative error (per row: ||diff|| / ||ref||).
template <class T>
double decode_vs_training(KvCache& cache, const AttnShape& sh, uint64_t seed) {
  const AttnMask mask = cache.slot_map().mask();
  const size_t nq = size_t(sh.B) * sh.T * sh.Hq * sh.D, nkv = size_t(sh.B) * sh.T * sh.Hkv * sh.D;
  const auto q = random_values<T>(nq, seed), k = random_values<T>(nkv, seed + 1), v = random_values<T>(nkv, seed + 2);
  std::vector<T> out_ref(nq), lse_ref(size_t(sh.B) * sh.Hq * sh.T);
  cpu::attention_forward(sh, mask, q.data(), k.data(), v.data(), out_ref.data(), lse_ref.data());

  const int D = sh.D;
  std::vector<T> q_BHD(size_t(sh.B) * sh.Hq * D), k_BHD(size_t(sh.B) * sh.Hkv * D), v_BHD(k_BHD.size());
  std::vector<T> out_BHD(q_BHD.size()), lse_BH(size_t(sh.B) * sh.Hq);
  double worst = 0;
  for (int t = 0; t < sh.T; ++t) {
    // Token t of every sequence: (B, T, H, D) rows -> (B, H, D).
    for (int b = 0; b < sh.B; ++b) {
      const size_t src_q = (size_t(b) * sh.T + t) * sh.Hq * D, src_kv = (size_t(b) * sh.T + t) * sh.Hkv * D;
      std::copy_n(q.begin() + src_q, sh.Hq * D, q_BHD.begin() + size_t(b) * sh.Hq * D);
      std::copy_n(k.begin() + src_kv, sh.Hkv * D, k_BHD.begin() + size_t(b) * sh.Hkv * D);
      std::copy_n(v.begin() + src_kv, sh.Hkv * D, v_BHD.begin() + size_t(b) * sh.Hkv * D);
    }
    const int slot = cache.append(t, Tensor::from_vector(k_BHD, {sh.B, sh.Hkv, D}),
                                  Tensor::from_vector(v_BHD, {sh.B, sh.Hkv, D}));
    REQUIRE(cache.position_in(slot) == t);
    const LiveSlots live = cache.live(t);

    // The live slots hold exactly the keys the mask allows, each once.
    std::vector<int64_t> held;
    for (int j = 0; j < live.keys(); ++j) held.push_back(cache.position_in(live.slot(j)));
    std::vector<int64_t> allowed;
    for (int s = 0; s <= t; ++s)
      if (mask.allowed(t, s)) allowed.push_back(s);
    REQUIRE(held == allowed);  // also in position order: oldest first

    cpu::decode_attention_forward(cache.decode_shape(sh.Hq), live, q_BHD.data(), cache.k().data<T>(),
                                  cache.v().data<T>(), out_BHD.data(), lse_BH.data());
    // The cache's own attend() (ops/decode.h) is the same computation.
    const Tensor attended = cache.attend(t, Tensor::from_vector(q_BHD, {sh.B, sh.Hq, D}));
    REQUIRE(attended.to_vector<T>() == out_BHD);
    for (int b = 0; b < sh.B; ++b)
      for (int h = 0; h < sh.Hq; ++h) {
        const T* ref = out_ref.data() + ((size_t(b) * sh.T + t) * sh.Hq + h) * D;
        const T* got = out_BHD.data() + (size_t(b) * sh.Hq + h) * D;
        double num = 0, den = 0;
        for (int d = 0; d < D; ++d) {
          num += double(got[d] - ref[d]) * double(got[d] - ref[d]);
          den += double(ref[d]) * double(ref[d]);
        }
        worst = std::max(worst, std::sqrt(num / den));
        const double lse_ref_v = lse_ref[(size_t(b) * sh.Hq + h) * sh.T + t];
        worst = std::max(worst, std::abs(double(lse_BH[size_t(b) * sh.Hq + h]) - lse_ref_v) / std::abs(lse_ref_v));
      }
  }
  return worst;
}

struct Case {
  std::string name;
  AttnShape shape;
};

// T = 37: several blocks of 8 long, a multiple of no block or window used here.
const std::vector<Case> kShapes = {{"gqa", AttnShape{2, 37, 4, 2, 8}}, {"mha", AttnShape{2, 37, 3, 3, 8}},
                                   {"gqa1", AttnShape{1, 37, 6, 1, 4}}};

template <class T>
std::vector<std::unique_ptr<KvCache>> all_caches(const AttnShape& sh) {
  const DType dt = dtype_of<T>();
  std::vector<std::unique_ptr<KvCache>> c;
  for (int bridge : {1, 3, 8}) c.push_back(std::make_unique<FlashPbbCache>(sh.B, sh.Hkv, sh.D, 8, bridge, dt));
  c.push_back(std::make_unique<FlashPbbCache>(sh.B, sh.Hkv, sh.D, 1, 1, dt));
  for (int window : {1, 5, 8}) {
    c.push_back(std::make_unique<SwaRingCache>(sh.B, sh.Hkv, sh.D, window, dt));
    c.push_back(std::make_unique<LinearSwaCache>(sh.B, sh.Hkv, sh.D, window, dt));
  }
  c.push_back(std::make_unique<FullCache>(sh.B, sh.Hkv, sh.D, sh.T, dt));
  return c;
}

template <class T>
void check_all(double tolerance) {
  uint64_t seed = 500;
  for (const Case& c : kShapes)
    for (auto& cache : all_caches<T>(c.shape)) {
      CAPTURE(c.name);
      CAPTURE(describe(cache->slot_map()));
      const double err = decode_vs_training<T>(*cache, c.shape, seed += 7);
      CHECK(err < tolerance);
    }
}

}  // namespace

TEST_CASE("decode through every KV cache kind matches training attention (fp64)") { check_all<double>(1e-12); }

TEST_CASE("decode through every KV cache kind matches training attention (fp32)") { check_all<float>(2e-5); }

TEST_CASE("Flash-PBB cache allocates b slots and never moves an entry, SWA caches W and 2W") {
  const int B = 2, Hkv = 2, D = 4, block = 8, bridge = 3, window = 8;
  FlashPbbCache pbb(B, Hkv, D, block, bridge);
  SwaRingCache ring(B, Hkv, D, window);
  LinearSwaCache linear(B, Hkv, D, window);
  FullCache full(B, Hkv, D, 64);
  CHECK(pbb.slots() == block);
  CHECK(ring.slots() == window);
  CHECK(linear.slots() == 2 * window);
  CHECK(full.slots() == 64);
  // Storage rows per (sequence, head): the slots, plus 8 for a multiple of 64.
  for (auto [slots, rows] : {std::pair{8, 8}, {16, 16}, {63, 63}, {64, 72}, {512, 520}, {1000, 1000}})
    CHECK(kv_row_stride(slots) == rows);
  CHECK(pbb.allocated_bytes() == 2 * size_t(B) * Hkv * kv_row_stride(block) * D * sizeof(float));
  CHECK(ring.allocated_bytes() == 2 * size_t(B) * Hkv * kv_row_stride(window) * D * sizeof(float));
  CHECK(linear.allocated_bytes() == 2 * size_t(B) * Hkv * kv_row_stride(2 * window) * D * sizeof(float));

  std::vector<float> kv(size_t(B) * Hkv * D);
  for (int t = 0; t < 61; ++t) {
    for (size_t i = 0; i < kv.size(); ++i) kv[i] = float(t * 1000 + int(i));
    const Tensor k = Tensor::from_vector(kv, {B, Hkv, D}), v = k;
    CHECK(pbb.append(t, k, v) == t % block);
    CHECK(ring.append(t, k, v) == t % window);
    linear.append(t, k, v);
    full.append(t, k, v);
    // Every position the PBB cache holds sits in slot (position mod b) with the data written for
    // it: nothing was moved.
    for (int s = 0; s < block; ++s) {
      const int64_t p = pbb.position_in(s);
      const int64_t want = s <= t % block ? t - t % block + s : t - t % block - block + s;
      CHECK(p == (want < 0 ? -1 : want));
      if (p < 0) continue;
      for (int head = 0; head < B * Hkv; ++head)
        CHECK(pbb.k().data<float>()[(size_t(head) * block + s) * D] == float(p * 1000 + head * D));
    }
  }
  CHECK(pbb.rows_moved() == 0);
  CHECK(ring.rows_moved() == 0);
}

TEST_CASE("Flash-PBB slot rule: live slots of every block offset") {
  // SPEC §1: at offset r the live keys are slots [0, r] and [b-(w-1-r), b-1].
  const int b = 16, w = 5;
  for (int64_t t = 0; t < 4 * b; ++t) {
    const LiveSlots live = pbb_live_slots(t, b, w);
    const int r = int(t % b);
    CHECK(live.newer.begin == 0);
    CHECK(live.newer.end == r + 1);
    const int bridge_keys = t >= b ? std::max(0, w - 1 - r) : 0;
    CHECK(live.older.size() == bridge_keys);
    if (bridge_keys > 0) CHECK(live.older.end == b);
    CHECK(live.keys() == r + 1 + bridge_keys);
  }
  CHECK(ring_live_slots(20, 8).keys() == 8);
  CHECK(ring_live_slots(3, 8).keys() == 4);
}

TEST_CASE("linear SWA cache compacts every W + 1 steps once full") {
  const int window = 4;
  LinearSwaCache c(1, 1, 2, window, DType::f64);
  const Tensor k = Tensor::zeros({1, 1, 2}, DType::f64), v = k;
  int compactions = 0;
  int64_t moved = 0;
  for (int t = 0; t < 40; ++t) {
    c.append(t, k, v);
    if (c.rows_moved() != moved) {
      ++compactions;
      CHECK(c.rows_moved() - moved == window - 1);
      moved = c.rows_moved();
    }
  }
  // First compaction at t = 2W, then every W + 1 steps: t = 8, 13, 18, ..., 38.
  CHECK(compactions == (39 - 2 * window) / (window + 1) + 1);
  CHECK(c.slot_map().compaction_period() == window + 1);
}

TEST_CASE("KV caches reject bad arguments") {
  CHECK_THROWS(KvSlotMap::pbb(4, 5));
  CHECK_THROWS(KvSlotMap::swa_ring(0));
  FullCache full(1, 1, 2, 2);
  const Tensor k = Tensor::zeros({1, 1, 2}, DType::f32), v = k;
  full.append(0, k, v);
  CHECK_THROWS(full.append(2, k, v));  // not the next position
  CHECK_THROWS_WITH_AS(full.append(1, Tensor::zeros({1, 2, 2}, DType::f32), v), doctest::Contains("(B, Hkv, D)"),
                       Error);
  CHECK(full.length() == 1);  // a rejected write leaves the cache as it was
  full.append(1, k, v);
  CHECK_THROWS(full.append(2, k, v));  // out of slots
  CHECK_THROWS(full.live(0));          // not the newest position
  std::vector<float> q(2), out(2);
  CHECK_THROWS(cpu::decode_attention_forward(DecodeShape{1, 1, 1, 2, 2}, LiveSlots{{}, {0, 3}}, q.data(),
                                             full.k().data<float>(), full.v().data<float>(), out.data(),
                                             static_cast<float*>(nullptr)));
  CHECK_THROWS_WITH_AS(full.attend(1, Tensor::zeros({1, 1, 3}, DType::f32)), doctest::Contains("decode_attention"),
                       Error);
}

TEST_CASE("KvCache::fill leaves what appending every position leaves, for every kind and prompt length") {
  const int B = 2, Hkv = 2, D = 4;
  const std::vector<KvSlotMap> maps = {KvSlotMap::pbb(5, 2), KvSlotMap::swa_ring(4), KvSlotMap::swa_linear(4),
                                       KvSlotMap::full(40)};
  for (const KvSlotMap& map : maps)
    for (int T : {1, 3, 5, 9, 23}) {  // shorter and longer than every cache's slots
      CAPTURE(describe(map));
      CAPTURE(T);
      const auto k = random_values<double>(size_t(T) * B * Hkv * D, 900 + uint64_t(T));
      const auto v = random_values<double>(size_t(T) * B * Hkv * D, 950 + uint64_t(T));
      const Tensor k_TBHD = Tensor::from_vector(k, {T, B, Hkv, D}), v_TBHD = Tensor::from_vector(v, {T, B, Hkv, D});
      // fill as prefill calls it: strided views, the (B, T, Hkv, D) layout transposed.
      const Tensor k_strided = k_TBHD.transpose(0, 1).contiguous().transpose(0, 1);
      const Tensor v_strided = v_TBHD.transpose(0, 1).contiguous().transpose(0, 1);
      REQUIRE_FALSE(k_strided.is_contiguous());
      KvCache appended(map, B, Hkv, D, DType::f64), filled(map, B, Hkv, D, DType::f64);
      for (int t = 0; t < T; ++t)
        appended.append(t, k_TBHD.slice(0, t, t + 1).view({B, Hkv, D}), v_TBHD.slice(0, t, t + 1).view({B, Hkv, D}));
      filled.fill(k_strided, v_strided);
      CHECK(filled.length() == appended.length());
      for (int s = 0; s < filled.slots(); ++s) CHECK(filled.position_in(s) == appended.position_in(s));
      CHECK(filled.k().to_vector<double>() == appended.k().to_vector<double>());
      CHECK(filled.v().to_vector<double>() == appended.v().to_vector<double>());
      CHECK_THROWS_WITH_AS(filled.fill(k_TBHD, v_TBHD), doctest::Contains("needs an empty cache"), Error);
    }
  // A prompt longer than a full cache is refused before anything is written: the cache stays empty.
  KvCache short_full(KvSlotMap::full(8), B, Hkv, D, DType::f64);
  const Tensor nine = Tensor::zeros({9, B, Hkv, D}, DType::f64);
  CHECK_THROWS_WITH_AS(short_full.fill(nine, nine), doctest::Contains("max_len 8 cannot take position 8"), Error);
  CHECK(short_full.length() == 0);
}

TEST_CASE("target_logprobs: each row's log softmax over the valid ids at its target, in every dtype") {
  // Two rows over 5 ids of which 4 are valid: the padding id 4 holds the largest logit, which the
  // softmax must leave out; the third row has no target.
  const std::vector<double> values = {1, 2, 3, 4, 100,  //
                                      0, 0, 0, 0, 100,  //
                                      7, 7, 7, 7, 7};
  const std::vector<int32_t> targets = {3, 1, -1};
  const double lse0 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0) + std::exp(4.0));
  const std::vector<double> expected = {4 - lse0, -std::log(4.0), 0};
  const Tensor f64 = Tensor::from_vector(values, {3, 5});
  const std::vector<double> got = target_logprobs(f64, targets, 4);
  REQUIRE(got.size() == 3);
  for (size_t i = 0; i < 3; ++i) CHECK(got[i] == doctest::Approx(expected[i]).epsilon(1e-14));
  // f32 and bf16 logits (these values are exact in both) give the same, computed in double.
  for (const DType dtype : {DType::f32, DType::bf16}) {
    const std::vector<double> other = target_logprobs(f64.to(dtype), targets, 4);
    for (size_t i = 0; i < 3; ++i) CHECK(other[i] == doctest::Approx(expected[i]).epsilon(1e-12));
  }
  // A huge logit does not overflow: the sum runs around the row's maximum.
  CHECK(target_logprobs(Tensor::from_vector(std::vector<double>{1000, 0}, {1, 2}), std::vector<int32_t>{0}, 2)[0] ==
        doctest::Approx(-std::log1p(std::exp(-1000.0))));
  CHECK_THROWS_WITH_AS(target_logprobs(f64, std::vector<int32_t>{3, 4, 0}, 4),
                       doctest::Contains("target_logprobs: target 4 outside [0, 4)"), Error);
  CHECK_THROWS_WITH_AS(target_logprobs(f64, std::vector<int32_t>{3, 1}, 4),
                       doctest::Contains("with 2 targets and 4 valid ids"), Error);
}

