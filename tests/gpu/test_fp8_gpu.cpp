// train.precision: fp8 on the GPU against its CPU emulation (src/ops/fp8_linear.cpp): the cast
// kernel's bytes, its transpose and amax equal the software codec's; each of the three FP8 GEMMs
// matches the CPU's on the same FP8 operands; a few FP8 training steps of a small model stay finite
// and close to bf16. Needs an sm_89+ GPU (FP8 tensor cores); on older ones the cases say so and pass.
#include <cuda_runtime.h>  // before gpu_test_util.h: its typed cudaMalloc(T**) overload
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "gpu_test_util.h"
#include "core/cuda/tensor_kernels.h"
#include "core/fp8.h"
#include "kernels/fp8/fp8.h"
#include "nn/transformer.h"
#include "ops/fp8_linear.h"
#include "optim/optimizer.h"

using namespace hylo;
using namespace hylo::test;

namespace {

bool fp8_gpu() {
  int device = 0, major = 0, minor = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (major * 10 + minor >= 89) return true;
  MESSAGE("sm_" << major << minor << " has no FP8 tensor cores: FP8 GPU checks skipped");
  return false;
}

// ||a - b|| / ||b|| over two tensors of one shape (any device, any float dtype).
double relative_error(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to(Device::cpu).to(DType::f32).to_vector<float>();
  const std::vector<float> y = b.to(Device::cpu).to(DType::f32).to_vector<float>();
  REQUIRE(x.size() == y.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < x.size(); ++i) diff += double(x[i] - y[i]) * (x[i] - y[i]), norm += double(y[i]) * y[i];
  return std::sqrt(diff / norm);
}

// A bf16-representable random matrix as the CPU's f32 tensor and the GPU's bf16 one.
struct Pair {
  Tensor cpu, gpu;
};
Pair random_pair(int64_t rows, int64_t cols, uint64_t seed, float scale) {
  const std::vector<float> v = to_float(to_bf16(random_floats(size_t(rows * cols), seed, scale)));
  Tensor cpu = Tensor::from_vector(v, {rows, cols});
  return {cpu, cpu.to(DType::bf16).to(Device::cuda)};
}

}  // namespace

TEST_CASE("fp8 cast kernel: bytes, transposed bytes, amax and scale inverse equal the software codec's") {
  if (!fp8_gpu()) return;
  for (const Fp8Format format : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    for (const auto& [R, C] : {std::pair<int64_t, int64_t>{100, 72}, {64, 128}, {33, 1}}) {
      CAPTURE(int(format));
      CAPTURE(R);
      CAPTURE(C);
      // Wide values (some beyond the format's range after scaling, to exercise saturation) and
      // tiny ones (subnormals).
      std::vector<float> host = to_float(to_bf16(random_floats(size_t(R * C), uint64_t(R * C), 3.0f)));
      host[0] = 1e-6f, host[size_t(R * C) / 2] = -2e-7f;
      float amax = 0;
      for (float v : host) amax = std::max(amax, std::fabs(v));
      const float scale = fp8_scale_for_amax(amax, format, 0) * 1.5f;  // 1.5: saturate the largest
      DeviceBuffer<bf16> x(to_bf16(host));
      DeviceBuffer<float> scale_dev(std::vector<float>{scale}), scale_inv(1), record(std::vector<float>{0.0f});
      DeviceBuffer<uint8_t> out(size_t(R * C)), out_t(size_t(R * C));
      cuda::fp8_cast_transpose(x.ptr, R, C, format, scale_dev.ptr, out.ptr, out_t.ptr, scale_inv.ptr, record.ptr,
                               cuda::stream());
      CUDA_OK(cudaStreamSynchronize(cuda::stream()));
      const std::vector<uint8_t> bytes = out.download(), bytes_t = out_t.download();
      int mismatches = 0;
      for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < C; ++c) {
          const uint8_t want = fp8_encode(host[size_t(r * C + c)] * scale, format);
          mismatches += bytes[size_t(r * C + c)] != want;
          mismatches += bytes_t[size_t(c * R + r)] != want;
        }
      CHECK(mismatches == 0);
      CHECK(record.download()[0] == amax);
      CHECK(scale_inv.download()[0] == 1.0f / scale);

      // Current scaling's pair of kernels: the amax, then the scale from it.
      DeviceBuffer<float> measured(std::vector<float>{0.0f, 0.0f});
      cuda::fp8_amax(x.ptr, R * C, measured.ptr, cuda::stream());
      cuda::fp8_scale_from_amax(measured.ptr, format, 0, measured.ptr + 1, cuda::stream());
      const std::vector<float> m = measured.download();
      CHECK(m[0] == amax);
      CHECK(m[1] == fp8_scale_for_amax(amax, format, 0));
    }
  }
}

TEST_CASE("fp8 GEMMs: forward, dx and dw on cuda match the CPU emulation on the same FP8 operands") {
  if (!fp8_gpu()) return;
  // Both sides cast the same bf16 values with the same scales (first step: each tensor's own
  // amax), so the FP8 operands are identical; what differs is the accumulation order and the
  // bf16 rounding of the GPU's outputs (~4e-3 relative).
  const double kBound = 1e-2;
  struct Shape3 {
    int N, in, out;
  };
  for (const Shape3 s : {Shape3{64, 128, 96}, Shape3{128, 64, 256}, Shape3{48, 32, 16}, Shape3{256, 384, 128}}) {
    for (const Fp8Format grad_format : {Fp8Format::e5m2, Fp8Format::e4m3}) {
      CAPTURE(s.N);
      CAPTURE(s.in);
      CAPTURE(s.out);
      CAPTURE(int(grad_format));
      Fp8Recipe recipe;
      recipe.grad_format = grad_format;
      Fp8State cpu_state(recipe, 1, Device::cpu), gpu_state(recipe, 1, Device::cuda);
      const Pair X = random_pair(s.N, s.in, 1, 1.0f), W = random_pair(s.out, s.in, 2, 0.05f),
                 dY = random_pair(s.N, s.out, 3, 1e-3f);
      Var x_cpu(X.cpu, true, "x"), w_cpu(W.cpu, true, "w"), x_gpu(X.gpu, true, "x"), w_gpu(W.gpu, true, "w");
      Var y_cpu = fp8_linear(x_cpu, w_cpu, cpu_state, 0), y_gpu = fp8_linear(x_gpu, w_gpu, gpu_state, 0);
      y_cpu.backward(dY.cpu);
      y_gpu.backward(dY.gpu);
      const double ey = relative_error(y_gpu.value(), y_cpu.value());
      const double edx = relative_error(x_gpu.grad(), x_cpu.grad());
      const double edw = relative_error(w_gpu.grad(), w_cpu.grad());
      MESSAGE("gpu vs cpu emulation: y " << ey << ", dx " << edx << ", dw " << edw);
      CHECK(ey < kBound);
      CHECK(edx < kBound);
      CHECK(edw < kBound);
      // The recorded amaxes agree too (the histories a checkpoint saves).
      cpu_state.roll();
      gpu_state.roll();
      CHECK(gpu_state.amax_history().to_vector<float>() == cpu_state.amax_history().to_vector<float>());
    }
  }
}

TEST_CASE("fp8 training on cuda: a few steps of a small hybrid stay finite and close to bf16") {
  if (!fp8_gpu()) return;
  ModelConfig c;
  c.vocab_size = 256;
  c.d_model = 128;
  c.n_layers = 2;
  c.n_heads = 2;  // head dim 64
  c.ffn_hidden = 256;
  c.pattern = "LG";
  c.local = {"pbb", 0, 32, 8};
  const int B = 2, T = 64, steps = 12;
  Rng rng{7, 0, 0};
  std::vector<int32_t> ids(size_t(B * T + 1));
  for (int32_t& id : ids) id = int32_t(rng.below(64));
  const Tensor inputs = Tensor::from_vector(std::vector<int32_t>(ids.begin(), ids.end() - 1), {B, T}).to(Device::cuda);
  const Tensor targets = Tensor::from_vector(std::vector<int32_t>(ids.begin() + 1, ids.end()), {B * T}).to(Device::cuda);
  auto train = [&](bool fp8) {
    Transformer m(c, 3);
    AdamW optimizer(m.parameters(), AdamWOptions{0.9, 0.95, 1e-8, 0.0}, Device::cuda);
    if (fp8) m.enable_fp8(Fp8Recipe{}, Device::cuda);
    std::vector<double> losses;
    for (int s = 0; s < steps; ++s) {
      optimizer.zero_grad();
      Var l = m.loss(inputs, targets, 256);
      losses.push_back(l.value().to(Device::cpu).to(DType::f64).to_vector<double>()[0]);
      l.backward();
      const double norm = optimizer.grad_norm();
      optimizer.step(3e-3, norm > 1 ? 1 / norm : 1.0);
      if (m.fp8()) m.fp8()->roll();
    }
    return losses;
  };
  const std::vector<double> bf16_losses = train(false), fp8_losses = train(true);
  for (int s = 0; s < steps; ++s) {
    CAPTURE(s);
    CHECK(std::isfinite(fp8_losses[size_t(s)]));
    // e4m3 rounds each operand by up to ~3.7% (the CPU test's measure), so a 12-step memorisation at
    // lr 3e-3 drifts from bf16's trajectory (5.02% at step 6 on an H100); a wrong scale or
    // transpose is off by far more.
    CHECK(std::fabs(fp8_losses[size_t(s)] - bf16_losses[size_t(s)]) < 0.10 * bf16_losses[size_t(s)]);
  }
  MESSAGE("final loss fp8 " << fp8_losses.back() << ", bf16 " << bf16_losses.back());
  CHECK(fp8_losses.back() < fp8_losses.front() - 0.5);
}
