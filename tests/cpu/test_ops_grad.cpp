// Gradient checks for every non-attention CPU op (src/ops/cpu): each backward is compared with
// central finite differences of the forward in double, with loss = Σ out · G for a random G. Odd
// shapes (7, 13, 5, 11) so that no loop bound hides behind a power of two. Also checks the
// contract each header states: which gradients are overwritten and which accumulated.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "ops/cpu/adamw.h"
#include "ops/cpu/cross_entropy.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/embedding.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/rmsnorm.h"
#include "ops/cpu/rope.h"
#include "ops/cpu/swiglu.h"

namespace {

using Vec = std::vector<double>;
namespace cpu = hylo::cpu;

Vec randn(size_t n, uint64_t seed, double scale = 1.0) {
  hylo::Rng rng{seed, 7, 0};
  Vec v(n);
  for (auto& x : v) x = rng.normal() * scale;
  return v;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

double norm(const Vec& a) { return std::sqrt(dot(a, a)); }

double rel_error(const Vec& a, const Vec& ref) {
  REQUIRE(a.size() == ref.size());
  double num = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
  }
  return std::sqrt(num) / std::max(norm(ref), 1e-300);
}

// d loss / d x by central differences; `loss` reads x through the reference it captured.
Vec numeric_grad(Vec& x, const std::function<double()>& loss, double h = 1e-6) {
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    double saved = x[i];
    x[i] = saved + h;
    double up = loss();
    x[i] = saved - h;
    double down = loss();
    x[i] = saved;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

// The assertion every gradient test goes through: analytic close to numeric, and numeric not
// trivially zero (a vanishing reference would make any analytic gradient "pass").
void check_grad(const char* what, const Vec& analytic, const Vec& numeric, double bound = 1e-7) {
  INFO(what);
  CHECK(norm(numeric) > 1e-3);
  double err = rel_error(analytic, numeric);
  INFO("relative error " << err << " bound " << bound);
  CHECK(err < bound);
}

}  // namespace

TEST_CASE("gradcheck: the checker rejects a wrong gradient") {
  // f(x) = Σ x_i³ has gradient 3x²; a gradient off by one term in 13 must exceed the bound.
  Vec x = randn(13, 1);
  auto loss = [&] {
    double s = 0;
    for (double v : x) s += v * v * v;
    return s;
  };
  Vec exact(13), wrong(13);
  for (int i = 0; i < 13; ++i) exact[i] = wrong[i] = 3 * x[i] * x[i];
  wrong[5] *= 1.01;
  Vec numeric = numeric_grad(x, loss);
  CHECK(rel_error(exact, numeric) < 1e-7);
  CHECK(rel_error(wrong, numeric) > 1e-5);
}

TEST_CASE("gemm: forward matches a naive product for every transposition, alpha and beta") {
  const int M = 7, N = 5, K = 13;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      CAPTURE(ta);
      CAPTURE(tb);
      Vec A = randn(M * K, 10), B = randn(K * N, 11), C0 = randn(M * N, 12), C = C0;
      double alpha = 0.75, beta = -0.5;
      cpu::gemm<double>(ta, tb, M, N, K, alpha, A.data(), B.data(), beta, C.data());
      Vec ref(M * N);
      for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
          double s = 0;
          for (int k = 0; k < K; ++k) s += (ta ? A[k * M + i] : A[i * K + k]) * (tb ? B[j * K + k] : B[k * N + j]);
          ref[i * N + j] = alpha * s + beta * C0[i * N + j];
        }
      CHECK(rel_error(C, ref) < 1e-14);
      // beta = 0 must ignore (not multiply) whatever C held, NaN included.
      Vec D(M * N, std::numeric_limits<double>::quiet_NaN());
      cpu::gemm<double>(ta, tb, M, N, K, 1.0, A.data(), B.data(), 0.0, D.data());
      for (double v : D) CHECK(std::isfinite(v));
    }
}

TEST_CASE("gemm: the backward products (dA, dB via gemm) match finite differences") {
  const int M = 7, N = 5, K = 3;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      CAPTURE(ta);
      CAPTURE(tb);
      Vec A = randn(M * K, 20), B = randn(K * N, 21), C0 = randn(M * N, 22), G = randn(M * N, 23);
      double alpha = 1.5, beta = 0.25;
      auto loss = [&] {
        Vec C = C0;
        cpu::gemm<double>(ta, tb, M, N, K, alpha, A.data(), B.data(), beta, C.data());
        return dot(C, G);
      };
      // dop(A) = alpha G op(B)^T, dop(B) = alpha op(A)^T G, stored back in A's / B's layout.
      Vec dA(M * K), dB(K * N);
      if (!ta) cpu::gemm<double>(false, !tb, M, K, N, alpha, G.data(), B.data(), 0.0, dA.data());
      else cpu::gemm<double>(tb, true, K, M, N, alpha, B.data(), G.data(), 0.0, dA.data());
      if (!tb) cpu::gemm<double>(!ta, false, K, N, M, alpha, A.data(), G.data(), 0.0, dB.data());
      else cpu::gemm<double>(true, ta, N, K, M, alpha, G.data(), A.data(), 0.0, dB.data());
      check_grad("dA", dA, numeric_grad(A, loss));
      check_grad("dB", dB, numeric_grad(B, loss));
    }
}

TEST_CASE("embedding: forward gathers, backward accumulates per id and matches finite differences") {
  const int N = 7, V = 11, D = 13;
  std::vector<int32_t> ids = {3, 0, 10, 3, 7, 3, 0};  // repeats: their gradients must add up
  Vec table = randn(V * D, 30), G = randn(N * D, 31);
  Vec out(N * D);
  cpu::embedding_forward<double>(N, V, D, ids.data(), table.data(), out.data());
  for (int n = 0; n < N; ++n)
    for (int d = 0; d < D; ++d) CHECK(out[n * D + d] == table[ids[n] * D + d]);

  auto loss = [&] {
    cpu::embedding_forward<double>(N, V, D, ids.data(), table.data(), out.data());
    return dot(out, G);
  };
  Vec prior = randn(V * D, 32), dtable = prior;
  cpu::embedding_backward<double>(N, V, D, ids.data(), G.data(), dtable.data());
  Vec grad(V * D);
  for (size_t i = 0; i < grad.size(); ++i) grad[i] = dtable[i] - prior[i];  // accumulated on top of prior
  check_grad("dtable", grad, numeric_grad(table, loss));
  for (int d = 0; d < D; ++d) CHECK(dtable[1 * D + d] == prior[1 * D + d]);  // id 1 unused: untouched

  std::vector<int32_t> bad = {0, 11};
  CHECK_THROWS_AS(cpu::embedding_forward<double>(2, V, D, bad.data(), table.data(), out.data()), hylo::Error);
}

TEST_CASE("rmsnorm: backward matches finite differences, dx overwritten, dw accumulated") {
  const int N = 7, D = 13;
  const double eps = 1e-5;
  Vec x = randn(N * D, 40), w = randn(D, 41), G = randn(N * D, 42), y(N * D), rstd(N);
  for (auto* weight : {&w, static_cast<Vec*>(nullptr)}) {
    CAPTURE(weight != nullptr);
    const double* wp = weight ? weight->data() : nullptr;
    auto loss = [&] {
      cpu::rmsnorm_forward<double>(N, D, eps, x.data(), wp, y.data(), rstd.data());
      return dot(y, G);
    };
    loss();
    for (int n = 0; n < N; ++n) {
      double ss = 0;
      for (int d = 0; d < D; ++d) ss += x[n * D + d] * x[n * D + d];
      CHECK(rstd[n] == doctest::Approx(1 / std::sqrt(ss / D + eps)).epsilon(1e-14));
    }
    Vec dx(N * D, std::numeric_limits<double>::quiet_NaN());  // must be overwritten
    Vec prior = randn(D, 43), dw = prior;
    cpu::rmsnorm_backward<double>(N, D, x.data(), wp, rstd.data(), G.data(), dx.data(), false,
                                  weight ? dw.data() : nullptr);
    const Vec numeric_dx = numeric_grad(x, loss);
    check_grad("dx", dx, numeric_dx);
    // accumulate_dx adds into an existing gradient (the residual stream's).
    Vec prior_dx = randn(N * D, 44), sum_dx = prior_dx;
    cpu::rmsnorm_backward<double>(N, D, x.data(), wp, rstd.data(), G.data(), sum_dx.data(), true, nullptr);
    for (int i = 0; i < N * D; ++i) sum_dx[i] -= prior_dx[i];
    check_grad("dx (accumulated)", sum_dx, numeric_dx);
    if (weight) {
      Vec grad(D);
      for (int d = 0; d < D; ++d) grad[d] = dw[d] - prior[d];
      check_grad("dw (accumulated)", grad, numeric_grad(w, loss));
    }
  }
}

TEST_CASE("rope: half-split rotation, position offset, in place, and backward by finite differences") {
  const int B = 2, T = 5, H = 3, D = 6, P = 9, offset = 2;
  const double theta = 10000.0;
  std::vector<float> cos_t(P * D / 2), sin_t(P * D / 2);
  cpu::rope_tables(P, D, theta, cos_t.data(), sin_t.data());
  Vec x = randn(B * T * H * D, 50), y(x.size()), G = randn(x.size(), 51);
  cpu::rope_forward<double>(B, T, H, D, offset, P, cos_t.data(), sin_t.data(), x.data(), y.data());
  // Direct formula for one element pair: b=1, t=4, h=2, i=1 (pairs with i + D/2 = 4).
  {
    int b = 1, t = 4, h = 2, i = 1;
    size_t base = ((size_t(b) * T + t) * H + h) * D;
    double angle = (t + offset) * std::pow(theta, -2.0 * i / D);
    double c = float(std::cos(angle)), s = float(std::sin(angle));
    CHECK(y[base + i] == doctest::Approx(x[base + i] * c - x[base + i + D / 2] * s).epsilon(1e-12));
    CHECK(y[base + i + D / 2] == doctest::Approx(x[base + i] * s + x[base + i + D / 2] * c).epsilon(1e-12));
  }
  // Position 0 is the identity (cos 1, sin 0 exactly).
  Vec y0(x.size());
  cpu::rope_forward<double>(B, 1, H, D, 0, P, cos_t.data(), sin_t.data(), x.data(), y0.data());
  for (int k = 0; k < H * D; ++k) CHECK(y0[k] == doctest::Approx(x[k]).epsilon(1e-12));
  // In place equals out of place.
  Vec z = x;
  cpu::rope_forward<double>(B, T, H, D, offset, P, cos_t.data(), sin_t.data(), z.data(), z.data());
  CHECK(rel_error(z, y) == 0.0);
  // Backward undoes forward (orthogonal map) and matches finite differences.
  Vec back(x.size());
  cpu::rope_backward<double>(B, T, H, D, offset, P, cos_t.data(), sin_t.data(), y.data(), back.data());
  CHECK(rel_error(back, x) < 1e-6);  // tables are fp32: cos² + sin² = 1 only to ~1e-7
  auto loss = [&] {
    cpu::rope_forward<double>(B, T, H, D, offset, P, cos_t.data(), sin_t.data(), x.data(), y.data());
    return dot(y, G);
  };
  Vec dx(x.size());
  cpu::rope_backward<double>(B, T, H, D, offset, P, cos_t.data(), sin_t.data(), G.data(), dx.data());
  check_grad("dx", dx, numeric_grad(x, loss));
  CHECK_THROWS_AS(cpu::rope_forward<double>(B, T, H, D, P - T + 1, P, cos_t.data(), sin_t.data(), x.data(), y.data()),
                  hylo::Error);
}

TEST_CASE("swiglu: forward formula and backward by finite differences") {
  const int N = 7, F = 5;
  Vec ab = randn(N * 2 * F, 60), G = randn(N * F, 61), out(N * F);
  cpu::swiglu_forward<double>(N, F, ab.data(), out.data());
  double a = ab[2 * 2 * F + 3], b = ab[2 * 2 * F + F + 3];  // row 2, unit 3
  CHECK(out[2 * F + 3] == doctest::Approx(a / (1 + std::exp(-a)) * b).epsilon(1e-14));
  auto loss = [&] {
    cpu::swiglu_forward<double>(N, F, ab.data(), out.data());
    return dot(out, G);
  };
  Vec dab(ab.size(), std::numeric_limits<double>::quiet_NaN());
  cpu::swiglu_backward<double>(N, F, ab.data(), G.data(), dab.data());
  check_grad("dab", dab, numeric_grad(ab, loss));
  Vec in_place = ab;  // dab aliasing ab gives the same result
  cpu::swiglu_backward<double>(N, F, in_place.data(), G.data(), in_place.data());
  CHECK(rel_error(in_place, dab) == 0.0);
}

TEST_CASE("cross_entropy: padded vocabulary and ignored rows, with and without z-loss, backward by finite differences") {
  const int N = 7, V = 11, V_valid = 9;
  std::vector<int32_t> targets = {0, 8, -1, 4, 4, -1, 2};
  Vec logits = randn(N * V, 70, 2.0);
  for (int n = 0; n < N; ++n)
    for (int v = V_valid; v < V; ++v) logits[n * V + v] = 50.0;  // would dominate if not excluded
  Vec loss_n(N), lse(N);
  cpu::cross_entropy_forward<double>(N, V, V_valid, logits.data(), targets.data(), loss_n.data(), lse.data());
  for (int n = 0; n < N; ++n) {
    double s = 0;
    for (int v = 0; v < V_valid; ++v) s += std::exp(logits[n * V + v]);
    CHECK(lse[n] == doctest::Approx(std::log(s)).epsilon(1e-13));
    double expected = targets[n] < 0 ? 0.0 : std::log(s) - logits[n * V + targets[n]];
    CHECK(loss_n[n] == doctest::Approx(expected).epsilon(1e-13));
  }
  const double scale = 1.0 / 5;  // mean over the 5 non-ignored rows
  for (double z_loss : {0.0, 0.2}) {
    CAPTURE(z_loss);
    auto loss = [&] {  // the mean of cross-entropy + z_loss * lse^2 over the counted rows
      cpu::cross_entropy_forward<double>(N, V, V_valid, logits.data(), targets.data(), loss_n.data(), lse.data());
      double s = 0;
      for (int n = 0; n < N; ++n)
        if (targets[n] >= 0) s += loss_n[n] + z_loss * lse[n] * lse[n];
      return s * scale;
    };
    loss();
    Vec grad = logits;
    cpu::cross_entropy_backward<double>(N, V, V_valid, targets.data(), lse.data(), scale, z_loss, grad.data());
    check_grad("dlogits", grad, numeric_grad(logits, loss));
    for (int n = 0; n < N; ++n)
      for (int v = 0; v < V; ++v)
        if (targets[n] < 0 || v >= V_valid) CHECK(grad[n * V + v] == 0.0);
  }
  std::vector<int32_t> bad = {0, 9, 0, 0, 0, 0, 0};  // 9 is padding, not a token
  CHECK_THROWS_AS(cpu::cross_entropy_forward<double>(N, V, V_valid, logits.data(), bad.data(), loss_n.data(), lse.data()),
                  hylo::Error);
}

TEST_CASE("elementwise: global_norm over several buffers, one of them empty") {
  Vec x1 = randn(7, 84), x2 = randn(1, 85), x3 = randn(13, 86);
  const double* bufs[] = {x1.data(), x2.data(), nullptr, x3.data()};
  int64_t sizes[] = {7, 1, 0, 13};
  double ss = dot(x1, x1) + dot(x2, x2) + dot(x3, x3);
  CHECK(cpu::global_norm<double>(4, bufs, sizes) == doctest::Approx(std::sqrt(ss)).epsilon(1e-14));
}

TEST_CASE("adamw: two steps match a hand-computed scalar update") {
  // Constants exact in binary, so the expected values below are exact expressions, not re-runs of
  // the implementation: lr 1/8, beta1 7/8, beta2 15/16, eps 2^-20, weight decay 1/2, clip scale 2.
  const float lr = 0.125f, b1 = 0.875f, b2 = 0.9375f, eps = 0x1p-20f, wd = 0.5f, clip = 2.0f;
  double p = 1.0, m = 0.0, v = 0.0, g = 0.5;
  cpu::adamw_step<double>(1, &p, &m, &v, &g, lr, b1, b2, eps, wd, 1, clip);
  // g' = 1; m = 1/8; v = 1/16; bc1 = 1/8, bc2 = 1/16: step_size = 1, denom = (1/4)*4 + eps
  CHECK(m == 0.125);
  CHECK(v == 0.0625);
  double p1 = 1.0 * (1 - 0.0625) - 1.0 * 0.125 / (1.0 + 0x1p-20);
  CHECK(p == doctest::Approx(p1).epsilon(1e-15));

  g = -0.25;  // g' = -1/2
  cpu::adamw_step<double>(1, &p, &m, &v, &g, lr, b1, b2, eps, wd, 2, clip);
  CHECK(m == 0.046875);     // 7/8 * 1/8 - 1/8 * 1/2
  CHECK(v == 0.07421875);   // 15/16 * 1/16 + 1/16 * 1/4
  double bc1 = 1 - 0.875 * 0.875, bc2 = 1 - 0.9375 * 0.9375;
  double p2 = p1 * 0.9375 - (0.125 / bc1) * 0.046875 / (std::sqrt(0.07421875) / std::sqrt(bc2) + 0x1p-20);
  CHECK(p == doctest::Approx(p2).epsilon(1e-14));

  // The float instantiation agrees, and step 0 is refused.
  float pf = 1.0f, mf = 0.0f, vf = 0.0f, gf = 0.5f;
  cpu::adamw_step<float>(1, &pf, &mf, &vf, &gf, lr, b1, b2, eps, wd, 1, clip);
  CHECK(pf == doctest::Approx(p1).epsilon(1e-6));
  CHECK_THROWS_AS(cpu::adamw_step<float>(1, &pf, &mf, &vf, &gf, lr, b1, b2, eps, wd, 0, clip), hylo::Error);
}

TEST_CASE("float instantiations agree with double (rmsnorm, swiglu, cross_entropy, gemm)") {
  const int N = 7, D = 13, V = 11;
  Vec xd = randn(N * D, 90), wd = randn(D, 91);
  std::vector<float> xf(xd.begin(), xd.end()), wf(wd.begin(), wd.end()), yf(N * D), rf(N);
  Vec yd(N * D), rd(N);
  cpu::rmsnorm_forward<double>(N, D, 1e-5, xd.data(), wd.data(), yd.data(), rd.data());
  cpu::rmsnorm_forward<float>(N, D, 1e-5f, xf.data(), wf.data(), yf.data(), rf.data());
  CHECK(rel_error(Vec(yf.begin(), yf.end()), yd) < 1e-6);

  std::vector<float> of(N * 6);
  Vec od(N * 6);
  cpu::swiglu_forward<double>(N, 6, xd.data(), od.data());
  cpu::swiglu_forward<float>(N, 6, xf.data(), of.data());
  CHECK(rel_error(Vec(of.begin(), of.end()), od) < 1e-6);

  std::vector<int32_t> t = {1, 2, 3, -1, 5, 6, 10};
  Vec ld(N), lsed(N);
  std::vector<float> lf(N), lsef(N), zf(xf.begin(), xf.begin() + N * V);
  cpu::cross_entropy_forward<double>(N, V, V, xd.data(), t.data(), ld.data(), lsed.data());
  cpu::cross_entropy_forward<float>(N, V, V, zf.data(), t.data(), lf.data(), lsef.data());
  CHECK(rel_error(Vec(lf.begin(), lf.end()), ld) < 1e-6);

  std::vector<float> cf(N * N);
  Vec cd(N * N);
  cpu::gemm<double>(false, true, N, N, D, 1.0, xd.data(), xd.data(), 0.0, cd.data());
  cpu::gemm<float>(false, true, N, N, D, 1.0f, xf.data(), xf.data(), 0.0f, cf.data());
  CHECK(rel_error(Vec(cf.begin(), cf.end()), cd) < 1e-6);
}
