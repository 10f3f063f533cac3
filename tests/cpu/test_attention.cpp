// Attention masks and the CPU attention reference: masks vs the SPEC §1 rule by brute force,
// forward vs a dense masked softmax, backward vs fp64 central finite differences.
// Shape legend: B batch, T sequence, H heads, D head dim (tensors (B, T, H, D), lse (B, H, T)).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/rng.h"
#include "ops/cpu/attention.h"
#include "attn/mask.h"

using namespace hylo;

namespace {

AttnMask make_full() { return AttnMask{MaskKind::full, 0, 0, 0}; }
AttnMask make_swa(int w) { return AttnMask{MaskKind::swa, w, 0, 0}; }
AttnMask make_pbb(int b, int w) { return AttnMask{MaskKind::pbb, 0, b, w}; }

// SPEC §1 written out independently of ops/mask.h.
bool spec_allowed(const AttnMask& m, int t, int s) {
  if (s > t) return false;
  if (m.kind == MaskKind::full) return true;
  if (m.kind == MaskKind::swa) return t - s < m.window;
  return s / m.block == t / m.block || t - s < m.bridge;
}

std::string name(const AttnMask& m) {
  if (m.kind == MaskKind::full) return "full";
  if (m.kind == MaskKind::swa) return "swa(" + std::to_string(m.window) + ")";
  return "pbb(" + std::to_string(m.block) + "," + std::to_string(m.bridge) + ")";
}

// T = 37 is prime: no block or tile size divides it.
const std::vector<AttnMask> kMasks = {make_full(),     make_swa(1),     make_swa(5),      make_swa(64),
                                      make_pbb(8, 1),  make_pbb(8, 8),  make_pbb(10, 3),  make_pbb(1, 1),
                                      make_pbb(64, 5)};

std::vector<double> randn(size_t n, uint64_t seed) {
  Rng rng{seed, 1, 0};
  std::vector<double> v(n);
  for (auto& x : v) x = rng.normal();
  return v;
}

// Dense reference: every (t, s) pair scored, disallowed ones set to -inf, plain softmax.
void dense_forward(const AttnShape& sh, const AttnMask& m, const std::vector<double>& q,
                   const std::vector<double>& k, const std::vector<double>& v, std::vector<double>& out,
                   std::vector<double>& lse) {
  const int D = sh.D, group = sh.Hq / sh.Hkv;
  out.assign(size_t(sh.B) * sh.T * sh.Hq * D, 0.0);
  lse.assign(size_t(sh.B) * sh.Hq * sh.T, 0.0);
  std::vector<double> sc(sh.T);
  for (int b = 0; b < sh.B; ++b)
    for (int h = 0; h < sh.Hq; ++h)
      for (int t = 0; t < sh.T; ++t) {
        double mx = -INFINITY;
        for (int s = 0; s < sh.T; ++s) {
          double dot = 0;
          for (int d = 0; d < D; ++d)
            dot += q[((size_t(b) * sh.T + t) * sh.Hq + h) * D + d] *
                   k[((size_t(b) * sh.T + s) * sh.Hkv + h / group) * D + d];
          sc[s] = m.allowed(t, s) ? dot / std::sqrt(double(D)) : -INFINITY;
          mx = std::max(mx, sc[s]);
        }
        double sum = 0;
        for (int s = 0; s < sh.T; ++s) sum += (sc[s] = std::exp(sc[s] - mx));
        for (int s = 0; s < sh.T; ++s)
          for (int d = 0; d < D; ++d)
            out[((size_t(b) * sh.T + t) * sh.Hq + h) * D + d] +=
                sc[s] / sum * v[((size_t(b) * sh.T + s) * sh.Hkv + h / group) * D + d];
        lse[(size_t(b) * sh.Hq + h) * sh.T + t] = mx + std::log(sum);
      }
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(a[i] - b[i]);
    if (!std::isfinite(d)) return INFINITY;  // max() would skip a NaN
    m = std::max(m, d);
  }
  return m;
}

double rel_err(const std::vector<double>& a, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  // A window of one key makes dq and dk exactly zero: then the absolute error is what counts.
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

const std::vector<AttnShape> kShapes = {AttnShape{2, 37, 2, 2, 5}, AttnShape{1, 37, 4, 2, 3}};

}  // namespace

TEST_CASE("attention masks follow the SPEC rule, lowest_key and highest query bound the allowed range") {
  std::vector<AttnMask> masks = kMasks;
  masks.push_back(make_pbb(7, 4));
  masks.push_back(make_swa(3));
  const int T = 80;
  for (const auto& m : masks) {
    CAPTURE(name(m));
    const MaskBounds bounds(m);
    for (int t = 0; t < T; ++t) {
      int lowest = -1;
      for (int s = 0; s < T; ++s) {
        REQUIRE(m.allowed(t, s) == spec_allowed(m, t, s));
        if (lowest < 0 && spec_allowed(m, t, s)) lowest = s;
      }
      // The allowed keys of t are exactly [lowest_key(t), t].
      REQUIRE(bounds.lowest_key(t) == lowest);
      for (int s = lowest; s <= t; ++s) REQUIRE(spec_allowed(m, t, s));
      if (t > 0) REQUIRE(bounds.lowest_key(t) >= bounds.lowest_key(t - 1));  // tile ranges rely on this
    }
    // highest_query(s) is the last query that still sees key s, and all queries between see it.
    for (int s = 0; s < T; ++s) {
      const int64_t hi = bounds.highest_query(s);
      for (int t = s; t < 3 * T; ++t) REQUIRE(spec_allowed(m, t, s) == (t <= hi));
    }
  }
}

TEST_CASE("visited_pairs counts the pairs the SPEC rule allows") {
  std::vector<AttnMask> masks = kMasks;
  masks.push_back(make_pbb(7, 4));
  masks.push_back(make_swa(3));
  for (const auto& m : masks)
    for (const int T : {0, 1, 37, 80}) {
      CAPTURE(name(m));
      CAPTURE(T);
      int64_t allowed = 0;
      for (int t = 0; t < T; ++t)
        for (int s = 0; s <= t; ++s) allowed += spec_allowed(m, t, s);
      REQUIRE(visited_pairs(m, T) == allowed);
    }
}

TEST_CASE("FastDiv divides like the division operator up to 2^31 - 1") {
  std::vector<int> divisors = {1, 2, 3, 5, 7, 63, 64, 65, 100, 127, 128, 129, 511, 512, 513, 1000, 4096};
  for (int s = 13; s <= 30; ++s)
    for (int e : {-1, 0, 1}) divisors.push_back((1 << s) + e);
  divisors.push_back(INT32_MAX);
  Rng rng{7, 1, 0};
  for (const int d : divisors) {
    CAPTURE(d);
    const FastDiv div(d);
    std::vector<int> ns = {0, 1, d - 1, d, INT32_MAX, INT32_MAX - 1, INT32_MAX - d + 1};
    for (int64_t q : {int64_t(1), int64_t(2), int64_t(1000), int64_t(INT32_MAX) / d})  // both sides of multiples
      for (int64_t off : {-1, 0, 1})
        if (const int64_t n = q * d + off; n >= 0 && n <= INT32_MAX) ns.push_back(int(n));
    for (int i = 0; i < 2000; ++i) ns.push_back(int(rng.next_u64() >> 33));  // uniform in [0, 2^31)
    for (const int n : ns) REQUIRE(div(n) == n / d);
  }
}

TEST_CASE("MaskBounds bounds the SPEC rule's allowed range at positions up to 2^31 - 1") {
  const std::vector<AttnMask> masks = {make_pbb(512, 128), make_pbb(1000, 7),  make_pbb(1, 1),
                                       make_pbb((1 << 30) + 3, 5), make_swa(512), make_swa(INT32_MAX),
                                       make_full()};
  Rng rng{8, 1, 0};
  for (const auto& m : masks) {
    CAPTURE(name(m));
    const MaskBounds bounds(m);
    for (int i = 0; i < 5000; ++i) {
      const int t = i < 3 ? INT32_MAX - i : int(rng.next_u64() >> 33);
      // the lowest key t sees is allowed, the one before is not (the range between was checked
      // to be contiguous above, at small positions)
      const int lo = bounds.lowest_key(t);
      REQUIRE(m.allowed(t, lo));
      if (lo > 0) REQUIRE_FALSE(m.allowed(t, lo - 1));
      if (m.kind == MaskKind::full) continue;  // every later query sees every key
      // the last query seeing key t sees it, the one after does not
      const int64_t hi = bounds.highest_query(t);
      REQUIRE(m.allowed(hi, t));
      REQUIRE_FALSE(m.allowed(hi + 1, t));
    }
  }
}

TEST_CASE("cpu attention forward matches a dense masked softmax") {
  uint64_t seed = 100;
  for (const auto& sh : kShapes)
    for (const auto& m : kMasks) {
      CAPTURE(name(m));
      CAPTURE(sh.Hq);
      const size_t nq = size_t(sh.B) * sh.T * sh.Hq * sh.D, nkv = size_t(sh.B) * sh.T * sh.Hkv * sh.D;
      auto q = randn(nq, ++seed), k = randn(nkv, ++seed), v = randn(nkv, ++seed);
      std::vector<double> out_ref, lse_ref;
      dense_forward(sh, m, q, k, v, out_ref, lse_ref);
      std::vector<double> out(nq, NAN), lse(lse_ref.size(), NAN);
      cpu::attention_forward(sh, m, q.data(), k.data(), v.data(), out.data(), lse.data());
      CHECK(max_abs_diff(out, out_ref) < 1e-12);
      CHECK(max_abs_diff(lse, lse_ref) < 1e-12);

      // The float instantiation computes the same function.
      std::vector<float> qf(q.begin(), q.end()), kf(k.begin(), k.end()), vf(v.begin(), v.end());
      std::vector<float> outf(nq, NAN), lsef(lse.size(), NAN);
      cpu::attention_forward(sh, m, qf.data(), kf.data(), vf.data(), outf.data(), lsef.data());
      CHECK(rel_err(std::vector<double>(outf.begin(), outf.end()), out_ref) < 1e-5);
      CHECK(rel_err(std::vector<double>(lsef.begin(), lsef.end()), lse_ref) < 1e-5);
    }
}

TEST_CASE("cpu attention backward matches fp64 finite differences of sum(out * G)") {
  uint64_t seed = 500;
  for (const auto& sh : kShapes)
    for (const auto& m : kMasks) {
      CAPTURE(name(m));
      CAPTURE(sh.Hq);
      const size_t nq = size_t(sh.B) * sh.T * sh.Hq * sh.D, nkv = size_t(sh.B) * sh.T * sh.Hkv * sh.D;
      auto q = randn(nq, ++seed), k = randn(nkv, ++seed), v = randn(nkv, ++seed), g = randn(nq, ++seed);
      std::vector<double> out(nq), lse(size_t(sh.B) * sh.Hq * sh.T);
      cpu::attention_forward(sh, m, q.data(), k.data(), v.data(), out.data(), lse.data());
      // Garbage in the gradients: backward must overwrite, not accumulate.
      std::vector<double> dq(nq, NAN), dk(nkv, 1e30), dv(nkv, -7.0);
      cpu::attention_backward(sh, m, q.data(), k.data(), v.data(), out.data(), lse.data(), g.data(), dq.data(),
                              dk.data(), dv.data());

      std::vector<double> o(nq), l(lse.size());
      auto loss = [&] {
        cpu::attention_forward(sh, m, q.data(), k.data(), v.data(), o.data(), l.data());
        double acc = 0;
        for (size_t i = 0; i < nq; ++i) acc += o[i] * g[i];
        return acc;
      };
      auto numeric = [&](std::vector<double>& x) {
        const double eps = 1e-5;
        std::vector<double> grad(x.size());
        for (size_t i = 0; i < x.size(); ++i) {
          const double keep = x[i];
          x[i] = keep + eps;
          const double up = loss();
          x[i] = keep - eps;
          const double down = loss();
          x[i] = keep;
          grad[i] = (up - down) / (2 * eps);
        }
        return grad;
      };
      CHECK(rel_err(dq, numeric(q)) < 1e-7);
      CHECK(rel_err(dk, numeric(k)) < 1e-7);
      CHECK(rel_err(dv, numeric(v)) < 1e-7);

      // float backward agrees with the fp64 one (what CPU training runs).
      auto to_f = [](const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); };
      auto qf = to_f(q), kf = to_f(k), vf = to_f(v), gf = to_f(g), of = to_f(out), lf = to_f(lse);
      std::vector<float> dqf(nq), dkf(nkv), dvf(nkv);
      cpu::attention_backward(sh, m, qf.data(), kf.data(), vf.data(), of.data(), lf.data(), gf.data(), dqf.data(),
                              dkf.data(), dvf.data());
      auto to_d = [](const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); };
      CHECK(rel_err(to_d(dqf), dq) < 1e-5);
      CHECK(rel_err(to_d(dkf), dk) < 1e-5);
      CHECK(rel_err(to_d(dvf), dv) < 1e-5);
    }
}

TEST_CASE("cpu attention rejects impossible shapes and masks") {
  std::vector<float> x(64);
  auto fwd = [&](AttnShape sh, AttnMask m) {
    cpu::attention_forward(sh, m, x.data(), x.data(), x.data(), x.data(), x.data());
  };
  CHECK_THROWS(fwd(AttnShape{1, 2, 3, 2, 4}, make_full()));   // Hq % Hkv
  CHECK_THROWS(fwd(AttnShape{1, 2, 2, 2, 4}, make_pbb(4, 5)));  // bridge > block
  CHECK_THROWS(fwd(AttnShape{1, 2, 2, 2, 4}, make_swa(0)));
  CHECK_THROWS(fwd(AttnShape{1, 0, 2, 2, 4}, make_full()));
}
