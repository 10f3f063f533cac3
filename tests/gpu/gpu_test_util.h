// Helpers shared by the GPU op tests: device buffers filled from host vectors, outputs poisoned
// before every run (so an unwritten element shows up as NaN), and the relative error
// ||out - ref|| / ||ref|| over a whole tensor.
#pragma once
#include <cuda_runtime.h>  // the typed cudaMalloc overload lives here, not in cuda_runtime_api.h
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/rng.h"

namespace hylo::test {

#define CUDA_OK(call) REQUIRE((call) == cudaSuccess)

template <class T>
struct DeviceBuffer {
  T* ptr = nullptr;
  size_t count = 0;
  explicit DeviceBuffer(size_t n) : count(n) { CUDA_OK(cudaMalloc(&ptr, n * sizeof(T) + 16)); }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void upload(const std::vector<T>& host) {
    CUDA_OK(cudaMemcpy(ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(count);
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(host.data(), ptr, count * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  // 0xFF bytes: NaN for f32/bf16, so anything the kernel forgets to write fails the comparison.
  void poison() { CUDA_OK(cudaMemset(ptr, 0xFF, count * sizeof(T))); }
};

inline std::vector<float> random_floats(size_t n, uint64_t seed, float scale = 1.0f) {
  Rng rng{seed, 0, 0};
  std::vector<float> v(n);
  for (auto& x : v) x = float(rng.normal()) * scale;
  return v;
}

// bf16-rounded copies keep the CPU reference on exactly the inputs the GPU sees.
inline std::vector<bf16> to_bf16(const std::vector<float>& v) {
  std::vector<bf16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = float_to_bf16(v[i]);
  return out;
}
inline std::vector<float> to_float(const std::vector<bf16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_to_float(v[i]);
  return out;
}

template <class A, class B>
double relative_error(const std::vector<A>& out, const std::vector<B>& ref) {
  REQUIRE(out.size() == ref.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    double o = double(out[i]), r = double(ref[i]);
    if (!std::isfinite(o)) return INFINITY;
    num += (o - r) * (o - r);
    den += r * r;
  }
  return std::sqrt(num / (den > 0 ? den : 1e-300));
}
inline double relative_error(const std::vector<bf16>& out, const std::vector<float>& ref) {
  return relative_error(to_float(out), ref);
}

}  // namespace hylo::test
