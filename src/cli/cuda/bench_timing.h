// What the CUDA benches (`hylo bench attention|moe|decode`) share: a return-code check, a
// CUDA-event median timer and a bf16 fill from a random host pattern. `bench` ("bench moe")
// starts every error message. CUDA builds only (src/*/cuda/); the benches include this under
// HYLO_WITH_CUDA.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <vector>

#include "core/dtype.h"

namespace hylo::bench {

// Throws "<bench>: <what>: <CUDA error string>" unless err is cudaSuccess.
void cuda_ok(cudaError_t err, const char* bench, const char* what);

// Median ms of the timed calls body(0), ..., body(iters - 1), one CUDA event pair on `stream`
// around each. First `warmup` untimed calls body(iters), body(iters + 1), ...; then `before_timed`
// (if given) runs once just before the first timed call, e.g. to hold the stream so that all
// timed launches are queued before the GPU reaches them.
double median_gpu_ms(const std::function<void(int)>& body, int iters, int warmup, cudaStream_t stream,
                     const char* bench, const std::function<void()>& before_timed = {});

// dst[0, n) = pattern tiled from pattern[offset % pattern.size()] on; returns once the copies on
// `stream` are done.
void fill_bf16(bf16* dst, size_t n, const std::vector<bf16>& pattern, size_t offset, cudaStream_t stream,
               const char* bench);

}  // namespace hylo::bench
