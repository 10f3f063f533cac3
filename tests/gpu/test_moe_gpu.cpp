// Mixture-of-experts on CUDA vs the CPU reference, through the op entries of ops/moe.h (so the
// kernels of kernels/moe, their wiring and the dtype conventions are tested together): router
// logits, scores, top-k, gate weights, the device-built dispatch plan, permute, grouped GEMM (both
// issue paths), combine and the aux loss, forward and backward, then a whole MoE layer. Inputs are
// random and bf16-exact (never zeros), so both sides start from the same values. Routing cases
// include experts that receive no token and capacity drops, at E=8 K=2 and E=64 K=4.
// Bounds (relative error ||gpu - cpu|| / ||cpu||), as in test_ops_gpu.cpp: bf16 outputs 1e-2,
// fp32 router tensors 1e-5, index tensors and pure row moves exact.
#include <cuda_runtime.h>  // before gpu_test_util.h: its typed cudaMalloc(T**) overload
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "parallel/communicator.h"
#include "parallel/single_process.h"
#include "gpu_test_util.h"
#include "kernels/moe/grouped_gemm.h"
#include "nn/moe.h"
#include "ops/moe.h"
#include "ops/ops.h"
#include "parallel/expert_dispatch.h"
#include "parallel/expert_parallel.h"

using namespace hylo;
using namespace hylo::test;

namespace {

constexpr double kBf16 = 1e-2, kF32 = 1e-5;

// bf16-exact random values (the GPU sees exactly what the CPU reference sees).
std::vector<float> values(size_t n, uint64_t seed, float scale = 1.f) {
  return to_float(to_bf16(random_floats(n, seed, scale)));
}
Tensor cpu_t(const std::vector<float>& v, const Shape& s) { return Tensor::from_vector(v, s); }
Tensor gpu_f32(const std::vector<float>& v, const Shape& s) { return cpu_t(v, s).to(Device::cuda); }
Tensor gpu_bf16(const std::vector<float>& v, const Shape& s) { return cpu_t(v, s).to(DType::bf16).to(Device::cuda); }
std::vector<float> host(const Tensor& t) { return t.to(Device::cpu).to(DType::f32).to_vector<float>(); }
std::vector<int32_t> ints(const Tensor& t) { return t.to(Device::cpu).to_vector<int32_t>(); }

// A leaf on each side holding the same values: f32 on the CPU, `gpu_dtype` on CUDA.
struct Pair {
  Var cpu, gpu;
};
Pair leaves(const std::vector<float>& v, const Shape& s, DType gpu_dtype, const char* name) {
  return {Var(cpu_t(v, s), true, name), Var(gpu_dtype == DType::bf16 ? gpu_bf16(v, s) : gpu_f32(v, s), true, name)};
}

void check_close(const char* what, const std::vector<float>& gpu, const std::vector<float>& cpu, double bound) {
  const double err = relative_error(gpu, cpu);
  CAPTURE(what);
  CAPTURE(err);
  CHECK(err <= bound);
}

// Top-k choices for N tokens: K distinct experts each, a hot expert 0 (about a third of first
// picks), and the last `unused` experts never chosen (they get zero tokens).
std::vector<int32_t> routing(int N, int E, int K, int unused, uint64_t seed) {
  Rng rng{seed, 9, 0};
  std::vector<int32_t> ex(size_t(N) * K);
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k) {
      int32_t e;
      bool repeat;
      do {
        e = k == 0 && rng.uniform() < 0.35 ? 0 : int32_t(rng.below(uint64_t(E - unused)));
        repeat = false;
        for (int j = 0; j < k; ++j) repeat |= ex[size_t(n) * K + j] == e;
      } while (repeat);
      ex[size_t(n) * K + k] = e;
    }
  return ex;
}

struct PlanCase {
  int N, E, K, unused;
  double capacity_factor;
};
const std::vector<PlanCase> kPlanCases = {
    {4096, 8, 2, 1, 0.0},   // dropless, one expert without tokens, 8 chunks of the device plan
    {4096, 8, 2, 0, 1.0},   // capacity drops (expert 0 is hot)
    {2048, 64, 4, 5, 0.0},  // fine-grained, five empty experts
    {2048, 64, 4, 0, 1.25},
    {7, 5, 3, 1, 0.0},      // smaller than one warp
};

std::string label(const PlanCase& c) {
  return "N=" + std::to_string(c.N) + " E=" + std::to_string(c.E) + " K=" + std::to_string(c.K) +
         " cap=" + std::to_string(c.capacity_factor);
}

struct Plans {
  MoePlan cpu, gpu;
};
Plans plans(const PlanCase& c, uint64_t seed) {
  const std::vector<int32_t> ex = routing(c.N, c.E, c.K, c.unused, seed);
  const Tensor ex_cpu = Tensor::from_vector(ex, {c.N, c.K});
  const int64_t cap = moe_capacity(c.capacity_factor, c.N, c.K, c.E);
  return {moe_plan(ex_cpu, c.E, cap), moe_plan(ex_cpu.to(Device::cuda), c.E, cap)};
}

}  // namespace

TEST_CASE("moe gpu: device dispatch plan equals cpu::plan_dispatch (order, counts, capacity drops)") {
  for (const PlanCase& c : kPlanCases) {
    CAPTURE(label(c));
    const Plans p = plans(c, 1);
    CHECK(p.gpu.dropped == p.cpu.dropped);
    CHECK(p.gpu.rows() == p.cpu.rows());
    CHECK(ints(p.gpu.routed_E) == ints(p.cpu.routed_E));
    CHECK(ints(p.gpu.kept_E) == ints(p.cpu.kept_E));
    CHECK(ints(p.gpu.offsets_E1) == ints(p.cpu.offsets_E1));
    CHECK(ints(p.gpu.token_A) == ints(p.cpu.token_A));
    CHECK(ints(p.gpu.row_NK) == ints(p.cpu.row_NK));
    if (c.capacity_factor > 0) CHECK(p.cpu.dropped > 0);
    if (c.unused > 0) CHECK(ints(p.cpu.routed_E).back() == 0);
  }
  const Tensor bad = Tensor::from_vector<int32_t>({0, 1, 8, 2}, {2, 2}).to(Device::cuda);
  CHECK_THROWS_AS(moe_plan(bad, 8, 0), Error);
}

TEST_CASE("moe gpu: router logits, scores (softmax, sigmoid), top-k and gate weights, forward and backward") {
  for (int E : {8, 64}) {
    const int K = E == 8 ? 2 : 4, N = 777, D = 64;
    CAPTURE(E);
    // logits = x @ router^T in fp32 from bf16 operands; the backward casts d(logits) to bf16.
    Pair x = leaves(values(size_t(N) * D, 10 + E), {N, D}, DType::bf16, "x");
    Pair router = leaves(values(size_t(E) * D, 20 + E, 0.2f), {E, D}, DType::bf16, "router");
    Var lc = moe_router_logits(x.cpu, router.cpu), lg = moe_router_logits(x.gpu, router.gpu);
    REQUIRE(lg.value().dtype() == DType::f32);
    check_close("logits", host(lg.value()), host(lc.value()), kF32);
    const std::vector<float> G = values(size_t(N) * E, 30 + E);
    lc.backward(cpu_t(G, {N, E}));
    lg.backward(gpu_f32(G, {N, E}));
    check_close("logits dx", host(x.gpu.grad()), host(x.cpu.grad()), kBf16);
    check_close("logits drouter", host(router.gpu.grad()), host(router.cpu.grad()), kBf16);

    for (RouterKind kind : {RouterKind::softmax, RouterKind::sigmoid}) {
      CAPTURE(int(kind));
      Pair logits = leaves(values(size_t(N) * E, 40 + E, 2.f), {N, E}, DType::f32, "logits");
      Var sc = moe_router_scores(logits.cpu, kind), sg = moe_router_scores(logits.gpu, kind);
      check_close("scores", host(sg.value()), host(sc.value()), kF32);

      // Top-k from the SAME scores on both sides must pick the same experts, bias or not.
      const std::vector<float> bias = values(size_t(E), 50 + E, 0.05f);
      Tensor scores_gpu = sc.value().to(Device::cuda);
      CHECK(ints(moe_topk(scores_gpu, Tensor(), K)) == ints(moe_topk(sc.value(), Tensor(), K)));
      const Tensor ec = moe_topk(sc.value(), cpu_t(bias, {E}), K);
      CHECK(ints(moe_topk(scores_gpu, gpu_f32(bias, {E}), K)) == ints(ec));

      // Gate weights over the chosen experts, then the backward through weights and scores.
      Var wc = moe_gate_weights(sc, ec), wg = moe_gate_weights(sg, ec.to(Device::cuda));
      check_close("gate weights", host(wg.value()), host(wc.value()), kF32);
      const std::vector<float> Gw = values(size_t(N) * K, 60 + E);
      wc.backward(cpu_t(Gw, {N, K}));
      wg.backward(gpu_f32(Gw, {N, K}));
      check_close("dlogits", host(logits.gpu.grad()), host(logits.cpu.grad()), kF32);
    }
  }
  // Ties go to the lower index on the device too.
  const Tensor flat = Tensor::from_vector<float>(std::vector<float>(16, 0.25f), {2, 8}).to(Device::cuda);
  CHECK(ints(moe_topk(flat, Tensor(), 3)) == std::vector<int32_t>{0, 1, 2, 0, 1, 2});
}

TEST_CASE("moe gpu: permute and combine forward and backward (empty experts, capacity drops)") {
  for (const PlanCase& c : kPlanCases) {
    CAPTURE(label(c));
    const Plans p = plans(c, 2);
    const int N = c.N, K = c.K, D = 72, A = int(p.cpu.rows());  // D = 72: the 8-wide path; see below for odd
    for (int width : {D, 37}) {
      CAPTURE(width);
      Pair x = leaves(values(size_t(N) * width, 3), {N, width}, DType::bf16, "x");
      Var xs_c = moe_permute(x.cpu, p.cpu), xs_g = moe_permute(x.gpu, p.gpu);
      CHECK(host(xs_g.value()) == host(xs_c.value()));  // a gather moves values exactly
      const std::vector<float> G = values(size_t(A) * width, 4);
      xs_c.backward(cpu_t(G, {A, width}));
      xs_g.backward(gpu_bf16(G, {A, width}));
      check_close("permute dx", host(x.gpu.grad()), host(x.cpu.grad()), kBf16);

      Pair ys = leaves(values(size_t(A) * width, 5), {A, width}, DType::bf16, "ys");
      Pair w = leaves(values(size_t(N) * K, 6, 0.5f), {N, K}, DType::f32, "w");
      Var yc = moe_combine(ys.cpu, w.cpu, p.cpu), yg = moe_combine(ys.gpu, w.gpu, p.gpu);
      check_close("combine y", host(yg.value()), host(yc.value()), kBf16);
      const std::vector<float> Gy = values(size_t(N) * width, 7);
      yc.backward(cpu_t(Gy, {N, width}));
      yg.backward(gpu_bf16(Gy, {N, width}));
      check_close("combine dys", host(ys.gpu.grad()), host(ys.cpu.grad()), kBf16);
      check_close("combine dw", host(w.gpu.grad()), host(w.cpu.grad()), kF32);
    }
  }
}

TEST_CASE("moe gpu: grouped expert GEMM forward, dX, dW (fresh and accumulated), both issue paths") {
  const cuda::GroupedGemmPath saved = cuda::grouped_gemm_path();
  for (cuda::GroupedGemmPath path : {cuda::GroupedGemmPath::cublas_grouped, cuda::GroupedGemmPath::lt_loop}) {
    cuda::set_grouped_gemm_path(path);
    for (const PlanCase& c : kPlanCases) {
      CAPTURE(int(path));
      CAPTURE(label(c));
      const Plans p = plans(c, 3);
      const int A = int(p.cpu.rows()), E = c.E, I = 96, O = 40;
      Pair x = leaves(values(size_t(A) * I, 8), {A, I}, DType::bf16, "x");
      Pair w = leaves(values(size_t(E) * O * I, 9, 0.1f), {E, O, I}, DType::bf16, "w");
      const std::vector<float> G = values(size_t(A) * O, 10);
      // Two backward passes: the second adds into the existing weight gradient, as micro-batches do.
      for (int pass = 0; pass < 2; ++pass) {
        CAPTURE(pass);
        Var yc = moe_grouped_linear(x.cpu, w.cpu, p.cpu), yg = moe_grouped_linear(x.gpu, w.gpu, p.gpu);
        check_close("y", host(yg.value()), host(yc.value()), kBf16);
        yc.backward(cpu_t(G, {A, O}));
        yg.backward(gpu_bf16(G, {A, O}));
        check_close("dx", host(x.gpu.grad()), host(x.cpu.grad()), kBf16);
        check_close("dw", host(w.gpu.grad()), host(w.cpu.grad()), kBf16);
      }
      // Experts without tokens have an exactly zero weight gradient.
      const std::vector<int32_t> kept = ints(p.cpu.kept_E);
      const std::vector<float> dw = host(w.gpu.grad());
      for (int e = 0; e < E; ++e)
        if (kept[size_t(e)] == 0)
          for (int64_t i = 0; i < int64_t(O) * I; ++i) REQUIRE(dw[size_t(e * int64_t(O) * I + i)] == 0.f);
    }
  }
  cuda::set_grouped_gemm_path(saved);
}

TEST_CASE("moe gpu: Switch aux loss forward and backward (softmax and normalised sigmoid)") {
  for (const PlanCase& c : kPlanCases) {
    for (RouterKind kind : {RouterKind::softmax, RouterKind::sigmoid}) {
      CAPTURE(label(c));
      CAPTURE(int(kind));
      const Plans p = plans(c, 4);
      const int N = c.N, E = c.E;
      Pair logits = leaves(values(size_t(N) * E, 11, 1.5f), {N, E}, DType::f32, "logits");
      Var sc = moe_router_scores(logits.cpu, kind), sg = moe_router_scores(logits.gpu, kind);
      Var ac = moe_aux_loss(sc, p.cpu, kind, 0.37), ag = moe_aux_loss(sg, p.gpu, kind, 0.37);
      REQUIRE(ag.value().device() == Device::cuda);
      check_close("aux", host(ag.value()), host(ac.value()), kF32);
      scale(ac, 1.7).backward();
      scale(ag, 1.7).backward();
      check_close("daux/dlogits", host(logits.gpu.grad()), host(logits.cpu.grad()), kF32);
    }
  }
}

namespace {

ModelConfig layer_config(int E, int K, const std::string& router, double capacity) {
  ModelConfig c;
  c.d_model = 64;
  c.n_layers = 2;
  c.init_std = 0.3;  // routing far from ties, every path matters
  c.moe.experts = E;
  c.moe.top_k = K;
  c.moe.expert_hidden = E == 8 ? 48 : 16;
  c.moe.shared_experts = 1;
  c.moe.router = router;
  c.moe.aux_loss_coef = 0.05;
  c.moe.capacity_factor = capacity;
  return c;
}

// Σ v·G as a scalar on v's device (host arithmetic: this is a test), so one backward() covers the
// layer output and the aux loss together.
Var dot_with(const Var& v, const std::vector<float>& G) {
  const std::vector<float> a = host(v.value());
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * G[i];
  const Tensor out = Tensor::from_vector<float>({float(s)}, {1}).to(v.value().device());
  return Var::from_op(out, {v}, [G](const Tensor& d, std::vector<Var>& in) {
    const float scale_by = host(d)[0];
    std::vector<float> g(G);
    for (float& x : g) x *= scale_by;
    Tensor grad = Tensor::from_vector(g, in[0].shape()).to(in[0].value().dtype()).to(in[0].value().device());
    in[0].accumulate_grad(grad);
  });
}

}  // namespace

TEST_CASE("moe gpu: whole MoE layer (router, bias, experts, shared expert, aux loss) fwd+bwd vs CPU") {
  struct Case {
    int E, K;
    std::string router;
    double capacity;
  };
  for (const Case& cs : {Case{8, 2, "softmax", 0.0}, Case{8, 2, "sigmoid", 1.0}, Case{64, 4, "softmax", 0.0},
                         Case{64, 4, "softmax", 1.25}}) {
    CAPTURE(cs.E);
    CAPTURE(cs.router);
    CAPTURE(cs.capacity);
    const ModelConfig config = layer_config(cs.E, cs.K, cs.router, cs.capacity);
    ParamList pc, pg;
    MoeFeedForward cpu_moe(pc, 0, config, 7), gpu_moe(pg, 0, config, 7);
    for (size_t i = 0; i < pc.size(); ++i) {  // both sides hold the same bf16 values
      pc[i].var.mutable_value() = pc[i].var.value().to(DType::bf16).to(DType::f32);
      pg[i].var.mutable_value() = pc[i].var.value().to(DType::bf16).to(Device::cuda);
    }
    const std::vector<float> bias = values(size_t(cs.E), 12, 0.02f);  // steers selection through the device copy
    std::copy(bias.begin(), bias.end(), cpu_moe.router_bias().data<float>());
    std::copy(bias.begin(), bias.end(), gpu_moe.router_bias().data<float>());

    const int N = 512, D = config.d_model;
    Pair x = leaves(values(size_t(N) * D, 13), {N, D}, DType::bf16, "x");
    Var aux_c, aux_g;
    Var yc = cpu_moe.forward(x.cpu, &aux_c), yg = gpu_moe.forward(x.gpu, &aux_g);
    check_close("y", host(yg.value()), host(yc.value()), kBf16);
    CHECK(gpu_moe.stats().tokens_per_expert == cpu_moe.stats().tokens_per_expert);
    CHECK(gpu_moe.stats().dropped == cpu_moe.stats().dropped);
    CHECK(gpu_moe.stats().aux_loss == doctest::Approx(cpu_moe.stats().aux_loss).epsilon(1e-4));
    {
      NoGradGuard no_grad;  // run to run, the device path repeats bit for bit (no order-dependent atomics)
      CHECK(host(gpu_moe.forward(x.gpu, nullptr).value()) == host(yg.value()));
    }

    const std::vector<float> G = values(size_t(N) * D, 14);
    add(dot_with(yc, G), aux_c).backward();
    add(dot_with(yg, G), aux_g).backward();
    check_close("dx", host(x.gpu.grad()), host(x.cpu.grad()), kBf16);
    for (size_t i = 0; i < pc.size(); ++i) {
      CAPTURE(pc[i].name);
      REQUIRE(pg[i].var.has_grad());
      check_close("param grad", host(pg[i].var.grad()), host(pc[i].var.grad()), 2 * kBf16);
    }
  }
}

namespace {

// The expert-parallel layer on `group` (one rank) against the plain layer: outputs and gradients
// bit for bit. What expert parallelism adds around the experts (the receiving side's plan, its
// permute, the weight-1 combine that undoes it) is exact; so is an exchange with oneself.
void check_expert_parallel_layer(dist::Communicator& group) {
  const ModelConfig config = layer_config(8, 2, "softmax", 0.0);
  ParamList plain_params, ep_params;
  MoeFeedForward plain(plain_params, 0, config, 7), ep(ep_params, 0, config, 7);
  const ExpertDispatch dispatch(group);
  ep.shard_experts(ep_params, dispatch);
  for (ParamList* params : {&plain_params, &ep_params})
    for (Parameter& p : *params) p.var.mutable_value() = p.var.value().to(DType::bf16).to(Device::cuda);
  const int N = 512, D = config.d_model;
  Pair x = leaves(values(size_t(N) * D, 21), {N, D}, DType::bf16, "x");
  Var x_ep(x.gpu.value().clone(), true, "x");
  Var y = plain.forward(x.gpu, nullptr), y_ep = ep.forward(x_ep, nullptr);
  CHECK(host(y_ep.value()) == host(y.value()));
  const std::vector<float> G = values(size_t(N) * D, 22);
  dot_with(y, G).backward();
  dot_with(y_ep, G).backward();
  CHECK(host(x_ep.grad()) == host(x.gpu.grad()));
  for (size_t i = 0; i < plain_params.size(); ++i) {
    CAPTURE(plain_params[i].name);
    CHECK(ep_params[i].expert_shard == (plain_params[i].name.find(".moe.w_") != std::string::npos));
    CHECK(host(ep_params[i].var.grad()) == host(plain_params[i].var.grad()));
  }
  // The checkpoint's gather of expert rows, through the group.
  const Tensor w = ep_params[1].var.value();
  CHECK(host(gather_expert_rows(w.to(DType::f32), group)) == host(w));
}

bool under_mpi_launcher() { return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE"); }

}  // namespace

TEST_CASE("moe gpu: the expert-parallel path on a group of one (own plan, regrouping, combine by 1) is the plain layer") {
  dist::SingleProcess group;  // the exchange is the identity here
  check_expert_parallel_layer(group);
}

// Run by `device_check.sh nccl` under `mpirun -np 1` (NCCL refuses two ranks on one GPU): the
// exchange, split and gather go through NCCL, sending to and receiving from the one rank.
TEST_CASE("moe gpu: the expert-parallel path through NCCL on a job of one is the plain layer" *
          doctest::skip(!under_mpi_launcher())) {
  auto job = dist::connect(Device::cuda);
  REQUIRE(job->size() == 1);
  auto group = job->split(0, 0);
  check_expert_parallel_layer(*group);
}
