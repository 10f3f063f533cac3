// What the CUDA benches (`hylo bench attention|moe|decode`) share: a return-code check, the device
// and a random host pattern, CUDA-event median timers (by call count, and do_bench's by time) and a
// bf16 fill from the pattern. `bench` ("bench moe") starts every error message. CUDA builds only
// (src/*/cuda/); the benches include this under HYLO_WITH_CUDA.
#pragma once
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <functional>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/rng.h"

namespace hylo::bench {

// Throws "<bench>: <what>: <CUDA error string>" unless err is cudaSuccess.
void cuda_ok(cudaError_t err, const char* bench, const char* what);

// n elements of T in device memory (at least one), freed with the array. A failed allocation throws
// "<Bench>: allocating <what> (<MiB> MiB): <CUDA error>; <Hint>" (a bench's hint: which flag to lower).
template <class T, const char* Bench, const char* Hint>
struct DeviceArray {
  T* ptr = nullptr;
  DeviceArray(size_t n, const char* what) {
    const cudaError_t err = cudaMalloc(reinterpret_cast<void**>(&ptr), std::max<size_t>(n, 1) * sizeof(T));
    HYLO_CHECK(err == cudaSuccess, "{}: allocating {} ({} MiB): {}; {}", Bench, what, n * sizeof(T) >> 20,
               cudaGetErrorString(err), Hint);
  }
  ~DeviceArray() { cudaFree(ptr); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
};

// The current device's properties, and 1 Mi random bf16 normals drawn from `rng`, which fill_bf16
// tiles over a bench's buffers (inputs are never zeros: kernels may shortcut work on zeros, and
// zeros hide indexing bugs).
struct BenchDevice {
  cudaDeviceProp prop{};
  std::vector<bf16> pattern;
  BenchDevice(Rng rng, const char* bench);
};

// Median ms of the timed calls body(0), ..., body(iters - 1), one CUDA event pair on `stream`
// around each. First `warmup` untimed calls body(iters), body(iters + 1), ...; then `before_timed`
// (if given) runs once just before the first timed call, e.g. to hold the stream so that all
// timed launches are queued before the GPU reaches them.
double median_gpu_ms(const std::function<void(int)>& body, int iters, int warmup, cudaStream_t stream,
                     const char* bench, const std::function<void()>& before_timed = {});

// triton.testing.do_bench's method, which the PyTorch peers' figures come from
// (shared/peers/torch_ref.py), so that both sides are timed alike: body's time estimated from 5
// calls, then untimed calls for warmup_ms, then about rep_ms of calls, each after a 256 MB memset
// (every call starts with a cold L2) and timed by its own event pair. Median ms.
double do_bench_ms(const std::function<void()>& body, double warmup_ms, double rep_ms, cudaStream_t stream,
                   const char* bench);

// dst[0, n) = pattern tiled from pattern[offset % pattern.size()] on; returns once the copies on
// `stream` are done.
void fill_bf16(bf16* dst, size_t n, const std::vector<bf16>& pattern, size_t offset, cudaStream_t stream,
               const char* bench);

}  // namespace hylo::bench
