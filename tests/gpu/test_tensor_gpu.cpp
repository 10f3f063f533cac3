// Tensor's own device primitives (fill, add_, cast, copies) against the same operations on the
// CPU, on random data, through both the 16-byte vector path and the scalar fallback.
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <cstring>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"
#include "gpu_test_util.h"

using namespace hylo;

namespace {
Tensor random_tensor(int64_t n, uint64_t seed) {
  return Tensor::from_vector(test::random_floats(size_t(n), seed), {n});
}
}  // namespace

TEST_CASE("tensor primitives on cuda match the cpu: add_ (vector and scalar paths), cast, fill") {
  for (int64_t n : {int64_t(8), int64_t(4096), int64_t(1000003)}) {
    for (int64_t offset : {int64_t(0), int64_t(1)}) {  // offset 1: misaligned bf16 view -> scalar path
      CAPTURE(n);
      CAPTURE(offset);
      Tensor a = random_tensor(n + offset, 1 + uint64_t(n)).to(DType::bf16);
      Tensor b = random_tensor(n + offset, 2 + uint64_t(n)).to(DType::bf16);
      Tensor a_view = a.slice(0, offset, n + offset), b_view = b.slice(0, offset, n + offset);
      // CPU reference in fp32 on the same bf16 inputs, rounded once at the end as the kernel does.
      Tensor ref = a_view.to(DType::f32).contiguous();
      ref.add_(b_view.to(DType::f32).contiguous(), -0.75);
      Tensor dev_a = a.to(Device::cuda), dev_b = b.to(Device::cuda);
      Tensor dev_view = dev_a.slice(0, offset, n + offset);
      dev_view.add_(dev_b.slice(0, offset, n + offset), -0.75);
      const std::vector<float> got = dev_a.to(Device::cpu).slice(0, offset, n + offset).contiguous().to(DType::f32).to_vector<float>();
      CHECK(test::relative_error(got, ref.to(DType::bf16).to(DType::f32).to_vector<float>()) < 1e-2);
    }
  }
  Tensor x = random_tensor(777, 5);
  Tensor round_trip = x.to(Device::cuda).to(DType::bf16).to(DType::f32).to(Device::cpu);
  CHECK(round_trip.to_vector<float>() == x.to(DType::bf16).to(DType::f32).to_vector<float>());  // same rounding
  Tensor filled = Tensor::empty({1001}, DType::bf16, Device::cuda);
  filled.fill_(2.5);
  for (float v : filled.to(DType::f32).to_vector<float>()) CHECK(v == 2.5f);
}

TEST_CASE("strided cuda copies (contiguous() and copy_from into a strided view) equal the cpu's, byte for byte") {
  // (B, T, H, D) -> (T, B, H, D) as prefill hands k and v to the caches; a slice along T as it takes
  // the last position; a transpose of the two inner dims, where no run of elements is contiguous;
  // slices whose dims the kernel merges, down to a single run.
  const Tensor x = random_tensor(3 * 5 * 4 * 7, 11).view({3, 5, 4, 7});
  for (DType dtype : {DType::f32, DType::bf16, DType::f64, DType::u8}) {
    CAPTURE(dtype_name(dtype));
    std::vector<uint8_t> codes(size_t(x.numel()));  // 0..255, as FP8 codes are
    for (size_t i = 0; i < codes.size(); ++i) codes[i] = uint8_t(i * 37);
    const Tensor host = dtype == DType::u8 ? Tensor::from_vector(codes, x.shape()) : x.to(dtype);
    const Tensor dev = host.to(Device::cuda);
    auto views_of = [](const Tensor& t) {
      return std::vector<Tensor>{t.transpose(0, 1), t.slice(1, 4, 5), t.transpose(2, 3).slice(0, 1, 3),
                                 t.slice(2, 1, 3),  // the outer dims merge, the inner two too
                                 t.slice(0, 1, 2).slice(1, 2, 3).slice(2, 3, 4).slice(3, 4, 6)};  // one run
    };
    const std::vector<Tensor> host_views = views_of(host), dev_views = views_of(dev);
    for (size_t k = 0; k < host_views.size(); ++k) {
      const Tensor &h = host_views[k], &d = dev_views[k];
      CAPTURE(shape_str(h.shape()));
      REQUIRE_FALSE(d.is_contiguous());
      const Tensor want = h.contiguous(), got = d.contiguous().to(Device::cpu);
      REQUIRE(got.shape() == want.shape());
      CHECK(std::memcmp(got.raw(), want.raw(), want.nbytes()) == 0);
      Tensor into = Tensor::empty(h.shape(), dtype, Device::cpu);
      into.copy_from(d);  // a strided cuda source straight into host memory
      CHECK(std::memcmp(into.raw(), want.raw(), want.nbytes()) == 0);
      // Into a strided view as well (prefill's writes into the KV caches): the transpose of a zeroed
      // canvas whose last two dims are swapped, on either side; the canvases must agree byte for byte.
      Shape swapped = h.shape();
      std::swap(swapped[2], swapped[3]);
      Tensor host_canvas = Tensor::zeros(swapped, dtype, Device::cpu);
      Tensor dev_canvas = Tensor::zeros(swapped, dtype, Device::cuda);
      host_canvas.transpose(2, 3).copy_from(h);
      dev_canvas.transpose(2, 3).copy_from(d);
      const Tensor dev_canvas_back = dev_canvas.to(Device::cpu);
      CHECK(std::memcmp(dev_canvas_back.raw(), host_canvas.raw(), host_canvas.nbytes()) == 0);
      dev_canvas.fill_(0);
      dev_canvas.transpose(2, 3).copy_from(h);  // from host memory into a strided cuda view
      const Tensor from_host_back = dev_canvas.to(Device::cpu);
      CHECK(std::memcmp(from_host_back.raw(), host_canvas.raw(), host_canvas.nbytes()) == 0);
    }
  }
}
