// `hylo bench moe`: the expert SwiGLU GEMMs of one MoE layer (w_in: D -> 2F, w_out: F -> D) as
// grouped GEMMs over E variable-size row groups, forward (2 products) and backward (dX and dW of
// each, 4 products), against the same products done densely by cuBLAS with M = all A = N*K rows
// (the same FLOPs in one big GEMM each): the ratio is how much of dense speed grouping keeps. Both
// issue paths of kernels/moe/grouped_gemm.h are timed. Routing is uniform random top-k, balanced
// on average but not exactly, as in training. CUDA events, median of the timed iterations.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "bench/bench_table.h"
#include "core/error.h"

#if HYLO_WITH_CUDA
#include <cuda_runtime_api.h>

#include "bench/cuda/bench_timing.h"
#include "core/cuda/tensor_kernels.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "kernels/gemm/gemm.h"
#include "kernels/moe/grouped_gemm.h"
#endif

namespace hylo {
namespace {

using BenchOptions = MoeBenchOptions;

// A MoE layer shape. Legend: D width, E experts, K top_k, F expert hidden.
struct MoeShape {
  std::string name;
  int D, E, K, F;
};

// kMoeBenchShapes, in its order (bench/bench.h says where each comes from).
const std::vector<MoeShape> kShapes = {{"8e", 1024, 8, 2, 1408}, {"64e", 1024, 64, 4, 352}, {"2b", 1536, 64, 4, 384}};

const MoeShape& find_shape(const std::string& name) {
  const auto it = std::find_if(kShapes.begin(), kShapes.end(), [&](const MoeShape& s) { return s.name == name; });
  HYLO_CHECK(it != kShapes.end(), "bench moe: --shapes must be 8e, 64e or 2b, got '{}'", name);
  return *it;
}

#if HYLO_WITH_CUDA

constexpr char kBench[] = "bench moe";

// Random bf16 normals (never zeros): one 1 Mi-value host pattern tiled over the buffer.
Tensor random_bf16(const Shape& shape, const std::vector<bf16>& pattern, const char* what) {
  Tensor t = Tensor::empty(shape, DType::bf16, Device::cuda, what);
  bench::fill_bf16(t.data<bf16>(), size_t(t.numel()), pattern, 0, cuda::stream(), kBench);
  return t;
}

// Median ms of body() on hylo's stream (CUDA events, warm-up first).
double median_ms(const std::function<void()>& body, int iters, int warmup) {
  return bench::median_gpu_ms([&](int) { body(); }, iters, warmup, cuda::stream(), kBench);
}

struct BenchRow {
  std::string shape, path;
  int64_t rows = 0;
  int min_group = 0, max_group = 0;
  double fwd_ms = 0, bwd_ms = 0, dense_fwd_ms = 0, dense_bwd_ms = 0;
  double fwd_tflops = 0, bwd_tflops = 0, dense_fwd_tflops = 0, dense_bwd_tflops = 0;
};

// Group sizes of uniform random top-K routing of N tokens (K distinct experts per token).
std::vector<int32_t> random_offsets(int N, int E, int K) {
  Rng rng{20261130, 5, 0};
  std::vector<int32_t> count(size_t(E), 0), picked;
  for (int n = 0; n < N; ++n) {
    picked.clear();
    while (int(picked.size()) < K) {
      const int32_t e = int32_t(rng.below(uint64_t(E)));
      if (std::find(picked.begin(), picked.end(), e) == picked.end()) picked.push_back(e);
    }
    for (int32_t e : picked) ++count[size_t(e)];
  }
  std::vector<int32_t> offsets(size_t(E) + 1, 0);
  for (int e = 0; e < E; ++e) offsets[size_t(e) + 1] = offsets[size_t(e)] + count[size_t(e)];
  return offsets;
}

std::vector<BenchRow> bench_shape(const BenchOptions& o, const MoeShape& s, const std::vector<bf16>& pattern) {
  const int D = s.D, E = s.E, F = s.F;
  const std::vector<int32_t> offsets = random_offsets(o.tokens, E, s.K);
  const int A = offsets.back();
  const Tensor offsets_dev = Tensor::from_vector(offsets, {E + 1}).to(Device::cuda);
  const int32_t *off = offsets.data(), *off_dev = offsets_dev.data<int32_t>();
  auto bf = [](const Tensor& t) { return t.data<bf16>(); };
  // Activations (A rows), weights (E slices) and their gradients.
  Tensor xs = random_bf16({A, D}, pattern, "bench: xs"), h = random_bf16({A, F}, pattern, "bench: h");
  Tensor w_in = random_bf16({E, 2 * F, D}, pattern, "bench: w_in"), w_out = random_bf16({E, D, F}, pattern, "bench: w_out");
  Tensor dy_in = random_bf16({A, 2 * F}, pattern, "bench: dy_in"), dy_out = random_bf16({A, D}, pattern, "bench: dy_out");
  Tensor y_in = Tensor::empty({A, 2 * F}, DType::bf16, Device::cuda), y_out = Tensor::empty({A, D}, DType::bf16, Device::cuda);
  Tensor dxs = Tensor::empty({A, D}, DType::bf16, Device::cuda), dh = Tensor::empty({A, F}, DType::bf16, Device::cuda);
  Tensor dw_in = Tensor::empty({E, 2 * F, D}, DType::bf16, Device::cuda);
  Tensor dw_out = Tensor::empty({E, D, F}, DType::bf16, Device::cuda);
  cudaStream_t stream = cuda::stream();

  auto grouped_fwd = [&] {
    cuda::grouped_linear_forward(E, D, 2 * F, off, off_dev, bf(xs), bf(w_in), bf(y_in), stream);
    cuda::grouped_linear_forward(E, F, D, off, off_dev, bf(h), bf(w_out), bf(y_out), stream);
  };
  auto grouped_bwd = [&] {
    cuda::grouped_linear_backward_input(E, F, D, off, off_dev, bf(dy_out), bf(w_out), bf(dh), stream);
    cuda::grouped_linear_backward_weight(E, F, D, off, off_dev, bf(dy_out), bf(h), bf(dw_out), false, stream);
    cuda::grouped_linear_backward_input(E, D, 2 * F, off, off_dev, bf(dy_in), bf(w_in), bf(dxs), stream);
    cuda::grouped_linear_backward_weight(E, D, 2 * F, off, off_dev, bf(dy_in), bf(xs), bf(dw_in), false, stream);
  };
  // The same products as single GEMMs over all A rows (expert 0's weight slice stands in).
  auto dense_fwd = [&] {
    cuda::gemm(false, true, A, 2 * F, D, 1.f, bf(xs), bf(w_in), 0.f, bf(y_in), stream);
    cuda::gemm(false, true, A, D, F, 1.f, bf(h), bf(w_out), 0.f, bf(y_out), stream);
  };
  auto dense_bwd = [&] {
    cuda::gemm(false, false, A, F, D, 1.f, bf(dy_out), bf(w_out), 0.f, bf(dh), stream);
    cuda::gemm(true, false, D, F, A, 1.f, bf(dy_out), bf(h), 0.f, bf(dw_out), stream);
    cuda::gemm(false, false, A, D, 2 * F, 1.f, bf(dy_in), bf(w_in), 0.f, bf(dxs), stream);
    cuda::gemm(true, false, 2 * F, D, A, 1.f, bf(dy_in), bf(xs), 0.f, bf(dw_in), stream);
  };

  const double fwd_flops = 6.0 * A * D * F, bwd_flops = 2 * fwd_flops;
  auto tflops = [](double flops, double ms) { return flops / (ms * 1e-3) / 1e12; };
  BenchRow base;
  base.shape = fmt::format("{} (D={} E={} K={} F={})", s.name, D, E, s.K, F);
  base.rows = A;
  for (int e = 0; e < E; ++e) {
    const int g = offsets[size_t(e) + 1] - offsets[size_t(e)];
    base.min_group = e == 0 ? g : std::min(base.min_group, g);
    base.max_group = std::max(base.max_group, g);
  }
  base.dense_fwd_ms = median_ms(dense_fwd, o.iters, o.warmup);
  base.dense_bwd_ms = median_ms(dense_bwd, o.iters, o.warmup);
  base.dense_fwd_tflops = tflops(fwd_flops, base.dense_fwd_ms);
  base.dense_bwd_tflops = tflops(bwd_flops, base.dense_bwd_ms);

  std::vector<BenchRow> rows;
  const cuda::GroupedGemmPath saved = cuda::grouped_gemm_path();
  for (const std::string& path : o.paths) {
    cuda::set_grouped_gemm_path(path == "grouped" ? cuda::GroupedGemmPath::cublas_grouped
                                                  : cuda::GroupedGemmPath::lt_loop);
    BenchRow r = base;
    r.path = path == "grouped" ? "cublasGemmGroupedBatchedEx" : "cuBLASLt per expert";
    r.fwd_ms = median_ms(grouped_fwd, o.iters, o.warmup);
    r.bwd_ms = median_ms(grouped_bwd, o.iters, o.warmup);
    r.fwd_tflops = tflops(fwd_flops, r.fwd_ms);
    r.bwd_tflops = tflops(bwd_flops, r.bwd_ms);
    rows.push_back(r);
  }
  cuda::set_grouped_gemm_path(saved);
  return rows;
}

const std::vector<bench::Column> kColumns = {
    {"shape", "shape", 30, -1, true, true},
    {"path", "grouped path", 27, -1, true, true},
    {"rows", "", 0},
    {"min_group", "", 0},
    {"max_group", "", 0},
    {"groups", "groups", 11, -1, false},
    {"fwd_ms", "fwd ms", 8, 4, true, false, true},
    {"fwd_tflops", "TF/s", 6, 1},
    {"dense_fwd_ms", "", 0, 4},
    {"dense_fwd_tflops", "dense", 6, 1},
    {"fwd_ratio", "ratio", 6, 3},
    {"bwd_ms", "bwd ms", 8, 4, true, false, true},
    {"bwd_tflops", "TF/s", 6, 1},
    {"dense_bwd_ms", "", 0, 4},
    {"dense_bwd_tflops", "dense", 6, 1},
    {"bwd_ratio", "ratio", 6, 3},
};

nlohmann::json row_json(const BenchRow& r) {
  return {{"shape", r.shape},
          {"path", r.path},
          {"rows", r.rows},
          {"min_group", r.min_group},
          {"max_group", r.max_group},
          {"groups", fmt::format("{}-{}", r.min_group, r.max_group)},
          {"fwd_ms", r.fwd_ms},
          {"fwd_tflops", r.fwd_tflops},
          {"dense_fwd_ms", r.dense_fwd_ms},
          {"dense_fwd_tflops", r.dense_fwd_tflops},
          {"fwd_ratio", r.fwd_tflops / r.dense_fwd_tflops},
          {"bwd_ms", r.bwd_ms},
          {"bwd_tflops", r.bwd_tflops},
          {"dense_bwd_ms", r.dense_bwd_ms},
          {"dense_bwd_tflops", r.dense_bwd_tflops},
          {"bwd_ratio", r.bwd_tflops / r.dense_bwd_tflops}};
}

#endif  // HYLO_WITH_CUDA

}  // namespace

int run_bench_moe(const MoeBenchOptions& o) {
  std::vector<MoeShape> shapes;
  for (const std::string& name : o.shapes) shapes.push_back(find_shape(name));
#if !HYLO_WITH_CUDA
  HYLO_FAIL("bench moe: built without CUDA (configure with -DHYLO_CUDA=ON)");
#else
  const bench::BenchDevice dev(Rng{20261130, 7, 0}, kBench);

  std::printf("moe grouped-GEMM bench on %s: %d tokens, expert SwiGLU GEMMs (fwd 2, bwd 4 products), median of %d\n",
              dev.prop.name, o.tokens, o.iters);
  bench::Table table(kColumns);
  table.print_header();
  for (const MoeShape& s : shapes)
    for (const BenchRow& r : bench_shape(o, s, dev.pattern)) table.add(row_json(r));
  if (!o.json.empty())
    table.write_json(o.json, "moe", dev.prop.name,
                     {{"tokens", o.tokens},
                      {"iters", o.iters},
                      {"warmup", o.warmup},
                      {"timing", "CUDA events, median"},
                      {"flops", "fwd = 6*A*D*F (w_in D->2F, w_out F->D); bwd = 2*fwd (dX and dW); dense = the same "
                                "products with M = A in one GEMM each"}});
  return 0;
#endif
}

}  // namespace hylo
