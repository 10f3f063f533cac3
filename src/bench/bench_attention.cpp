// `hylo bench attention`: CUDA events around each call, warm-up first, median of the timed calls.
// By default timed as triton's do_bench times the PyTorch peers (bench::do_bench_ms: 25 ms of
// warm-up, ~250 ms of calls, L2 flushed before each), so that the two sides' figures compare;
// --iters N times exactly N calls after --warmup calls instead (for profilers). Inputs are random
// bf16 (never zeros, which would hide indexing bugs), tiled from a 1 Mi-value pattern so that filling gigabytes costs no
// host time.
#include "bench/bench_json.h"
#include "bench/bench_mask_flags.h"
#include "cli/commands.h"
#include "cli/flags.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

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

struct BenchOptions : MaskBenchFlags {
  BenchOptions() : MaskBenchFlags(0, 3) {}  // iters 0: do_bench's time-based method
  std::vector<std::string> kinds{"pbb"};
  std::vector<int> Ts{4096}, hds{128};
  int B = 4;
};

BenchOptions parse_options(const std::vector<std::string>& args) {
  BenchOptions o;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& flag = args[i];
    const std::string& value = flag_value(args, i, "bench attention");
    if (o.take("bench attention", flag, value)) continue;
    if (flag == "--kind") {
      o.kinds = split_commas(value);
      for (const auto& k : o.kinds)
        HYLO_CHECK(k == "pbb" || k == "swa" || k == "full", "bench attention: --kind must be pbb, swa or full, got '{}'",
                   k);
    } else if (flag == "--T") {
      o.Ts = parse_int_list("bench attention", flag, value);
    } else if (flag == "--hd") {
      o.hds = parse_int_list("bench attention", flag, value);
    } else if (flag == "--B") {
      o.B = parse_positive_int("bench attention", flag, value);
    } else {
      HYLO_FAIL("bench attention: unknown flag '{}' (see --kind --block --bridge --window --T --hd --B --H --Hkv "
                "--iters --warmup --json)",
                flag);
    }
  }
  o.check("bench attention");
  return o;
}

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

struct BenchRow {
  std::string mask;
  int hd = 0, T = 0;
  int64_t pairs = 0;
  double fwd_ms = 0, bwd_ms = 0, fwdbwd_ms = 0;
  double fwd_tflops = 0, fwdbwd_tflops = 0, fwd_dense_tflops = 0, fwdbwd_dense_tflops = 0;
};

BenchRow bench_one(const BenchOptions& o, const std::string& kind, int hd, int T, const std::vector<bf16>& pattern,
                   cudaStream_t stream) {
  const AttnShape sh{o.B, T, o.H, o.Hkv, hd};
  const AttnMask mask = make_mask(kind, o);
  const size_t nq = size_t(o.B) * T * o.H * hd, nkv = size_t(o.B) * T * o.Hkv * hd;
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
  BenchRow row;
  row.mask = mask_label(kind, o);
  row.hd = hd;
  row.T = T;
  row.pairs = visited_pairs(mask, T);
  row.fwd_ms = median_ms(forward, o, stream);
  row.bwd_ms = median_ms(backward, o, stream);
  row.fwdbwd_ms = median_ms([&] {
    forward();
    backward();
  }, o, stream);
  const double fwd_flops = 4.0 * o.B * o.H * hd * double(row.pairs);
  const double dense_flops = 4.0 * o.B * o.H * hd * double(T) * T;
  row.fwd_tflops = fwd_flops / (row.fwd_ms * 1e-3) / 1e12;
  row.fwdbwd_tflops = 3.5 * fwd_flops / (row.fwdbwd_ms * 1e-3) / 1e12;
  row.fwd_dense_tflops = dense_flops / (row.fwd_ms * 1e-3) / 1e12;
  row.fwdbwd_dense_tflops = 3.5 * dense_flops / (row.fwdbwd_ms * 1e-3) / 1e12;
  return row;
}

void write_json(const std::string& path, const BenchOptions& o, const std::string& device,
                const std::vector<BenchRow>& rows) {
  BenchJson json{"attention", device, "",
                 fmt::format("{{\"B\": {}, \"H\": {}, \"Hkv\": {}, \"timing\": \"CUDA events, {}\", \"flops\": "
                             "\"fwd = 4*B*H*D*visited_pairs; fwd+bwd = 3.5*fwd; dense = same with T*T pairs\"}}",
                             o.B, o.H, o.Hkv, timing_label(o)),
                 {}};
  for (const BenchRow& r : rows)
    json.rows.push_back(fmt::format(
        "{{\"mask\": \"{}\", \"D\": {}, \"T\": {}, \"visited_pairs\": {}, \"fwd_ms\": {:.4f}, \"bwd_ms\": {:.4f}, "
        "\"fwdbwd_ms\": {:.4f}, \"fwd_tflops\": {:.1f}, \"fwdbwd_tflops\": {:.1f}, \"fwd_dense_tflops\": {:.1f}, "
        "\"fwdbwd_dense_tflops\": {:.1f}}}",
        r.mask, r.hd, r.T, r.pairs, r.fwd_ms, r.bwd_ms, r.fwdbwd_ms, r.fwd_tflops, r.fwdbwd_tflops,
        r.fwd_dense_tflops, r.fwdbwd_dense_tflops));
  write_bench_json(path, json);
}

#endif  // HYLO_WITH_CUDA

}  // namespace

int run_bench_attention(const std::vector<std::string>& args) {
  const BenchOptions o = parse_options(args);
#if !HYLO_WITH_CUDA
  HYLO_FAIL("bench attention: built without CUDA (configure with -DHYLO_CUDA=ON)");
#else
  const bench::BenchDevice dev(Rng{20261104, 7, 0}, kBench);
  cudaStream_t stream = nullptr;
  cuda_ok(cudaStreamCreate(&stream), "stream");

  std::printf("attention bench on %s: B=%d H=%d Hkv=%d, %s (TF/s count visited pairs; dense = T*T)\n",
              dev.prop.name, o.B, o.H, o.Hkv, timing_label(o).c_str());
  std::printf("%-14s %4s %6s %12s | %9s %7s %7s | %9s | %9s %7s %7s\n", "mask", "D", "T", "pairs", "fwd ms", "TF/s",
              "dense", "bwd ms", "f+b ms", "TF/s", "dense");
  std::vector<BenchRow> rows;
  for (int hd : o.hds)
    for (int T : o.Ts)
      for (const auto& kind : o.kinds) {
        const BenchRow r = bench_one(o, kind, hd, T, dev.pattern, stream);
        std::printf("%-14s %4d %6d %12lld | %9.3f %7.1f %7.1f | %9.3f | %9.3f %7.1f %7.1f\n", r.mask.c_str(), r.hd,
                    r.T, (long long)r.pairs, r.fwd_ms, r.fwd_tflops, r.fwd_dense_tflops, r.bwd_ms, r.fwdbwd_ms,
                    r.fwdbwd_tflops, r.fwdbwd_dense_tflops);
        std::fflush(stdout);
        rows.push_back(r);
      }
  cudaStreamDestroy(stream);
  if (!o.json.empty()) write_json(o.json, o, dev.prop.name, rows);
  return 0;
#endif
}

}  // namespace hylo
