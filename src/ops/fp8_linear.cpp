// FP8 linear (semantics in fp8_linear.h).
#include "ops/fp8_linear.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "ops/cpu/gemm.h"
#include "ops/dispatch.h"

#if HYLO_WITH_CUDA
#include "kernels/fp8/fp8.h"
#include "kernels/gemm/gemm.h"
#endif

namespace hylo {

namespace {

// |v|'s bits: non-negative floats order like their bit patterns (NaN above infinity), the order
// the GPU's atomicMax on bits uses.
uint32_t abs_bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u & 0x7fffffffu;
}

float from_bits(uint32_t u) {
  float v;
  std::memcpy(&v, &u, 4);
  return v;
}

// The value of every FP8 code of one format (a table: the CPU path decodes every element).
const std::array<float, 256>& decoded(Fp8Format f) {
  static const auto table = [](Fp8Format format) {
    std::array<float, 256> t{};
    for (int b = 0; b < 256; ++b) t[size_t(b)] = fp8_decode(uint8_t(b), format);
    return t;
  };
  static const std::array<float, 256> e4m3 = table(Fp8Format::e4m3), e5m2 = table(Fp8Format::e5m2);
  return f == Fp8Format::e4m3 ? e4m3 : e5m2;
}

}  // namespace

Fp8State::Fp8State(const Fp8Recipe& recipe, int linears, Device device)
    : recipe_(recipe), linears_(linears), device_(device), weights_(size_t(linears)), input_group_(size_t(linears), -1) {
  HYLO_CHECK(linears >= 0 && recipe.history >= 1 && recipe.margin >= 0 && recipe.margin < 31,
             "fp8: {} linears, amax history {}, margin {}", linears, recipe.history, recipe.margin);
  const int64_t roles = 3 * int64_t(linears);
  history_ = Tensor::zeros({roles, recipe.history}, DType::f32, device, "fp8: amax history");
  step_amax_ = Tensor::zeros({roles}, DType::f32, device, "fp8: step amax");
  scale_ = Tensor::zeros({roles}, DType::f32, device, "fp8: scales");
  update_scales(false);
}

int Fp8State::role_index(int linear, Fp8Role role) const {
  HYLO_CHECK(linear >= 0 && linear < linears_, "fp8: linear {} of {}", linear, linears_);
  return 3 * linear + int(role);
}

void Fp8State::update_scales(bool shift) {
  const int roles = 3 * linears_, H = recipe_.history;
  if (device_ == Device::cuda) {
#if HYLO_WITH_CUDA
    cuda::fp8_roll_history(history_.data<float>(), step_amax_.data<float>(), scale_.data<float>(), roles, H,
                           recipe_.grad_format, recipe_.margin, shift, cuda::stream());
#endif
    return;
  }
  // The same arithmetic as kernels/fp8's roll kernel.
  for (int r = 0; r < roles; ++r) {
    float* history = history_.data<float>() + int64_t(r) * H;
    if (shift) {
      std::copy_backward(history, history + H - 1, history + H);
      history[0] = step_amax_.data<float>()[r];
      step_amax_.data<float>()[r] = 0.0f;
    }
    uint32_t bits = 0;
    for (int i = 0; i < H; ++i) bits = std::max(bits, abs_bits(history[i]));
    scale_.data<float>()[r] =
        fp8_scale_for_amax(from_bits(bits), r % 3 == 2 ? recipe_.grad_format : Fp8Format::e4m3, recipe_.margin);
  }
}

void Fp8State::roll() {
  update_scales(true);
  ++steps_recorded_;
  for (CachedWeight& w : weights_) w = {};  // the optimizer moved the weights
  input_ = {};                              // and the scales
}

void Fp8State::discard_step() { step_amax_.fill_(0.0); }

Tensor Fp8State::amax_history() const { return history_.to(Device::cpu); }

void Fp8State::restore(const Tensor& amax_history, int64_t steps_recorded, const std::string& where) {
  HYLO_CHECK(amax_history.shape() == history_.shape() && amax_history.dtype() == DType::f32 && steps_recorded >= 0,
             "{}: the FP8 amax history is {} {}, this run's FP8 linears need f32 {} ({} roles x "
             "train.fp8_amax_history={})",
             where, dtype_name(amax_history.dtype()), shape_str(amax_history.shape()), shape_str(history_.shape()),
             history_.size(0), recipe_.history);
  history_.copy_from(amax_history.to(device_));
  steps_recorded_ = steps_recorded;
  step_amax_.fill_(0.0);
  update_scales(false);
  for (CachedWeight& w : weights_) w = {};
  input_ = {};
}

std::vector<uint32_t> Fp8State::step_amax_bits() const {
  std::vector<uint32_t> bits;
  for (float v : step_amax_.to(Device::cpu).to_vector<float>()) bits.push_back(abs_bits(v));
  return bits;
}

void Fp8State::set_step_amax_bits(const std::vector<uint32_t>& bits) {
  HYLO_CHECK(int64_t(bits.size()) == step_amax_.numel(), "fp8: {} step amaxes for {} roles", bits.size(),
             step_amax_.numel());
  std::vector<float> values;
  for (uint32_t b : bits) values.push_back(from_bits(b));
  step_amax_.copy_from(Tensor::from_vector(values, step_amax_.shape()).to(device_));
}

Fp8Operand Fp8State::quantize(const Tensor& t, int linear, Fp8Role role, bool transpose, bool record) {
  HYLO_CHECK(t.dim() == 2 && t.is_contiguous() && t.device() == device_, "fp8 cast: {} on {} (needs a contiguous "
             "matrix on {})", shape_str(t.shape()), device_name(t.device()), device_name(device_));
  const int r = role_index(linear, role);
  const int64_t rows = t.size(0), cols = t.size(1);
  // Delayed scaling reads the scale from the history; current scaling (and a first step, before
  // any history) measures this tensor first.
  const bool from_history = !recipe_.current_scaling && steps_recorded_ > 0;
  Fp8Operand out;
  out.format = format(role);
  if (on_cuda(t, "fp8 cast", [&] {
#if HYLO_WITH_CUDA
        const cudaStream_t stream = cuda::stream();
        Tensor own;  // current scaling: {amax, scale} of this tensor
        const float* scale = scale_.data<float>() + r;
        if (!from_history) {
          own = Tensor::zeros({2}, DType::f32, Device::cuda, "fp8: amax");
          cuda::fp8_amax(t.data<bf16>(), t.numel(), own.data<float>(), stream);
          cuda::fp8_scale_from_amax(own.data<float>(), out.format, recipe_.margin, own.data<float>() + 1, stream);
          scale = own.data<float>() + 1;
        }
        out.codes = Tensor::empty({rows, cols}, DType::u8, Device::cuda, "fp8: codes");
        if (transpose) out.codes_t = Tensor::empty({cols, rows}, DType::u8, Device::cuda, "fp8: transposed codes");
        out.scale_inv = Tensor::empty({1}, DType::f32, Device::cuda, "fp8: scale inverse");
        cuda::fp8_cast_transpose(t.data<bf16>(), rows, cols, out.format, scale, out.codes.data<uint8_t>(),
                                 transpose ? out.codes_t.data<uint8_t>() : nullptr, out.scale_inv.data<float>(),
                                 record ? step_amax_.data<float>() + r : nullptr, stream);
#endif
      }))
    return out;
  HYLO_CHECK(t.dtype() == DType::f32, "fp8 cast: the cpu path computes in f32, got {}", dtype_name(t.dtype()));
  (void)transpose;  // the CPU GEMM reads transposes in place
  const float* x = t.data<float>();
  const int64_t n = t.numel();
  uint32_t amax = 0;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, abs_bits(x[i]));
  const float scale =
      from_history ? scale_.data<float>()[r] : fp8_scale_for_amax(from_bits(amax), out.format, recipe_.margin);
  const std::array<float, 256>& value_of = decoded(out.format);
  out.codes = Tensor::empty({rows, cols}, DType::f32, Device::cpu, "fp8: codes");
  float* q = out.codes.data<float>();
  for (int64_t i = 0; i < n; ++i) q[i] = value_of[fp8_encode(x[i] * scale, out.format)];
  out.scale_inv = Tensor::from_vector(std::vector<float>{1.0f / scale}, {1});
  if (record) {
    float& step = step_amax_.data<float>()[r];
    step = from_bits(std::max(abs_bits(step), amax));
  }
  return out;
}

const Fp8Operand& Fp8State::weight(const Tensor& w, int linear) {
  CachedWeight& cached = weights_.at(size_t(linear));
  if (cached.data != w.raw() || !cached.cast.codes.defined()) {
    cached.cast = quantize(w, linear, Fp8Role::w, /*transpose=*/true, /*record=*/true);
    cached.data = w.raw();
  }
  return cached.cast;
}

void Fp8State::share_input(int first, int count) {
  HYLO_CHECK(first >= 0 && count >= 1 && first + count <= linears_, "fp8: linears {} .. {} of {}", first,
             first + count - 1, linears_);
  for (int l = first; l < first + count; ++l) input_group_[size_t(l)] = first;
}

Fp8Operand Fp8State::input(const Tensor& x, int linear, bool training) {
  HYLO_CHECK(linear >= 0 && linear < linears_, "fp8: linear {} of {}", linear, linears_);
  const int group = input_group_[size_t(linear)];
  if (group < 0) return quantize(x, linear, Fp8Role::x, /*transpose=*/training, /*record=*/training);
  if (input_.group == group && input_.training == training && input_.source.raw() == x.raw() &&
      input_.source.shape() == x.shape())
    return input_.cast;
  input_ = {x, group, training, quantize(x, group, Fp8Role::x, /*transpose=*/training, /*record=*/training)};
  return input_.cast;
}

void fp8_matmul(const Fp8Operand& a, bool a_t, const Fp8Operand& b, bool b_t, int M, int N, int K, Tensor& C,
                bool accumulate) {
  if (on_cuda(C, "fp8 linear", [&] {
#if HYLO_WITH_CUDA
        const Tensor& A = a_t ? a.codes_t : a.codes;
        const Tensor& B = b_t ? b.codes_t : b.codes;
        HYLO_CHECK(A.defined() && B.defined(), "fp8 linear: an operand's {}codes were not cast",
                   A.defined() ? "transposed " : "");
        cuda::gemm_fp8(M, N, K, A.data<uint8_t>(), a.format, a.scale_inv.data<float>(), B.data<uint8_t>(), b.format,
                       b.scale_inv.data<float>(), accumulate ? 1.0f : 0.0f, C.data<bf16>(), cuda::stream());
#endif
      }))
    return;
  HYLO_CHECK(C.dtype() == DType::f32, "fp8 linear: the cpu path computes in f32, got {}", dtype_name(C.dtype()));
  // a' (M, K) is a.codes, or a.codes (K, M) read transposed; b' (N, K) likewise, and cpu::gemm
  // wants b'^T (K, N): b.codes (K, N) as stored when b_t, else read transposed.
  const float alpha = a.scale_inv.data<float>()[0] * b.scale_inv.data<float>()[0];
  cpu::gemm<float>(a_t, !b_t, M, N, K, alpha, a.codes.data<float>(), b.codes.data<float>(), accumulate ? 1.0f : 0.0f,
                   C.data<float>());
}

Var fp8_linear(const Var& x, const Var& w, Fp8State& state, int linear) {
  const Tensor& X = x.value();
  const Tensor& W = w.value();
  check_same_device("fp8 linear", X, W);
  check_contiguous("fp8 linear", X);
  check_contiguous("fp8 linear", W);
  HYLO_CHECK(X.dim() == 2 && W.dim() == 2 && X.size(1) == W.size(1), "fp8 linear: x {} with weight {} ('{}')",
             shape_str(X.shape()), shape_str(W.shape()), w.name());
  const int N = int(X.size(0)), in = int(X.size(1)), out = int(W.size(0));
  // Only training records x's amax, and only its backward reads x's transpose.
  const bool training = grad_enabled();
  Fp8Operand qx = state.input(X, linear, training);
  const Fp8Operand& qw = state.weight(W, linear);
  Tensor Y = Tensor::empty({N, out}, X.dtype(), X.device(), "linear output");
  fp8_matmul(qx, false, qw, false, N, out, in, Y, false);
  if (qx.codes_t.defined()) qx.codes = Tensor();  // CUDA: the backward reads the transpose only
  Fp8State* s = &state;
  return Var::from_op(Y, {x, w}, [qx, qw, s, linear, N, in, out](const Tensor& dY, std::vector<Var>& inputs) {
    check_contiguous("fp8 linear backward", dY);
    GradTarget dX(inputs[0], {N, in}, "linear dx"), dW(inputs[1], {out, in}, "linear dw");
    const Fp8Operand qdy = s->quantize(dY, linear, Fp8Role::dy, /*transpose=*/dW.wanted(), /*record=*/true);
    // dx (N, in) = dy (N, out) @ w (out, in): b' = w^T (in, out)
    if (dX.wanted()) fp8_matmul(qdy, false, qw, true, N, in, out, dX.tensor(), dX.accumulate());
    // dw (out, in) = dy^T (out, N) @ x (N, in): b' = x^T (in, N)
    if (dW.wanted()) fp8_matmul(qdy, true, qx, true, out, in, N, dW.tensor(), dW.accumulate());
    dX.finish();
    dW.finish();
  });
}

}  // namespace hylo
