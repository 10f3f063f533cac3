// lm_head_cross_entropy: mean next-token loss of logits = h @ w^T, computed chunk by chunk.
//
// The (N, V) logits are the largest activation of a language model (16 x 2048 tokens x 50304 in
// bf16 is 3.3 GB). Here each chunk of rows is projected, turned into its loss (cross-entropy plus
// the optional z-loss) and its softmax gradient in place, and pushed through the two backward
// products at once, so only one chunk of logits ever exists. The gradients for h and w are kept
// for backward, computed for d(loss) = 1 and rescaled there when the incoming gradient differs
// (its value is read back to the host).
// Without gradients (evaluation) only the forward product runs.
#include <algorithm>

#include "ops/cpu/cross_entropy.h"
#include "ops/cpu/gemm.h"
#include "ops/dispatch.h"
#include "ops/ops.h"

#if HYLO_WITH_CUDA
#include "kernels/cross_entropy/cross_entropy.h"
#include "kernels/gemm/gemm.h"
#endif

namespace hylo {

namespace {

constexpr int64_t kChunkLogitBytes = 512ll << 20;  // one chunk of logits at most

// The sum over counted rows of the cross-entropy plus z_loss * lse^2.
template <class T>
double total_loss(int64_t rows, const T* loss, const T* lse, const int32_t* targets, double z_loss) {
  double total = 0;
  for (int64_t n = 0; n < rows; ++n)
    if (targets[n] != cpu::kIgnoreIndex) total += double(loss[n]) + z_loss * double(lse[n]) * double(lse[n]);
  return total;
}

#if HYLO_WITH_CUDA
// CUDA: bf16 operands, fp32 loss/lse and an fp32 weight-gradient accumulator across chunks.
// dH undefined: no gradients (the fused kernel's in-place softmax gradient is then unused).
double chunks_cuda(const Tensor& H, const Tensor& W, const Tensor& targets, int v_valid, float scale, float z_loss,
                   Tensor& dH, Tensor& dW_f32, int64_t rows_per_chunk) {
  const int64_t N = H.size(0), D = H.size(1), V = W.size(0);
  Tensor logits = Tensor::empty({rows_per_chunk, V}, DType::bf16, Device::cuda, "lm head logits chunk");
  Tensor loss_N = Tensor::empty({N}, DType::f32, Device::cuda, "lm head loss");
  Tensor lse_N = Tensor::empty({N}, DType::f32, Device::cuda, "lm head lse");
  cudaStream_t s = cuda::stream();
  for (int64_t r0 = 0; r0 < N; r0 += rows_per_chunk) {
    const int rows = int(std::min(rows_per_chunk, N - r0));
    const bf16* h = H.data<bf16>() + r0 * D;
    bf16* z = logits.data<bf16>();
    cuda::gemm(false, true, rows, int(V), int(D), 1.0f, h, W.data<bf16>(), 0.0f, z, s);  // z = h W^T
    cuda::cross_entropy_fused(rows, int(V), v_valid, z, targets.data<int32_t>() + r0, scale, z_loss,
                              loss_N.data<float>() + r0, lse_N.data<float>() + r0, s);  // z <- dz
    if (!dH.defined()) continue;
    cuda::gemm(false, false, rows, int(D), int(V), 1.0f, z, W.data<bf16>(), 0.0f, dH.data<bf16>() + r0 * D, s);
    cuda::gemm(true, false, int(V), int(D), rows, 1.0f, z, h, r0 ? 1.0f : 0.0f, dW_f32.data<float>(), s);
  }
  const std::vector<float> loss = loss_N.to_vector<float>(), lse = lse_N.to_vector<float>();
  const std::vector<int32_t> t = targets.to_vector<int32_t>();
  return total_loss(N, loss.data(), lse.data(), t.data(), z_loss);
}
#endif
// dH undefined: no gradients, forward only.
template <class T>
double chunks_cpu(const Tensor& H, const Tensor& W, const Tensor& targets, int v_valid, T scale, T z_loss, Tensor& dH,
                  Tensor& dW, int64_t rows_per_chunk) {
  const int64_t N = H.size(0), D = H.size(1), V = W.size(0);
  const auto rows_max = static_cast<size_t>(rows_per_chunk);
  // A tensor, not a std::vector: its 64-byte alignment keeps Eigen's vectorised passes over the
  // logits the same in every process. A vector's 16 bytes let them depend on where the heap put it
  // once packets are 32 bytes wide (AVX), and runs that must agree bit for bit did not.
  const Tensor logits_chunk = Tensor::empty({int64_t(rows_max), V}, H.dtype(), Device::cpu, "lm head logits chunk");
  T* logits = logits_chunk.data<T>();
  std::vector<T> loss(rows_max), lse(rows_max);
  double total = 0;
  for (int64_t r0 = 0; r0 < N; r0 += rows_per_chunk) {
    const int rows = int(std::min(rows_per_chunk, N - r0));
    const T* h = H.data<T>() + r0 * D;
    const int32_t* t = targets.data<int32_t>() + r0;
    cpu::gemm<T>(false, true, rows, int(V), int(D), T(1), h, W.data<T>(), T(0), logits);
    cpu::cross_entropy_forward<T>(rows, int(V), v_valid, logits, t, loss.data(), lse.data());
    total += total_loss(rows, loss.data(), lse.data(), t, double(z_loss));
    if (!dH.defined()) continue;
    cpu::cross_entropy_backward<T>(rows, int(V), v_valid, t, lse.data(), scale, z_loss, logits);
    cpu::gemm<T>(false, false, rows, int(D), int(V), T(1), logits, W.data<T>(), T(0), dH.data<T>() + r0 * D);
    cpu::gemm<T>(true, false, int(V), int(D), rows, T(1), logits, h, r0 ? T(1) : T(0), dW.data<T>());
  }
  return total;
}

}  // namespace

Var lm_head_cross_entropy(const Var& h, const Var& w, const Tensor& targets, int v_valid, double z_loss,
                          int64_t chunk_rows) {
  const Tensor& H = h.value();
  const Tensor& W = w.value();
  check_same_device("lm_head_cross_entropy", H, W);
  check_contiguous("lm_head_cross_entropy", H);
  check_contiguous("lm_head_cross_entropy", W);
  HYLO_CHECK(H.dim() == 2 && W.dim() == 2 && H.size(1) == W.size(1) && targets.dim() == 1 &&
                 targets.size(0) == H.size(0) && targets.dtype() == DType::i32,
             "lm_head_cross_entropy: h {} with head {} and targets {} {}", shape_str(H.shape()), shape_str(W.shape()),
             dtype_name(targets.dtype()), shape_str(targets.shape()));
  HYLO_CHECK(0 < v_valid && v_valid <= W.size(0), "lm_head_cross_entropy: {} valid vocab rows of {}", v_valid,
             W.size(0));
  HYLO_CHECK(z_loss >= 0, "lm_head_cross_entropy: z_loss {} must be >= 0", z_loss);
  int64_t counted = 0;
  for (int32_t t : targets.to_vector<int32_t>()) counted += t != cpu::kIgnoreIndex;
  const double scale = counted ? 1.0 / double(counted) : 0.0;
  const int64_t N = H.size(0), V = W.size(0);
  const int64_t rows_per_chunk = std::clamp<int64_t>(
      chunk_rows > 0 ? chunk_rows : kChunkLogitBytes / (V * int64_t(dtype_size(H.dtype()))), 1, std::max<int64_t>(N, 1));

  const bool with_grad = grad_enabled() && (h.requires_grad() || w.requires_grad());
  Tensor dH = with_grad ? Tensor::empty(H.shape(), H.dtype(), H.device(), "lm head dh") : Tensor();
  Tensor dW;
  double total = 0;
  if (!on_cuda(H, "lm_head_cross_entropy", [&] {
#if HYLO_WITH_CUDA
        Tensor dW_f32 = with_grad ? Tensor::empty(W.shape(), DType::f32, Device::cuda, "lm head dw") : Tensor();
        total = chunks_cuda(H, W, targets, v_valid, float(scale), float(z_loss), dH, dW_f32, rows_per_chunk);
        if (with_grad) dW = dW_f32.to(DType::bf16);
#endif
      })) {
    if (with_grad) dW = Tensor::empty(W.shape(), W.dtype(), W.device(), "lm head dw");
    with_cpu_float(H, "lm_head_cross_entropy", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      total = chunks_cpu<T>(H, W, targets, v_valid, T(scale), T(z_loss), dH, dW, rows_per_chunk);
    });
  }
  const double mean = total * scale;
  Tensor out = Tensor::from_vector<double>({mean}, {1}).to(stats_dtype(H)).to(H.device());
  return Var::from_op(out, {h, w}, [dH, dW](const Tensor& g, std::vector<Var>& in) {
    const double dloss = g.to(DType::f64).to_vector<double>()[0];
    for (int i = 0; i < 2; ++i) {
      if (!in[i].requires_grad()) continue;
      Tensor grad = i == 0 ? dH : dW;
      if (dloss != 1.0) {
        Tensor scaled = Tensor::zeros(grad.shape(), grad.dtype(), grad.device(), "lm head grad");
        scaled.add_(grad, dloss);
        grad = scaled;
      }
      in[i].accumulate_grad(grad);
    }
  });
}

}  // namespace hylo
