#include "bench/cuda/bench_timing.h"

#include <algorithm>

#include "core/error.h"

namespace hylo::bench {

void cuda_ok(cudaError_t err, const char* bench, const char* what) {
  HYLO_CHECK(err == cudaSuccess, "{}: {}: {}", bench, what, cudaGetErrorString(err));
}

BenchDevice::BenchDevice(Rng rng, const char* bench) : pattern(size_t(1) << 20) {
  int device = 0;
  cuda_ok(cudaGetDevice(&device), bench, "no CUDA device");
  cuda_ok(cudaGetDeviceProperties(&prop, device), bench, "device properties");
  for (bf16& x : pattern) x = float_to_bf16(float(rng.normal()));
}

namespace {

// iters start/stop pairs, destroyed on every exit.
struct EventPairs {
  std::vector<cudaEvent_t> start, stop;
  EventPairs(int n, const char* bench) {
    start.reserve(size_t(n));
    stop.reserve(size_t(n));
    for (int i = 0; i < n; ++i) {
      cudaEvent_t a = nullptr, b = nullptr;
      cuda_ok(cudaEventCreate(&a), bench, "event");
      start.push_back(a);
      cuda_ok(cudaEventCreate(&b), bench, "event");
      stop.push_back(b);
    }
  }
  ~EventPairs() {
    for (cudaEvent_t e : start) cudaEventDestroy(e);
    for (cudaEvent_t e : stop) cudaEventDestroy(e);
  }
  EventPairs(const EventPairs&) = delete;
  EventPairs& operator=(const EventPairs&) = delete;
};

// Median of the recorded pairs' elapsed ms (the stream has been synchronised).
double median_elapsed_ms(const EventPairs& events, const char* bench) {
  std::vector<float> ms(events.start.size());
  for (size_t i = 0; i < ms.size(); ++i)
    cuda_ok(cudaEventElapsedTime(&ms[i], events.start[i], events.stop[i]), bench, "elapsed time");
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Records pair i of `events` around body(i) for every pair, each after an untimed before_each (if
// given); returns their median once the stream is done.
double time_pairs(const EventPairs& events, const std::function<void(int)>& body, const std::function<void()>& before_each,
                  cudaStream_t stream, const char* bench) {
  for (size_t i = 0; i < events.start.size(); ++i) {
    if (before_each) before_each();
    cuda_ok(cudaEventRecord(events.start[i], stream), bench, "event record");
    body(int(i));
    cuda_ok(cudaEventRecord(events.stop[i], stream), bench, "event record");
  }
  cuda_ok(cudaStreamSynchronize(stream), bench, "synchronize");
  return median_elapsed_ms(events, bench);
}

constexpr size_t kFlushBytes = size_t(256) << 20;  // do_bench's: above any GPU's L2

// do_bench's L2 flush buffer, allocated on first use and kept for the process (one GPU per
// process): a bench measures many shapes.
void* l2_flush_buffer(const char* bench) {
  static void* const buffer = [bench] {
    void* p = nullptr;
    cuda_ok(cudaMalloc(&p, kFlushBytes), bench, "L2 flush buffer");
    return p;
  }();
  return buffer;
}

}  // namespace

double median_gpu_ms(const std::function<void(int)>& body, int iters, int warmup, cudaStream_t stream,
                     const char* bench, const std::function<void()>& before_timed) {
  HYLO_CHECK(iters > 0, "{}: timing needs iters > 0, got {}", bench, iters);
  for (int i = 0; i < warmup; ++i) body(iters + i);
  EventPairs events(iters, bench);
  if (before_timed) before_timed();
  return time_pairs(events, body, {}, stream, bench);
}

double do_bench_ms(const std::function<void()>& body, double warmup_ms, double rep_ms, cudaStream_t stream,
                   const char* bench) {
  void* flush = l2_flush_buffer(bench);
  auto flush_l2 = [&] { cuda_ok(cudaMemsetAsync(flush, 0, kFlushBytes, stream), bench, "L2 flush"); };
  body();
  cuda_ok(cudaStreamSynchronize(stream), bench, "synchronize");
  constexpr int kEstimateCalls = 5;
  EventPairs estimate(1, bench);
  cuda_ok(cudaEventRecord(estimate.start[0], stream), bench, "event record");
  for (int i = 0; i < kEstimateCalls; ++i) {
    flush_l2();
    body();
  }
  cuda_ok(cudaEventRecord(estimate.stop[0], stream), bench, "event record");
  cuda_ok(cudaStreamSynchronize(stream), bench, "synchronize");
  float estimate_ms = 0;
  cuda_ok(cudaEventElapsedTime(&estimate_ms, estimate.start[0], estimate.stop[0]), bench, "elapsed time");
  const double per_call = std::max(double(estimate_ms) / kEstimateCalls, 1e-6);
  const int warmup = std::max(1, int(warmup_ms / per_call)), reps = std::max(1, int(rep_ms / per_call));
  for (int i = 0; i < warmup; ++i) body();
  return time_pairs(EventPairs(reps, bench), [&](int) { body(); }, flush_l2, stream, bench);
}

void fill_bf16(bf16* dst, size_t n, const std::vector<bf16>& pattern, size_t offset, cudaStream_t stream,
               const char* bench) {
  for (size_t done = 0; done < n;) {
    const size_t start = (offset + done) % pattern.size();
    const size_t count = std::min(n - done, pattern.size() - start);
    cuda_ok(cudaMemcpyAsync(dst + done, pattern.data() + start, count * sizeof(bf16), cudaMemcpyHostToDevice, stream),
            bench, "fill");
    done += count;
  }
  cuda_ok(cudaStreamSynchronize(stream), bench, "fill");
}

}  // namespace hylo::bench
