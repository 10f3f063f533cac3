// `hylo bench decode`. Timing: CUDA events around each step's kernels (decode + split-KV combine),
// warm-up first, then a GPU-side delay while all timed steps are queued (else small steps are timed
// at the host's launch rate), median per setting. The caches are cold as in a real model (other layers' weights
// pass through L2 between one layer's steps): each cache is allocated in several copies, and
// consecutive timed steps rotate through them so that the live bytes of the rotation exceed 4x
// the L2 size; no flush is needed between steps (a memset flush would leave dirty lines that the
// timed kernel then pays to write back). Inputs are random bf16, never zeros (a
// kernel may skip or shortcut work on zeros, and zero inputs hide indexing bugs).
// Second figure, "run": whole runs of consecutive steps (PBB every block offset, SWA every ring
// position) under one event pair, the tokens/s a decode loop sustains: no event records between
// steps; the stream is held until the host has queued them all (decode_run_us).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "bench/bench_table.h"
#include "core/error.h"
#include "nn/kv_cache.h"
#include "ops/cpu/decode_attention.h"

#if HYLO_WITH_CUDA
#include <cuda_runtime_api.h>

#include "bench/cuda/bench_timing.h"
#include "core/dtype.h"
#include "core/rng.h"
#include "kernels/decode/decode.h"
#endif

namespace hylo {
namespace {

using DecodeOptions = DecodeBenchOptions;

#if HYLO_WITH_CUDA

constexpr char kBench[] = "bench decode";

void cuda_ok(cudaError_t err, const char* what) { bench::cuda_ok(err, kBench, what); }

constexpr char kAllocationHint[] = "try a smaller --batch";
template <class T>
using DeviceArray = bench::DeviceArray<T, kBench, kAllocationHint>;

// `copies` copies of one layer's k and v cache (B, Hkv, S, D), random bf16.
struct CacheCopies {
  DecodeShape shape;
  int copies;
  size_t elems;  // per tensor per copy
  DeviceArray<bf16> k, v;
  CacheCopies(const DecodeShape& s, int n, const std::vector<bf16>& pattern, cudaStream_t stream)
      : shape(s), copies(n), elems(size_t(s.B) * s.Hkv * s.slots * s.D), k(elems * n, "k cache"),
        v(elems * n, "v cache") {
    for (bf16* dst : {k.ptr, v.ptr}) {
      bench::fill_bf16(dst, elems, pattern, dst == v.ptr ? 333331 : 0, stream, kBench);  // copy 0, tiled
      for (int i = 1; i < n; ++i)
        cuda_ok(cudaMemcpy(dst + i * elems, dst, elems * sizeof(bf16), cudaMemcpyDeviceToDevice), "fill copies");
    }
  }
  bf16* k_at(int i) const { return k.ptr + size_t(i % copies) * elems; }
  bf16* v_at(int i) const { return v.ptr + size_t(i % copies) * elems; }
  size_t allocated_bytes() const { return 2 * elems * sizeof(bf16); }
};

// Copies needed so that rotating through them reads 4x the L2 size of live bytes.
int rotation_copies(size_t min_live_bytes, size_t l2_bytes) {
  return int(std::clamp<size_t>((4 * l2_bytes + min_live_bytes - 1) / std::max<size_t>(min_live_bytes, 1), 1, 256));
}

// Median µs of launch(i), i = 0, 1, ... (the rotation index), after `warmup` untimed calls. The
// stream is held for `hold_us` first (by default long enough for a few launches per timed call)
// so that all timed launches are queued before the GPU reaches them: small steps are otherwise
// timed at the host's launch rate.
double median_us(const std::function<void(int)>& launch, int iters, int warmup, cudaStream_t stream,
                 int hold_us = 0) {
  if (hold_us == 0) hold_us = 50 + 25 * iters;
  const auto hold = [&] { cuda::stream_delay(stream, hold_us); };
  return 1e3 * bench::median_gpu_ms(launch, iters, warmup, stream, kBench, hold);
}

// µs per step of `steps` consecutive decode steps step(0), ..., step(steps - 1) under one event
// pair, as a decode loop issues them: no event between steps, so each step's dependent launch can
// start its first loads during the previous step's tail. Median over iters runs; run k's steps are
// step(k * steps + j), so the rotation over cache copies continues from run to run. Each run is
// queued on its own behind a hold that covers the host issuing it at up to 5 µs per step, so that
// steps shorter than a launch (the floor's empty kernel) are timed on the GPU too.
double decode_run_us(const std::function<void(int)>& step, int steps, const DecodeOptions& o, cudaStream_t stream) {
  std::vector<double> runs;
  for (int k = 0; k < o.iters; ++k) {
    const auto run_k = [&](int) {
      for (int j = 0; j < steps; ++j) step(k * steps + j);
    };
    runs.push_back(median_us(run_k, 1, k == 0 ? o.warmup : 0, stream, 50 + 5 * steps) / steps);
  }
  std::nth_element(runs.begin(), runs.begin() + runs.size() / 2, runs.end());
  return runs[runs.size() / 2];
}

struct DecodeRow {
  int batch = 0, hd = 0;
  double pbb_us = 0, pbb_avg_keys = 0, swa_us = 0, lin_core_us = 0, lin_move_us = 0, lin_us = 0;
  double pbb_us_min = 0, pbb_us_max = 0;
  double pbb_run_us = 0, swa_run_us = 0;  // per step, consecutive steps back to back (see decode_run_us)
  double floor_us = 0, floor_run_us = 0;  // an empty kernel on the step's grid (decode_launch_floor)
  std::vector<double> pbb_us_bins;  // 16 equal bins of block offsets, mean of each
  size_t pbb_bytes = 0, swa_bytes = 0, lin_bytes = 0;  // allocated KV per layer
  double pbb_gbps = 0, swa_gbps = 0, lin_core_gbps = 0;
  int splits_pbb_max = 1, splits_swa = 1;
  double ratio() const { return swa_us / pbb_us; }
  double run_ratio() const { return swa_run_us / pbb_run_us; }
  // PBB/SWA if a step cost only `floor` plus its live keys at the rate per key that the two
  // measured means imply: what any kernel can reach with this launch floor.
  double ratio_bound(double floor, double pbb, double swa, int W) const {
    if (W == pbb_avg_keys) return 1.0;  // as many keys: no gain to bound
    const double per_key = (swa - pbb) / (W - pbb_avg_keys);
    return (floor + per_key * W) / (floor + per_key * pbb_avg_keys);
  }
};

DecodeRow bench_one(const DecodeOptions& o, int B, int hd, const std::vector<bf16>& pattern, size_t l2_bytes,
                    cudaStream_t stream) {
  const int b = o.block, w = o.bridge, W = o.window;
  // Caches laid out as nn/kv_cache.h stores them (rows per (sequence, head): kv_row_stride).
  const int Hkv = o.kv_heads();
  const DecodeShape pbb_sh{B, o.H, Hkv, hd, kv_row_stride(b)}, ring_sh{B, o.H, Hkv, hd, kv_row_stride(W)},
      lin_sh{B, o.H, Hkv, hd, kv_row_stride(2 * W)};
  const size_t row_bytes = size_t(B) * Hkv * hd * 2 * 2;  // one key position: k and v, every sequence and head
  CacheCopies pbb(pbb_sh, rotation_copies(row_bytes * std::min(w, b), l2_bytes), pattern, stream);
  CacheCopies ring(ring_sh, rotation_copies(row_bytes * W, l2_bytes), pattern, stream);
  CacheCopies lin(lin_sh, rotation_copies(row_bytes * W, l2_bytes), pattern, stream);
  const size_t nq = size_t(B) * o.H * hd;
  DeviceArray<bf16> q(nq, "q"), out(nq, "out");
  bench::fill_bf16(q.ptr, nq, pattern, 0, stream, kBench);
  const size_t work_bytes =
      std::max({cuda::decode_workspace_bytes(pbb_sh, b), cuda::decode_workspace_bytes(ring_sh, W),
                cuda::decode_workspace_bytes(lin_sh, W)});
  DeviceArray<unsigned char> work(work_bytes, "workspace");

  // One decode step on rotation copy i of cache c.
  auto run = [&](const CacheCopies& c, const LiveSlots& live, int i) {
    cuda::decode_attention_forward(c.shape, live, q.ptr, c.k_at(i), c.v_at(i), out.ptr, work.ptr, work_bytes, stream);
  };
  DecodeRow row;
  row.batch = B;
  row.hd = hd;
  row.pbb_bytes = pbb.allocated_bytes();
  row.swa_bytes = ring.allocated_bytes();
  row.lin_bytes = lin.allocated_bytes();

  // Flash-PBB: every block offset r, in a block that has a predecessor (t = b + r).
  double sum_us = 0, sum_keys = 0;
  row.pbb_us_min = 1e30;
  std::vector<int> bin_count(16, 0);
  row.pbb_us_bins.assign(16, 0.0);
  for (int r = 0; r < b; ++r) {
    const LiveSlots live = pbb_live_slots(int64_t(b) + r, b, w);
    const double us = median_us([&](int i) { run(pbb, live, i); }, o.iters, o.warmup, stream);
    sum_us += us;
    sum_keys += live.keys();
    row.pbb_us_min = std::min(row.pbb_us_min, us);
    row.pbb_us_max = std::max(row.pbb_us_max, us);
    row.pbb_us_bins[size_t(r) * 16 / b] += us;
    ++bin_count[size_t(r) * 16 / b];
    row.splits_pbb_max = std::max(row.splits_pbb_max, cuda::decode_num_splits(pbb_sh, live.keys()));
  }
  for (int i = 0; i < 16; ++i) row.pbb_us_bins[size_t(i)] /= std::max(1, bin_count[size_t(i)]);
  row.pbb_us = sum_us / b;
  row.pbb_avg_keys = sum_keys / b;
  row.pbb_gbps = row_bytes * row.pbb_avg_keys / (row.pbb_us * 1e-6) / 1e9;

  // SWA ring: W keys every step, split into two ranges at 8 positions of the ring.
  double ring_us = 0;
  for (int i = 0; i < 8; ++i) {
    const LiveSlots live = ring_live_slots(int64_t(W) + int64_t(W) * i / 8, W);
    ring_us += median_us([&](int i) { run(ring, live, i); }, o.iters, o.warmup, stream) / 8;
  }
  row.swa_us = ring_us;
  row.swa_gbps = row_bytes * W / (row.swa_us * 1e-6) / 1e9;
  row.splits_swa = cuda::decode_num_splits(ring_sh, W);

  // Linear SWA: one range of W keys starting at 8 positions of [0, W], plus the compaction every
  // W + 1 steps (W - 1 rows of k and v moved).
  double lin_us = 0;
  for (int i = 0; i < 8; ++i) {
    const int lo = W * i / 7;
    const LiveSlots live{{}, {lo, lo + W}};
    lin_us += median_us([&](int i) { run(lin, live, i); }, o.iters, o.warmup, stream) / 8;
  }
  row.lin_core_us = lin_us;
  row.lin_core_gbps = row_bytes * W / (row.lin_core_us * 1e-6) / 1e9;
  const int period = KvSlotMap::swa_linear(W).compaction_period();
  if (W > 1)
    row.lin_move_us = median_us(
        [&](int i) { cuda::kv_cache_move(lin_sh, W + 1, 0, W - 1, lin.k_at(i), lin.v_at(i), stream); }, o.iters,
        o.warmup, stream);
  row.lin_us = row.lin_core_us + row.lin_move_us / period;

  row.pbb_run_us = decode_run_us([&](int i) { run(pbb, pbb_live_slots(int64_t(b) + i % b, b, w), i); }, b, o, stream);
  row.swa_run_us = decode_run_us([&](int i) { run(ring, ring_live_slots(int64_t(W) + i % W, W), i); }, W, o, stream);
  const auto floor_step = [&](int) { cuda::decode_launch_floor(pbb_sh, stream); };
  row.floor_us = median_us(floor_step, o.iters, o.warmup, stream);
  row.floor_run_us = decode_run_us(floor_step, W, o, stream);
  return row;
}

double copy_rate_tbps(cudaStream_t stream) {
  const size_t bytes = size_t(1) << 30;
  DeviceArray<unsigned char> a(bytes, "copy src"), b(bytes, "copy dst");
  cuda_ok(cudaMemset(a.ptr, 1, bytes), "memset");
  const double us = median_us(
      [&](int) { cuda_ok(cudaMemcpyAsync(b.ptr, a.ptr, bytes, cudaMemcpyDeviceToDevice, stream), "copy"); }, 5, 2,
      stream);
  return 2.0 * bytes / (us * 1e-6) / 1e12;
}

// The table shows the step costs, their ratio, the run and floor figures and the KV sizes; the
// JSON has every field.
const std::vector<bench::Column> kColumns = {
    {"batch", "batch", 5},
    {"D", "D", 4},
    {"pbb_us", "pbb us", 8, 2, true, false, true},
    {"pbb_us_min", "", 0, 2},
    {"pbb_us_max", "", 0, 2},
    {"pbb_avg_keys", "", 0, 3},
    {"swa_us", "swa us", 8, 2},
    {"swa_linear_us", "lin us", 8, 2},
    {"swa_linear_core_us", "", 0, 2},
    {"swa_linear_compaction_us", "", 0, 2},
    {"pbb_tok_s", "pbb tok/s", 10, 0, true, false, true},
    {"swa_tok_s", "swa tok/s", 10, 0},
    {"swa_linear_tok_s", "lin tok/s", 10, 0},
    {"ratio_pbb_swa", "pbb/swa", 7, 3, true, false, true},
    {"pbb_run_us", "run pbb", 8, 2, true, false, true},
    {"swa_run_us", "run swa", 8, 2},
    {"ratio_run", "run p/s", 7, 3},
    {"kv_pbb", "KV pbb", 8, -1, false, false, true},
    {"kv_swa", "KV swa", 8, -1, false},
    {"kv_lin", "KV lin", 8, -1, false},
    {"kv_bytes_pbb", "", 0},
    {"kv_bytes_swa", "", 0},
    {"kv_bytes_swa_linear", "", 0},
    {"pbb_GBps", "pbb GB/s", 8, 0, true, false, true},
    {"swa_GBps", "swa GB/s", 8, 0},
    {"swa_linear_core_GBps", "", 0, 0},
    {"pbb_pct_copy", "%pbb", 5, 0, false, false, true},
    {"swa_pct_copy", "%swa", 5, 0, false},
    {"splits_pbb_max", "", 0},
    {"splits_swa", "", 0},
    {"pbb_us_by_r16", "", 0, 2},
    {"floor_us", "floor", 6, 2, true, false, true},
    {"ratio_bound", "bound", 6, 3},
    {"floor_run_us", "run flr", 7, 2},
    {"ratio_run_bound", "run bnd", 7, 3},
};

nlohmann::json row_json(const DecodeRow& r, const DecodeOptions& o, double copy_tbps) {
  auto mib = [](size_t bytes) { return fmt::format("{:.0f}MiB", bytes / 1048576.0); };
  return {{"batch", r.batch},
          {"D", r.hd},
          {"pbb_us", r.pbb_us},
          {"pbb_us_min", r.pbb_us_min},
          {"pbb_us_max", r.pbb_us_max},
          {"pbb_avg_keys", r.pbb_avg_keys},
          {"swa_us", r.swa_us},
          {"swa_linear_us", r.lin_us},
          {"swa_linear_core_us", r.lin_core_us},
          {"swa_linear_compaction_us", r.lin_move_us},
          {"pbb_tok_s", r.batch / (r.pbb_us * 1e-6)},
          {"swa_tok_s", r.batch / (r.swa_us * 1e-6)},
          {"swa_linear_tok_s", r.batch / (r.lin_us * 1e-6)},
          {"ratio_pbb_swa", r.ratio()},
          {"kv_pbb", mib(r.pbb_bytes)},
          {"kv_swa", mib(r.swa_bytes)},
          {"kv_lin", mib(r.lin_bytes)},
          {"kv_bytes_pbb", r.pbb_bytes},
          {"kv_bytes_swa", r.swa_bytes},
          {"kv_bytes_swa_linear", r.lin_bytes},
          {"pbb_GBps", r.pbb_gbps},
          {"swa_GBps", r.swa_gbps},
          {"swa_linear_core_GBps", r.lin_core_gbps},
          {"pbb_pct_copy", 100 * r.pbb_gbps / (copy_tbps * 1e3)},
          {"swa_pct_copy", 100 * r.swa_gbps / (copy_tbps * 1e3)},
          {"splits_pbb_max", r.splits_pbb_max},
          {"splits_swa", r.splits_swa},
          {"pbb_us_by_r16", r.pbb_us_bins},
          {"pbb_run_us", r.pbb_run_us},
          {"swa_run_us", r.swa_run_us},
          {"ratio_run", r.run_ratio()},
          {"floor_us", r.floor_us},
          {"floor_run_us", r.floor_run_us},
          {"ratio_bound", r.ratio_bound(r.floor_us, r.pbb_us, r.swa_us, o.window)},
          {"ratio_run_bound", r.ratio_bound(r.floor_run_us, r.pbb_run_us, r.swa_run_us, o.window)}};
}

#endif  // HYLO_WITH_CUDA

}  // namespace

int run_bench_decode(const DecodeBenchOptions& o) {
  check_mask_options(o, "bench decode");
#if !HYLO_WITH_CUDA
  HYLO_FAIL("bench decode: built without CUDA (configure with -DHYLO_CUDA=ON)");
#else
  for (int hd : o.hds)
    HYLO_CHECK(cuda::decode_supports_head_dim(hd), "bench decode: --hd {} not supported (64 or 128)", hd);
  const bench::BenchDevice dev(Rng{20261130, 11, 0}, kBench);
  cudaStream_t stream = nullptr;
  cuda_ok(cudaStreamCreate(&stream), "stream");
  const double copy_tbps = copy_rate_tbps(stream);

  std::printf("decode attention core, one layer, H=%d Hkv=%d, %s: pbb(b=%d, w=%d) mean over all %d offsets, swa "
              "ring W=%d, swa linear 2W; median of %d; D2D copy %.2f TB/s\n",
              o.H, o.kv_heads(), dev.prop.name, o.block, o.bridge, o.block, o.window, o.iters, copy_tbps);
  bench::Table table(kColumns);
  table.print_header();
  for (int B : o.batches)
    for (int hd : o.hds)
      table.add(row_json(bench_one(o, B, hd, dev.pattern, size_t(dev.prop.l2CacheSize), stream), o, copy_tbps));
  std::printf("(%% = live KV read rate / the D2D copy rate above, read + write; lin = linear SWA incl. compaction "
              "every W+1 steps; run = per step of b (pbb) or W (swa) consecutive steps under one event pair; floor = "
              "an empty kernel on the step's grid; bound = pbb/swa if a step cost the floor plus its keys at the "
              "measured rate per key)\n");
  cudaStreamDestroy(stream);
  if (!o.json.empty())
    table.write_json(
        o.json, "decode", dev.prop.name,
        {{"H", o.H},
         {"Hkv", o.kv_heads()},
         {"pbb_b", o.block},
         {"pbb_w", o.bridge},
         {"swa_W", o.window},
         {"iters", o.iters},
         {"warmup", o.warmup},
         {"dtype", "bf16 cache, fp32 softmax"},
         {"timing", "CUDA events per step (decode + split combine), median; launches queued behind a GPU-side delay; "
                    "caches rotated over copies holding >= 4x L2 of live bytes"},
         {"run", "per step of a run of consecutive steps (pbb: all b offsets, swa: all W ring positions) under one "
                 "event pair, median of iters runs"},
         {"pbb", "mean over all b block offsets at t = b + r"},
         {"swa_linear", "core (W keys) + compaction (W-1 rows) / (W+1)"},
         {"gbps", "live k+v bytes read / step time"}},
        {{"copy_TBps", std::round(copy_tbps * 1e3) / 1e3}});
  return 0;
#endif
}

}  // namespace hylo
