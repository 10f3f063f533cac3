// What the bytes of a decode step cost by themselves (experiments/results/decode/LOG.md, "What the
// bytes alone cost"). Kernels that only read what a batch-64 hd128 H16 step reads:
// - per_head: decode's grid (1024 blocks of 128 threads, one (sequence, head) each). A block reads
//   the k and v rows of `keys` consecutive slots of its 512-slot cache with 8 or 16 loads of 16
//   bytes in flight per thread. It folds them by XOR and writes 16 bytes per warp.
// - flat: the same number of bytes, read as one contiguous range by 1056 blocks in a grid-stride
//   loop: the most DRAM-friendly order.
// Each is timed as `hylo bench decode` times a step: an event pair around each launch, all of them
// queued behind a GPU-side delay, median of 50. It is also timed as a run (512 launches under one
// event pair, per launch). Copies are rotated over >= 4x the L2.
// A fit T = F + k * keys through keys 128..512 gives the fixed part F and the rate k of a step that
// only moves its bytes. From them follows the PBB/SWA ratio such a step would have (272.375 mean
// live keys at b = 512, w = 128, against 512).
// A one-off probe, not part of the build (experiments/dev/README.md); its results:
// experiments/results/decode/decode_stream_h200.json. Build (the binary takes no arguments):
//   nvcc -O3 -std=c++20 -arch=sm_90 -o decode_stream experiments/dev/decode_stream_probe.cu
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                                      \
  do {                                                                                \
    cudaError_t err_ = (x);                                                           \
    if (err_ != cudaSuccess) {                                                        \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(err_)); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

constexpr int kBatch = 64, kHeads = 16, kDim = 128, kSlots = 512, kThreads = 128;
constexpr int kVecsPerRow = kDim / 8;  // 16-byte vectors per k or v row

__global__ void delay_kernel(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

__device__ __forceinline__ uint4 fold(uint4 a, uint4 b) { return make_uint4(a.x ^ b.x, a.y ^ b.y, a.z ^ b.z, a.w ^ b.w); }

__device__ __forceinline__ void store_warp(uint4 acc, uint4* out, size_t slot) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    acc.x ^= __shfl_xor_sync(0xffffffffu, acc.x, off);
    acc.y ^= __shfl_xor_sync(0xffffffffu, acc.y, off);
  }
  if (threadIdx.x % 32 == 0) out[slot] = acc;
}

// Block (h, b): vectors [0, keys * 16) of its k rows and of its v rows, InFlight of each per
// thread and batch of loads (4: decode_kernel's 128 KB in flight per SM at hd128; 8: twice that).
template <int kInFlight>
__global__ void __launch_bounds__(kThreads, 8) per_head_kernel(const uint4* k, const uint4* v, uint4* out, int keys) {
  const size_t head = size_t(blockIdx.z) * gridDim.y + blockIdx.y;
  const uint4 *kh = k + head * kSlots * kVecsPerRow, *vh = v + head * kSlots * kVecsPerRow;
  const int n = keys * kVecsPerRow;
  uint4 acc = make_uint4(0, 0, 0, 0);
  for (int base = 0; base < n; base += kThreads * kInFlight) {
    uint4 a[kInFlight], b[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int i = base + u * kThreads + threadIdx.x;
      a[u] = i < n ? __ldg(kh + i) : make_uint4(0, 0, 0, 0);
      b[u] = i < n ? __ldg(vh + i) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) acc = fold(acc, fold(a[u], b[u]));
  }
  store_warp(acc, out, head * (kThreads / 32) + threadIdx.x / 32);
}

// The same bytes as one contiguous range of 2 * B * H * keys * 16 vectors.
template <int kInFlight>
__global__ void __launch_bounds__(kThreads, 8) flat_kernel(const uint4* k, const uint4* v, uint4* out, int keys) {
  const size_t n = size_t(kBatch) * kHeads * keys * kVecsPerRow;  // per tensor
  uint4 acc = make_uint4(0, 0, 0, 0);
  const size_t stride = size_t(gridDim.x) * kThreads;
  for (size_t base = size_t(blockIdx.x) * kThreads + threadIdx.x; base < n; base += stride * kInFlight) {
    uint4 a[kInFlight], b[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const size_t i = base + u * stride;
      a[u] = i < n ? __ldg(k + i) : make_uint4(0, 0, 0, 0);
      b[u] = i < n ? __ldg(v + i) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) acc = fold(acc, fold(a[u], b[u]));
  }
  store_warp(acc, out, size_t(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32);
}

using Kernel = void (*)(const uint4*, const uint4*, uint4*, int);

struct Buffers {
  std::vector<uint4*> k, v;  // copies rotated so that each launch reads cold lines
  uint4* out;
};

float median(std::vector<float> x) {
  std::sort(x.begin(), x.end());
  return x[x.size() / 2];
}

struct Timing {
  float step_us, run_us;
};

Timing time_kernel(Kernel kernel, dim3 grid, int keys, const Buffers& buf, cudaStream_t s) {
  constexpr int kSteps = 50, kRun = 512;
  auto launch = [&](int i) {
    kernel<<<grid, kThreads, 0, s>>>(buf.k[i % buf.k.size()], buf.v[i % buf.v.size()], buf.out, keys);
  };
  std::vector<cudaEvent_t> ev(2 * kSteps);
  for (auto& e : ev) CHECK(cudaEventCreate(&e));
  for (int i = 0; i < 4; ++i) launch(i);
  delay_kernel<<<1, 1, 0, s>>>(300000);
  for (int i = 0; i < kSteps; ++i) {
    CHECK(cudaEventRecord(ev[2 * i], s));
    launch(i);
    CHECK(cudaEventRecord(ev[2 * i + 1], s));
  }
  CHECK(cudaStreamSynchronize(s));
  std::vector<float> step(kSteps);
  for (int i = 0; i < kSteps; ++i) CHECK(cudaEventElapsedTime(&step[i], ev[2 * i], ev[2 * i + 1]));
  std::vector<float> run(5);
  for (int r = 0; r < 5; ++r) {
    delay_kernel<<<1, 1, 0, s>>>(20000000);
    CHECK(cudaEventRecord(ev[0], s));
    for (int i = 0; i < kRun; ++i) launch(i);
    CHECK(cudaEventRecord(ev[1], s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaEventElapsedTime(&run[r], ev[0], ev[1]));
  }
  CHECK(cudaGetLastError());
  for (auto& e : ev) CHECK(cudaEventDestroy(e));
  return {1000.f * median(step), 1000.f * median(run) / kRun};
}

// Least-squares line t = F + k * keys.
void fit(const std::vector<int>& keys, const std::vector<float>& t, double& F, double& k) {
  double n = keys.size(), sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    sx += keys[i];
    sy += t[i];
    sxx += double(keys[i]) * keys[i];
    sxy += double(keys[i]) * t[i];
  }
  k = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  F = (sy - k * sx) / n;
}

int main() {
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  Buffers buf;
  const size_t bytes = size_t(kBatch) * kHeads * kSlots * kDim * 2;  // one cache tensor, 134 MB
  for (int i = 0; i < 4; ++i) {
    uint4 *k, *v;
    CHECK(cudaMalloc(&k, bytes));
    CHECK(cudaMalloc(&v, bytes));
    CHECK(cudaMemset(k, i + 1, bytes));
    CHECK(cudaMemset(v, i + 7, bytes));
    buf.k.push_back(k);
    buf.v.push_back(v);
  }
  CHECK(cudaMalloc(&buf.out, size_t(sms) * 8 * kThreads * sizeof(uint4) + kBatch * kHeads * 4 * sizeof(uint4)));
  const std::vector<int> keys = {128, 192, 256, 320, 384, 448, 512};
  struct Probe {
    const char* name;
    Kernel kernel;
    dim3 grid;
  };
  const Probe probes[] = {{"per_head x4", per_head_kernel<4>, dim3(1, kHeads, kBatch)},
                          {"per_head x8", per_head_kernel<8>, dim3(1, kHeads, kBatch)},
                          {"flat x8", flat_kernel<8>, dim3(unsigned(sms) * 8)}};
  std::printf("{\"probe\": \"decode_stream\", \"B\": %d, \"H\": %d, \"D\": %d, \"rows\": [\n", kBatch, kHeads, kDim);
  bool first = true;
  for (const Probe& p : probes) {
    std::vector<float> step, run;
    for (int n : keys) {
      const Timing t = time_kernel(p.kernel, p.grid, n, buf, s);
      step.push_back(t.step_us);
      run.push_back(t.run_us);
      const double gbps = 2.0 * kBatch * kHeads * n * kDim * 2 / (t.step_us * 1e3);
      std::printf("%s {\"kernel\": \"%s\", \"keys\": %d, \"step_us\": %.2f, \"run_us\": %.2f, \"step_GBps\": %.0f}\n",
                  first ? " " : ",", p.name, n, t.step_us, t.run_us, gbps);
      first = false;
    }
    double F, k, Fr, kr;
    fit(keys, step, F, k);
    fit(keys, run, Fr, kr);
    const double ratio = (F + 512 * k) / (F + 272.375 * k), ratio_run = (Fr + 512 * kr) / (Fr + 272.375 * kr);
    std::printf(", {\"kernel\": \"%s\", \"fit_step_F_us\": %.3f, \"fit_step_k_us\": %.5f, \"ratio_step\": %.3f, "
                "\"fit_run_F_us\": %.3f, \"fit_run_k_us\": %.5f, \"ratio_run\": %.3f}\n",
                p.name, F, k, ratio, Fr, kr, ratio_run);
  }
  std::printf("]}\n");
  return 0;
}
