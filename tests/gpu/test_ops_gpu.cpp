// CUDA kernels (kernels/{gemm,embedding,rmsnorm,rope,swiglu,cross_entropy,elementwise,adamw}) vs
// the CPU float reference (src/ops/cpu) on the same bf16-rounded random inputs: ONE table of
// cases, each with a CPU run, a GPU run and a relative-error bound per output (ggml
// test-backend-ops style). GPU outputs are poisoned (NaN) before every launch so that an
// unwritten element fails. Bounds: bf16 outputs 1e-2, fp32 statistics 1e-5 (ops that only move
// or round values: exact). Legend as in the op headers (N rows, D/F/V widths, R x C matrices).
#include <cuda_runtime.h>  // before gpu_test_util.h: its typed cudaMalloc(T**) overload
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/adamw/adamw.h"
#include "kernels/cross_entropy/cross_entropy.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/embedding/embedding.h"
#include "kernels/gemm/gemm.h"
#include "kernels/rmsnorm/rmsnorm.h"
#include "kernels/rope/rope.h"
#include "kernels/swiglu/swiglu.h"
#include "ops/cpu/adamw.h"
#include "ops/cpu/cross_entropy.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/embedding.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/rmsnorm.h"
#include "ops/cpu/rope.h"
#include "ops/cpu/swiglu.h"

using namespace hylo;
using namespace hylo::test;

namespace {

using Outputs = std::vector<std::vector<float>>;

struct Check {
  std::string output;
  double bound;
};

struct OpCase {
  std::string name;
  std::vector<Check> checks;      // one per output, same order as the runs return them
  std::function<Outputs()> cpu;   // float reference
  std::function<Outputs()> gpu;   // poisons, launches, downloads
  bool big = false;               // skipped when HYLO_GPU_TEST_SMALL is set (compute-sanitizer runs)
};

constexpr double kBf16 = 1e-2, kF32 = 1e-5, kExact = 0.0;

cudaStream_t test_stream() {
  static cudaStream_t s = [] {
    cudaStream_t created;
    CUDA_OK(cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking));
    return created;
  }();
  return s;
}

// A bf16 input: the device copy and the float copy of exactly the same values.
struct Input {
  std::vector<bf16> b;
  std::vector<float> f;
};
Input input(size_t n, uint64_t seed, float scale = 1.f) {
  Input in{to_bf16(random_floats(n, seed, scale)), {}};
  in.f = to_float(in.b);
  return in;
}

std::vector<float> dl(const DeviceBuffer<bf16>& d) { return to_float(d.download()); }
std::vector<float> dl(const DeviceBuffer<float>& d) { return d.download(); }
std::vector<float> bf16_round(std::vector<float> v) { return to_float(to_bf16(v)); }

std::vector<int32_t> random_ids(int n, int V, uint64_t seed, double hot_fraction = 0.0, double ignore_fraction = 0.0) {
  Rng rng{seed, 3, 0};
  std::vector<int32_t> ids(n);
  for (auto& id : ids) {
    double u = rng.uniform();
    id = u < ignore_fraction ? -1 : u < ignore_fraction + hot_fraction ? V / 2 : int32_t(rng.below(V));
  }
  return ids;
}

// ---- gemm: C = alpha op(A) op(B) + beta C; `rows` limits the CPU reference to some rows of C ----
template <class CT>
OpCase gemm_case(bool ta, bool tb, int M, int N, int K, float alpha, float beta, int rows = -1) {
  auto A = std::make_shared<Input>(input(size_t(M) * K, 100 + M));
  auto B = std::make_shared<Input>(input(size_t(K) * N, 200 + N));
  auto C0 = std::make_shared<Input>(input(size_t(M) * N, 300 + K));
  constexpr bool f32 = std::is_same_v<CT, float>;
  std::vector<int> sample;
  for (int r = 0; r < M; ++r)
    if (rows < 0 || r < rows / 2 || r >= M - rows / 2) sample.push_back(r);
  auto pick = [sample, N](const std::vector<float>& c) {
    std::vector<float> out;
    for (int r : sample) out.insert(out.end(), c.begin() + size_t(r) * N, c.begin() + size_t(r + 1) * N);
    return out;
  };
  char name[128];
  std::snprintf(name, sizeof name, "gemm%s %c%c %dx%dx%d a=%g b=%g", f32 ? "->f32" : "", ta ? 'T' : 'N',
                tb ? 'T' : 'N', M, N, K, alpha, beta);
  return {name, {{"C", f32 ? 5e-5 : kBf16}},
          [=] {
            std::vector<float> C = C0->f;
            auto rows_of_c = [&](int r0, int r1) {  // rows [r0, r1) of C need only rows [r0, r1) of A
              cpu::gemm<float>(false, tb, r1 - r0, N, K, alpha, A->f.data() + size_t(r0) * K, B->f.data(), beta,
                               C.data() + size_t(r0) * N);
            };
            if (ta || rows < 0) {
              cpu::gemm<float>(ta, tb, M, N, K, alpha, A->f.data(), B->f.data(), beta, C.data());
            } else {
              rows_of_c(0, rows / 2);
              rows_of_c(M - rows / 2, M);
            }
            return Outputs{pick(C)};
          },
          [=] {
            DeviceBuffer<bf16> a(A->b), b(B->b);
            DeviceBuffer<CT> c(size_t(M) * N);
            if (beta == 0.f) c.poison();
            else if constexpr (f32) c.upload(C0->f);
            else c.upload(C0->b);
            cuda::gemm(ta, tb, M, N, K, alpha, a.ptr, b.ptr, beta, c.ptr, test_stream());
            return Outputs{pick(dl(c))};
          }};
}

OpCase gemm_batched_case(int batch, int M, int N, int K, bool shared_b) {
  auto A = std::make_shared<Input>(input(size_t(batch) * M * K, 400));
  auto B = std::make_shared<Input>(input(size_t(shared_b ? 1 : batch) * K * N, 401));
  int64_t sa = int64_t(M) * K, sb = shared_b ? 0 : int64_t(K) * N, sc = int64_t(M) * N;
  return {"gemm_strided_batched " + std::to_string(batch) + "x" + std::to_string(M) + "x" + std::to_string(N) + "x" +
              std::to_string(K) + (shared_b ? " shared B" : ""),
          {{"C", kBf16}},
          [=] {
            std::vector<float> C(size_t(batch) * sc);
            for (int i = 0; i < batch; ++i)
              cpu::gemm<float>(false, true, M, N, K, 1.f, A->f.data() + i * sa, B->f.data() + i * sb, 0.f,
                               C.data() + i * sc);
            return Outputs{C};
          },
          [=] {
            DeviceBuffer<bf16> a(A->b), b(B->b), c(size_t(batch) * sc);
            c.poison();
            cuda::gemm_strided_batched(false, true, M, N, K, 1.f, a.ptr, sa, b.ptr, sb, 0.f, c.ptr, sc, batch,
                                       test_stream());
            return Outputs{dl(c)};
          }};
}

// ---- embedding ----
OpCase embedding_case(int N, int V, int D) {
  auto table = std::make_shared<Input>(input(size_t(V) * D, 500 + D));
  auto dout = std::make_shared<Input>(input(size_t(N) * D, 501 + D));
  auto prior = std::make_shared<Input>(input(size_t(V) * D, 502 + D));  // dtable accumulates onto it
  auto ids = std::make_shared<std::vector<int32_t>>(random_ids(N, V, 503 + D, 0.3));  // 30% one hot token
  return {"embedding N=" + std::to_string(N) + " V=" + std::to_string(V) + " D=" + std::to_string(D),
          {{"out", kExact}, {"dtable", kBf16}},
          [=] {
            std::vector<float> out(size_t(N) * D), dtable = prior->f;
            cpu::embedding_forward<float>(N, V, D, ids->data(), table->f.data(), out.data());
            cpu::embedding_backward<float>(N, V, D, ids->data(), dout->f.data(), dtable.data());
            return Outputs{out, dtable};
          },
          [=] {
            DeviceBuffer<int32_t> id(*ids);
            DeviceBuffer<bf16> t(table->b), out(size_t(N) * D), g(dout->b), dt(prior->b);
            out.poison();
            cuda::embedding_forward(N, V, D, id.ptr, t.ptr, out.ptr, test_stream());
            cuda::embedding_backward(N, V, D, id.ptr, g.ptr, dt.ptr, test_stream());
            return Outputs{dl(out), dl(dt)};
          }};
}

// ---- rmsnorm (unit_weight: w = dw = nullptr, the QK-norm form) ----
// accumulate_dx: dx starts from a random prior (the residual stream's gradient) and is added into.
OpCase rmsnorm_case(int N, int D, bool unit_weight = false, bool accumulate_dx = false) {
  auto x = std::make_shared<Input>(input(size_t(N) * D, 600 + D, 2.f));
  auto w = std::make_shared<Input>(input(D, 601 + D));
  auto dy = std::make_shared<Input>(input(size_t(N) * D, 602 + D));
  auto prior = std::make_shared<Input>(input(D, 603 + D));
  auto prior_dx = std::make_shared<Input>(input(size_t(N) * D, 604 + D));
  const float eps = 1e-5f;
  return {"rmsnorm N=" + std::to_string(N) + " D=" + std::to_string(D) + (unit_weight ? " unit weight" : "") +
              (accumulate_dx ? " dx +=" : ""),
          {{"y", kBf16}, {"rstd", kF32}, {"dx", kBf16}, {"dw", unit_weight ? kExact : kBf16}},
          [=] {
            std::vector<float> y(size_t(N) * D), rstd(N), dw = prior->f;
            std::vector<float> dx = accumulate_dx ? prior_dx->f : std::vector<float>(size_t(N) * D);
            const float* wp = unit_weight ? nullptr : w->f.data();
            cpu::rmsnorm_forward<float>(N, D, eps, x->f.data(), wp, y.data(), rstd.data());
            cpu::rmsnorm_backward<float>(N, D, x->f.data(), wp, rstd.data(), dy->f.data(), dx.data(), accumulate_dx,
                                         unit_weight ? nullptr : dw.data());
            return Outputs{y, rstd, dx, dw};
          },
          [=] {
            DeviceBuffer<bf16> xd(x->b), wd(w->b), y(size_t(N) * D), g(dy->b), dx(prior_dx->b), dw(prior->b);
            DeviceBuffer<float> rstd(N);
            const bf16* wp = unit_weight ? nullptr : wd.ptr;
            y.poison();
            rstd.poison();
            if (!accumulate_dx) dx.poison();
            cuda::rmsnorm_forward(N, D, eps, xd.ptr, wp, y.ptr, rstd.ptr, test_stream());
            cuda::rmsnorm_backward(N, D, xd.ptr, wp, rstd.ptr, g.ptr, dx.ptr, accumulate_dx,
                                   unit_weight ? nullptr : dw.ptr, test_stream());
            return Outputs{dl(y), dl(rstd), dl(dx), dl(dw)};  // unit weight: dw must stay the prior
          }};
}

// ---- rope: GPU tables vs CPU tables, then forward (out of place) and backward (in place) ----
OpCase rope_case(int B, int T, int H, int D, int offset) {
  const int P = T + offset + 3;
  const double theta = 10000.0;
  auto x = std::make_shared<Input>(input(size_t(B) * T * H * D, 700 + D));
  auto dy = std::make_shared<Input>(input(size_t(B) * T * H * D, 701 + D));
  return {"rope B=" + std::to_string(B) + " T=" + std::to_string(T) + " H=" + std::to_string(H) +
              " D=" + std::to_string(D) + " offset=" + std::to_string(offset),
          {{"cos", 1e-6}, {"sin", 1e-6}, {"y", kBf16}, {"dx", kBf16}},
          [=] {
            std::vector<float> c(size_t(P) * D / 2), s(c.size()), y(x->f.size()), dx(x->f.size());
            cpu::rope_tables(P, D, theta, c.data(), s.data());
            cpu::rope_forward<float>(B, T, H, D, offset, P, c.data(), s.data(), x->f.data(), y.data());
            cpu::rope_backward<float>(B, T, H, D, offset, P, c.data(), s.data(), dy->f.data(), dx.data());
            return Outputs{c, s, y, dx};
          },
          [=] {
            DeviceBuffer<float> c(size_t(P) * D / 2), s(size_t(P) * D / 2);
            DeviceBuffer<bf16> xd(x->b), y(x->b.size()), g(dy->b);
            c.poison();
            s.poison();
            y.poison();
            cuda::rope_tables(P, D, theta, c.ptr, s.ptr, test_stream());
            cuda::rope_forward(B, T, H, D, offset, P, c.ptr, s.ptr, xd.ptr, y.ptr, test_stream());
            cuda::rope_backward(B, T, H, D, offset, P, c.ptr, s.ptr, g.ptr, g.ptr, test_stream());  // in place
            return Outputs{dl(c), dl(s), dl(y), dl(g)};
          }};
}

// ---- swiglu ----
OpCase swiglu_case(int N, int F) {
  auto ab = std::make_shared<Input>(input(size_t(N) * 2 * F, 800 + F, 2.f));
  auto dout = std::make_shared<Input>(input(size_t(N) * F, 801 + F));
  return {"swiglu N=" + std::to_string(N) + " F=" + std::to_string(F),
          {{"out", kBf16}, {"dab", kBf16}},
          [=] {
            std::vector<float> out(size_t(N) * F), dab(ab->f.size());
            cpu::swiglu_forward<float>(N, F, ab->f.data(), out.data());
            cpu::swiglu_backward<float>(N, F, ab->f.data(), dout->f.data(), dab.data());
            return Outputs{out, dab};
          },
          [=] {
            DeviceBuffer<bf16> a(ab->b), out(size_t(N) * F), g(dout->b), dab(ab->b.size());
            out.poison();
            dab.poison();
            cuda::swiglu_forward(N, F, a.ptr, out.ptr, test_stream());
            cuda::swiglu_backward(N, F, a.ptr, g.ptr, dab.ptr, test_stream());
            return Outputs{dl(out), dl(dab)};
          }};
}

// ---- cross entropy: the fused forward + in-place backward kernel ----
OpCase cross_entropy_case(int N, int V, int V_valid, float z_loss = 0.f) {
  auto logits = std::make_shared<Input>(input(size_t(N) * V, 900 + V, 2.f));
  for (int n = 0; n < N; ++n)  // padding that would dominate the softmax if it were not excluded
    for (int v = V_valid; v < V; ++v) logits->b[size_t(n) * V + v] = float_to_bf16(30.f);
  logits->f = to_float(logits->b);
  auto targets = std::make_shared<std::vector<int32_t>>(random_ids(N, V_valid, 901 + V, 0.0, 0.2));
  int valid = int(std::count_if(targets->begin(), targets->end(), [](int32_t t) { return t >= 0; }));
  const float scale = 1.f / float(std::max(valid, 1));
  return {"cross_entropy N=" + std::to_string(N) + " V=" + std::to_string(V) + " V_valid=" + std::to_string(V_valid) +
              (z_loss > 0 ? " z_loss=" + std::to_string(z_loss) : ""),
          {{"loss", kF32}, {"lse", kF32}, {"dlogits", kBf16}},
          [=] {
            std::vector<float> loss(N), lse(N), dl_ = logits->f;
            cpu::cross_entropy_forward<float>(N, V, V_valid, logits->f.data(), targets->data(), loss.data(), lse.data());
            cpu::cross_entropy_backward<float>(N, V, V_valid, targets->data(), lse.data(), scale, z_loss, dl_.data());
            return Outputs{loss, lse, dl_};
          },
          [=] {
            DeviceBuffer<bf16> z(logits->b);
            DeviceBuffer<int32_t> t(*targets);
            DeviceBuffer<float> loss(N), lse(N);
            loss.poison();
            lse.poison();
            cuda::cross_entropy_fused(N, V, V_valid, z.ptr, t.ptr, scale, z_loss, loss.ptr, lse.ptr, test_stream());
            return Outputs{dl(loss), dl(lse), dl(z)};
          }};
}

// ---- global_norm over many buffers (bf16 and fp32), one of them empty ----
OpCase global_norm_case(int buffers) {
  auto sizes = std::make_shared<std::vector<int64_t>>();
  Rng rng{1102, 0, 0};
  for (int i = 0; i < buffers; ++i) sizes->push_back(i == 3 ? 0 : i == 5 ? 100003 : int64_t(1 + rng.below(40000)));
  auto data = std::make_shared<std::vector<Input>>();
  for (int i = 0; i < buffers; ++i) data->push_back(input((*sizes)[i], 1200 + i));
  return {"global_norm (" + std::to_string(buffers) + " buffers)",
          {{"global_norm bf16", kF32}, {"global_norm f32", kF32}},
          [=] {
            std::vector<const float*> ptrs;
            for (auto& d : *data) ptrs.push_back(d.f.data());
            float norm = float(cpu::global_norm<float>(buffers, ptrs.data(), sizes->data()));
            return Outputs{{norm}, {norm}};
          },
          [=] {
            DeviceBuffer<float> norm_b(1), norm_f(1);
            norm_b.poison();
            norm_f.poison();
            std::vector<std::unique_ptr<DeviceBuffer<bf16>>> bb;
            std::vector<std::unique_ptr<DeviceBuffer<float>>> bf;
            std::vector<const bf16*> pb;
            std::vector<const float*> pf;
            for (auto& d : *data) {
              bb.push_back(std::make_unique<DeviceBuffer<bf16>>(d.b));
              bf.push_back(std::make_unique<DeviceBuffer<float>>(d.f));
              pb.push_back(bb.back()->ptr);
              pf.push_back(bf.back()->ptr);
            }
            cuda::global_norm(buffers, pb.data(), sizes->data(), norm_b.ptr, test_stream());
            cuda::global_norm(buffers, pf.data(), sizes->data(), norm_f.ptr, test_stream());
            return Outputs{dl(norm_b), dl(norm_f)};
          }};
}

// ---- adamw with round-to-nearest bf16 copy (stochastic rounding: its own test below) ----
OpCase adamw_case(int64_t n, bool f32_grad) {
  auto p = std::make_shared<Input>(input(n, 1300));
  auto m = std::make_shared<Input>(input(n, 1301, 0.1f));
  auto v = std::make_shared<Input>(input(n, 1302, 0.1f));
  for (auto& x : v->f) x = x * x;  // second moments are non-negative
  auto g = std::make_shared<Input>(input(n, 1303));
  cuda::AdamWStep hp;
  hp.lr = 3e-3f, hp.beta1 = 0.9f, hp.beta2 = 0.95f, hp.eps = 1e-8f, hp.weight_decay = 0.1f, hp.step = 7;
  hp.grad_scale = 0.5f;
  return {std::string("adamw n=") + std::to_string(n) + (f32_grad ? " f32 grad" : " bf16 grad"),
          {{"p", 1e-6}, {"m", 1e-6}, {"v", 1e-6}, {"p bf16", kBf16}},
          [=] {
            std::vector<float> pp = p->f, mm = m->f, vv = v->f;
            cpu::adamw_step<float>(n, pp.data(), mm.data(), vv.data(), g->f.data(), hp.lr, hp.beta1, hp.beta2, hp.eps,
                                   hp.weight_decay, hp.step, hp.grad_scale);
            return Outputs{pp, mm, vv, bf16_round(pp)};
          },
          [=] {
            DeviceBuffer<float> pd(p->f), md(m->f), vd(v->f), gf(g->f);
            DeviceBuffer<bf16> gb(g->b), pb(n);
            pb.poison();
            if (f32_grad) cuda::adamw(n, pd.ptr, md.ptr, vd.ptr, gf.ptr, pb.ptr, hp, test_stream());
            else cuda::adamw(n, pd.ptr, md.ptr, vd.ptr, gb.ptr, pb.ptr, hp, test_stream());
            return Outputs{dl(pd), dl(md), dl(vd), dl(pb)};
          }};
}

std::vector<OpCase> op_table() {
  std::vector<OpCase> t;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      t.push_back(gemm_case<bf16>(ta, tb, 129, 257, 63, 1.f, 0.f));   // odd: fallback path allowed
      t.push_back(gemm_case<bf16>(ta, tb, 128, 256, 64, 0.5f, 1.f));  // aligned, accumulating
    }
  t.push_back(gemm_case<bf16>(false, false, 4096, 4096, 1024, 1.f, 0.f, 256));
  t.back().big = true;
  t.push_back(gemm_case<float>(true, false, 256, 384, 512, 1.f, 1.f));  // weight-gradient style, f32 accumulate
  t.push_back(gemm_case<float>(false, false, 129, 257, 63, 1.f, 0.f));
  t.push_back(gemm_batched_case(3, 64, 48, 40, false));
  t.push_back(gemm_batched_case(4, 33, 17, 9, true));
  t.push_back(embedding_case(1000, 503, 64));
  t.push_back(embedding_case(7, 11, 13));
  t.push_back(rmsnorm_case(257, 1024));
  t.push_back(rmsnorm_case(3000, 512));  // more rows than backward blocks: several rows per block
  t.push_back(rmsnorm_case(7, 13));
  t.push_back(rmsnorm_case(100, 64, true));
  t.push_back(rmsnorm_case(1000, 1024, false, true));
  t.push_back(rmsnorm_case(33, 1536, false, true));
  t.push_back(rope_case(2, 67, 4, 64, 5));
  t.push_back(rope_case(1, 7, 3, 12, 0));
  t.push_back(swiglu_case(300, 256));
  t.push_back(swiglu_case(7, 5));
  t.push_back(cross_entropy_case(64, 50304, 50257));
  t.back().big = true;
  t.push_back(cross_entropy_case(7, 11, 9));
  t.push_back(cross_entropy_case(64, 50304, 50257, 0.05f));
  t.back().big = true;
  t.push_back(global_norm_case(150));
  t.push_back(adamw_case(100003, false));
  t.push_back(adamw_case(1001, true));
  return t;
}

}  // namespace

TEST_CASE("op table: CUDA kernels match the CPU reference on bf16-rounded inputs") {
  std::printf("%-44s %-16s %12s %10s\n", "case", "output", "rel error", "bound");
  const bool small_only = std::getenv("HYLO_GPU_TEST_SMALL") != nullptr;
  auto run_table = [&](bool gemm_only) {
    for (const OpCase& c : op_table()) {
      if ((small_only && c.big) || (gemm_only && c.name.rfind("gemm", 0) != 0)) continue;
      Outputs ref = c.cpu();
      Outputs got = c.gpu();
      REQUIRE(ref.size() == c.checks.size());
      REQUIRE(got.size() == c.checks.size());
      for (size_t i = 0; i < c.checks.size(); ++i) {
        double err = relative_error(got[i], ref[i]);
        bool ok = err <= c.checks[i].bound;
        std::printf("%-44s %-16s %12.3e %10.1e%s\n", (c.name + (gemm_only ? " [GemmEx]" : "")).c_str(),
                    c.checks[i].output.c_str(), err, c.checks[i].bound, ok ? "" : "  FAIL");
        INFO(c.name << " / " << c.checks[i].output << ": relative error " << err << " > " << c.checks[i].bound);
        CHECK(ok);
      }
    }
  };
  run_table(false);
  cuda::GemmStats stats = cuda::gemm_stats();
  CHECK(stats.lt_calls > 0);  // the aligned shapes must take the cuBLASLt path
  // Every gemm case again through the cublasGemmEx fallback.
  cuda::gemm_force_fallback(true);
  run_table(true);
  cuda::gemm_force_fallback(false);
  cuda::GemmStats after = cuda::gemm_stats();
  CHECK(after.fallback_calls > stats.fallback_calls);
  std::printf("gemm paths: %llu cuBLASLt calls, %llu cublasGemmEx calls, %llu plans\n",
              (unsigned long long)after.lt_calls, (unsigned long long)after.fallback_calls,
              (unsigned long long)after.plans);
}
