// Tensor views/copies, dtype conversion, Philox determinism, SHA-256 and the autograd tape.
#include <doctest/doctest.h>

#include <cmath>

#include "autograd/variable.h"
#include "core/rng.h"
#include "core/sha256.h"
#include "core/tensor.h"

using namespace hylo;

TEST_CASE("tensor views share storage and contiguous() copies strided data") {
  Tensor t = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor tt = t.transpose(0, 1);
  CHECK(tt.shape() == Shape{3, 2});
  CHECK_FALSE(tt.is_contiguous());
  CHECK(tt.contiguous().to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});
  Tensor col = t.slice(1, 1, 3);
  CHECK(col.contiguous().to_vector<float>() == std::vector<float>{1, 2, 4, 5});
  Tensor v = t.view({3, -1});
  v.data<float>()[0] = 42;
  CHECK(t.to_vector<float>()[0] == 42);
  CHECK_THROWS_WITH_AS(tt.view({6}), doctest::Contains("non-contiguous"), Error);
  CHECK_THROWS_WITH_AS(t.view({4, 2}), doctest::Contains("cannot view (2, 3) as (4, 2)"), Error);
  CHECK_THROWS_AS((void)t.data<double>(), Error);
}

TEST_CASE("copy_from writes into a strided view and leaves the rest of its storage alone") {
  // (2, 4) storage; its columns 1..2 transposed are a (2, 2) view with strides (1, 4).
  Tensor dst = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7}, {2, 4});
  Tensor window = dst.slice(1, 1, 3).transpose(0, 1);
  REQUIRE_FALSE(window.is_contiguous());
  window.copy_from(Tensor::from_vector<float>({10, 11, 12, 13}, {2, 2}));  // a contiguous source
  CHECK(dst.to_vector<float>() == std::vector<float>{0, 10, 12, 3, 4, 11, 13, 7});
  // A strided source into a strided destination: the element at (i, j) of one lands at (i, j) of the other.
  Tensor src = Tensor::from_vector<float>({20, 21, 22, 23}, {2, 2}).transpose(0, 1);
  window.copy_from(src);
  CHECK(dst.to_vector<float>() == std::vector<float>{0, 20, 21, 3, 4, 22, 23, 7});
  CHECK_THROWS_WITH_AS(window.copy_from(Tensor::zeros({2, 3}, DType::f32)), doctest::Contains("copy_from"), Error);
}

TEST_CASE("dtype conversion round-trips and bf16 rounds to nearest even") {
  Tensor t = Tensor::from_vector<float>({1.0f, -2.5f, 3.14159f, 1e-3f}, {4});
  auto back = t.to(DType::f64).to(DType::f32).to_vector<float>();
  CHECK(back == t.to_vector<float>());
  auto b = t.to(DType::bf16).to(DType::f32).to_vector<float>();
  CHECK(b[0] == 1.0f);
  CHECK(b[1] == -2.5f);
  CHECK(b[2] == doctest::Approx(3.140625f));
  CHECK(bf16_to_float(float_to_bf16(1.0f + 1.0f / 256)) == 1.0f);  // tie -> even
  CHECK(bf16_to_float(float_to_bf16(1.0f + 3.0f / 256)) == 1.0f + 1.0f / 64);
}

TEST_CASE("Philox streams are fixed functions of (seed, stream, position)") {
  Rng a{7, 3, 0}, b{7, 3, 0}, other{7, 4, 0};
  std::vector<uint32_t> xs;
  for (int i = 0; i < 9; ++i) xs.push_back(a.next_u32());
  for (int i = 0; i < 9; ++i) CHECK(b.word_at(i) == xs[i]);
  CHECK(other.next_u32() != xs[0]);
  Rng resumed{7, 3, 5};
  CHECK(resumed.next_u32() == xs[5]);
  // Known-answer: Philox4x32-10 of counter 0, key 0 (Random123's published vector).
  auto r = philox4x32({0, 0, 0, 0}, {0, 0});
  CHECK(r[0] == 0x6627e8d5u);
  CHECK(r[1] == 0xe169c58du);
  CHECK(r[2] == 0xbc57ac4cu);
  CHECK(r[3] == 0x9b00dbd8u);
  double sum = 0, sq = 0;
  Rng n{1, 0, 0};
  for (int i = 0; i < 20000; ++i) {
    double x = n.normal();
    sum += x;
    sq += x * x;
  }
  CHECK(std::abs(sum / 20000) < 0.03);
  CHECK(std::abs(sq / 20000 - 1) < 0.05);
}

namespace {
// y = a * b elementwise (CPU f64), enough to exercise the tape without the op library.
Var mul(const Var& a, const Var& b) {
  Tensor out = a.value().clone();
  for (int64_t i = 0; i < out.numel(); ++i) out.data<double>()[i] *= b.value().data<double>()[i];
  return Var::from_op(out, {a, b}, [](const Tensor& g, std::vector<Var>& in) {
    for (int k = 0; k < 2; ++k) {
      if (!in[k].requires_grad()) continue;
      Tensor d = g.clone();
      for (int64_t i = 0; i < d.numel(); ++i) d.data<double>()[i] *= in[1 - k].value().data<double>()[i];
      in[k].accumulate_grad(d);
    }
  });
}
Var total(const Var& x) {
  double s = 0;
  for (double v : x.value().to_vector<double>()) s += v;
  return Var::from_op(Tensor::from_vector<double>({s}, {1}), {x}, [](const Tensor& g, std::vector<Var>& in) {
    Tensor d = Tensor::empty(in[0].shape(), DType::f64);
    d.fill_(g.to_vector<double>()[0]);
    in[0].accumulate_grad(d);
  });
}
}  // namespace

TEST_CASE("SHA-256 gives FIPS 180-4's digests, fed whole or in pieces") {
  CHECK(Sha256().hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  Sha256 abc;
  abc.update("abc");
  CHECK(abc.hex() == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // A million 'a' fed in uneven pieces crosses the 64-byte block edge at every offset.
  const std::string million(1000000, 'a');
  Sha256 pieces;
  for (size_t at = 0, step = 1; at < million.size(); at += step, step = step % 97 + 1)
    pieces.update(std::string_view(million).substr(at, step));
  pieces.update(nullptr, 0);
  CHECK(pieces.hex() == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("autograd: shared inputs accumulate, leaves keep grads across backward, hooks fire once") {
  Var x(Tensor::from_vector<double>({1, 2, 3}, {3}), true, "x");
  Var y(Tensor::from_vector<double>({4, 5, 6}, {3}), true, "y");
  int x_ready = 0;
  x.set_grad_ready_hook([&](Var&) { ++x_ready; });
  // loss = sum(x*y + x*x): d/dx = y + 2x, d/dy = x; x is read by two ops.
  auto loss = [&] {
    Var xy = mul(x, y), xx = mul(x, x);
    Tensor s = xy.value().clone();
    s.add_(xx.value());
    Var sum_node = Var::from_op(s, {xy, xx}, [](const Tensor& g, std::vector<Var>& in) {
      in[0].accumulate_grad(g.clone());
      in[1].accumulate_grad(g.clone());
    });
    return total(sum_node);
  };
  loss().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{6, 9, 12});
  CHECK(y.grad().to_vector<double>() == std::vector<double>{1, 2, 3});
  CHECK(x_ready == 1);
  loss().backward();  // a second micro-batch accumulates
  CHECK(x.grad().to_vector<double>() == std::vector<double>{12, 18, 24});
  CHECK(x_ready == 2);
  x.zero_grad();
  CHECK_FALSE(x.has_grad());
  {
    NoGradGuard guard;
    Var z = mul(x, y);
    CHECK_FALSE(z.requires_grad());
  }
  CHECK_THROWS_WITH_AS(mul(x, y).backward(), doctest::Contains("scalar"), Error);
}

TEST_CASE("autograd: GradTarget writes a new gradient or adds into the existing one") {
  Var frozen(Tensor::from_vector<double>({1, 2}, {2}), false, "frozen");
  GradTarget none(frozen, {2}, "unused");
  CHECK_FALSE(none.wanted());
  none.finish();
  CHECK_FALSE(frozen.has_grad());

  Var w(Tensor::from_vector<double>({1, 2, 3, 4}, {2, 2}), true, "w");
  {
    GradTarget fresh(w, {2, 2}, "dw", /*zeroed=*/true);
    CHECK(fresh.wanted());
    CHECK_FALSE(fresh.accumulate());
    CHECK(fresh.tensor().to_vector<double>() == std::vector<double>{0, 0, 0, 0});
    fresh.tensor().fill_(1.0);
    fresh.finish();  // the new buffer becomes w's gradient
  }
  CHECK(w.grad().to_vector<double>() == std::vector<double>{1, 1, 1, 1});
  {
    GradTarget existing(w, {2, 2}, "dw");
    CHECK(existing.accumulate());
    CHECK(existing.tensor().same_storage(w.grad()));  // the kernel adds in place
    existing.finish();  // nothing to hand over
  }
  CHECK(w.grad().to_vector<double>() == std::vector<double>{1, 1, 1, 1});
  // Where the kernel needs a contiguous gradient, a strided one is not written through: the new
  // buffer then goes through Tensor::add_, which refuses strided tensors loudly.
  w.mutable_grad() = w.grad().transpose(0, 1);
  GradTarget strided(w, {2, 2}, "dw", /*zeroed=*/false, /*contiguous=*/true);
  CHECK_FALSE(strided.accumulate());
  CHECK_FALSE(strided.tensor().same_storage(w.grad()));
  CHECK_THROWS_WITH_AS(strided.finish(), doctest::Contains("contiguous"), Error);
}

#if HYLO_WITH_CUDA
#include "core/cuda/cublas_library.h"

// No GPU is needed to open the libraries and resolve their symbols, so the CPU suite checks what
// the GPU table relies on: opening throws, naming the symbol, if any entry point is missing under
// the name the header maps it to; two of them are called here, host-side.
TEST_CASE("cuda: cuBLAS and cuBLASLt open at first use with every entry point hylo calls") {
  REQUIRE_NOTHROW(cuda::cublas_library());
  const cuda::CublasLibrary& library = cuda::cublas_library();
  CHECK(&cuda::cublas_library() == &library);  // opened once
  CHECK(std::string(library.get_status_string(CUBLAS_STATUS_NOT_SUPPORTED)) == "the requested functionality is not supported");
  // Host-side descriptors need no device: the inline initialisers' size convention holds.
  cublasLtMatrixLayoutOpaque_t layout;
  CHECK(library.lt_matrix_layout_init_internal(&layout, sizeof layout, CUDA_R_16BF, 64, 32, 64) == CUBLAS_STATUS_SUCCESS);
}
#endif
