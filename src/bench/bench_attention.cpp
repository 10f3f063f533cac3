// `hylo bench attention`: CUDA events around each call, warm-up first, median of the timed calls.
// By default timed as triton's do_bench times the PyTorch peers (bench::do_bench_ms: 25 ms of
// warm-up, ~250 ms of calls, L2 flushed before each), so that the two sides' figures compare;
// --iters N times exactly N calls after --warmup calls instead (for profilers). Inputs are random
// bf16 (never zeros, which would hide indexing bugs), tiled from a 1 Mi-value pattern so that filling gigabytes costs no
// host time.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "bench/bench_table.h"
#include "core/error.h"
#include "ops/cpu/attention.h"
#include "attn/mask.h"

#if HYLO_WITH_CUDA
#include <cuda_runtime_api.h>

#include "bench/cuda/bench_timing.h"
#include "core/dtype.h"
#include "core/rng.h"
#include "kernels/attention/attention.h"
#endif

namespace hylo {
namespace {

using BenchOptions = AttentionBenchOptions;

#if HYLO_WITH_CUDA

AttnMask make_mask(const std::string& kind, const BenchOptions& o) {
  if (kind == "swa") return AttnMask{MaskKind::swa, o.window, 0, 0};
  if (kind == "pbb") return AttnMask{MaskKind::pbb, 0, o.block, o.bridge};
  return AttnMask{MaskKind::full, 0, 0, 0};
}

std::string mask_label(const std::string& kind, const BenchOptions& o) {
  if (kind == "swa") return fmt::format("swa({})", o.window);
  if (kind == "pbb") return fmt::format("pbb({},{})", o.block, o.bridge);
  return "full";
}

constexpr char kBench[] = "bench attention";

void cuda_ok(cudaError_t err, const char* what) { bench::cuda_ok(err, kBench, what); }

constexpr char kAllocationHint[] = "try a smaller --B or --T";
template <class T>
using DeviceArray = bench::DeviceArray<T, kBench, kAllocationHint>;

// Median ms of body() on `stream`: do_bench's method, or o.iters calls after o.warmup.
double median_ms(const std::function<void()>& body, const BenchOptions& o, cudaStream_t stream) {
  if (o.iters == 0) return bench::do_bench_ms(body, 25.0, 250.0, stream, kBench);
  return bench::median_gpu_ms([&](int) { body(); }, o.iters, o.warmup, stream, kBench);
}

std::string timing_label(const BenchOptions& o) {
  if (o.iters == 0) return "do_bench median (25 ms warm-up, ~250 ms of calls, L2 flushed before each)";
  return fmt::format("median of {} calls after {} warm-up", o.iters, o.warmup);
}

const std::vector<bench::Column> kColumns = {
    {"mask", "mask", 14, -1, true, true},
    {"D", "D", 4},
    {"T", "T", 6},
    {"visited_pairs", "pairs", 12},
    {"fwd_ms", "fwd ms", 9, 4, true, false, true},
    {"fwd_tflops", "TF/s", 7, 1},
    {"fwd_dense_tflops", "dense", 7, 1},
    {"bwd_ms", "bwd ms", 9, 4, true, false, true},
    {"fwdbwd_ms", "f+b ms", 9, 4, true, false, true},
    {"fwdbwd_tflops", "TF/s", 7, 1},
    {"fwdbwd_dense_tflops", "dense", 7, 1},
};

nlohmann::json bench_one(const BenchOptions& o, const std::string& kind, int hd, int T, const std::vector<bf16>& pattern,
                   cudaStream_t stream) {
  const AttnShape sh{o.B, T, o.H, o.kv_heads(), hd};
  const AttnMask mask = make_mask(kind, o);
  const size_t nq = size_t(o.B) * T * o.H * hd, nkv = size_t(o.B) * T * o.kv_heads() * hd;
  DeviceArray<bf16> q(nq, "q"), k(nkv, "k"), v(nkv, "v"), out(nq, "out"), dout(nq, "dout"), dq(nq, "dq"),
      dk(nkv, "dk"), dv(nkv, "dv");
  DeviceArray<float> lse(size_t(o.B) * o.H * T, "lse");
  DeviceArray<unsigned char> work(cuda::attention_backward_workspace_bytes(sh), "workspace");
  // Random bf16 normals, the same 1 Mi-value pattern tiled over each buffer from a per-tensor offset.
  bench::fill_bf16(q.ptr, nq, pattern, 0, stream, kBench);
  bench::fill_bf16(k.ptr, nkv, pattern, 333331, stream, kBench);
  bench::fill_bf16(v.ptr, nkv, pattern, 666667, stream, kBench);
  bench::fill_bf16(dout.ptr, nq, pattern, 123457, stream, kBench);

  auto forward = [&] { cuda::attention_forward(sh, mask, q.ptr, k.ptr, v.ptr, out.ptr, lse.ptr, stream); };
  auto backward = [&] {
    cuda::attention_backward(sh, mask, q.ptr, k.ptr, v.ptr, out.ptr, lse.ptr, dout.ptr, dq.ptr, dk.ptr, dv.ptr,
                             work.ptr, stream);
  };
  const int64_t pairs = visited_pairs(mask, T);
  const double fwd_ms = median_ms(forward, o, stream);
  const double bwd_ms = median_ms(backward, o, stream);
  const double fwdbwd_ms = median_ms([&] {
    forward();
    backward();
  }, o, stream);
  const double fwd_flops = 4.0 * o.B * o.H * hd * double(pairs);
  const double dense_flops = 4.0 * o.B * o.H * hd * double(T) * T;
  return {{"mask", mask_label(kind, o)},
          {"D", hd},
          {"T", T},
          {"visited_pairs", pairs},
          {"fwd_ms", fwd_ms},
          {"bwd_ms", bwd_ms},
          {"fwdbwd_ms", fwdbwd_ms},
          {"fwd_tflops", fwd_flops / (fwd_ms * 1e-3) / 1e12},
          {"fwdbwd_tflops", 3.5 * fwd_flops / (fwdbwd_ms * 1e-3) / 1e12},
          {"fwd_dense_tflops", dense_flops / (fwd_ms * 1e-3) / 1e12},
          {"fwdbwd_dense_tflops", 3.5 * dense_flops / (fwdbwd_ms * 1e-3) / 1e12}};
}

#endif  // HYLO_WITH_CUDA

}  // namespace

int run_bench_attention(const AttentionBenchOptions& o) {
  check_mask_options(o, "bench attention");
#if !HYLO_WITH_CUDA
  HYLO_FAIL("bench attention: built without CUDA (configure with -DHYLO_CUDA=ON)");
#else
  const bench::BenchDevice dev(Rng{20261104, 7, 0}, kBench);
  cudaStream_t stream = nullptr;
  cuda_ok(cudaStreamCreate(&stream), "stream");

  std::printf("attention bench on %s: B=%d H=%d Hkv=%d, %s (TF/s count visited pairs; dense = T*T)\n",
              dev.prop.name, o.B, o.H, o.kv_heads(), timing_label(o).c_str());
  bench::Table table(kColumns);
  table.print_header();
  for (int hd : o.hds)
    for (int T : o.Ts)
      for (const auto& kind : o.kinds) table.add(bench_one(o, kind, hd, T, dev.pattern, stream));
  cudaStreamDestroy(stream);
  if (!o.json.empty())
    table.write_json(o.json, "attention", dev.prop.name,
                     {{"B", o.B},
                      {"H", o.H},
                      {"Hkv", o.kv_heads()},
                      {"timing", "CUDA events, " + timing_label(o)},
                      {"flops", "fwd = 4*B*H*D*visited_pairs; fwd+bwd = 3.5*fwd; dense = same with T*T pairs"}});
  return 0;
#endif
}

}  // namespace hylo
