// Decode-time KV cache ops (see decode.h).
#include "ops/decode.h"

#include <algorithm>
#include <cstring>

#include "core/parallel_for.h"
#include "ops/dispatch.h"

#if HYLO_WITH_CUDA
#include "kernels/cross_entropy/cross_entropy.h"
#include "kernels/decode/decode.h"
#endif

namespace hylo {

namespace {

// The cache's (B, Hkv, S, D) as a DecodeShape with Hq query heads.
DecodeShape cache_shape(const char* op, const Tensor& k_BHSD, const Tensor& v_BHSD, int q_heads) {
  check_same_device(op, k_BHSD, v_BHSD);
  check_contiguous(op, k_BHSD);
  check_contiguous(op, v_BHSD);
  HYLO_CHECK(k_BHSD.dim() == 4 && v_BHSD.shape() == k_BHSD.shape(), "{}: k cache {} and v cache {} must be (B, Hkv, S, D)",
             op, shape_str(k_BHSD.shape()), shape_str(v_BHSD.shape()));
  return DecodeShape{int(k_BHSD.size(0)), q_heads, int(k_BHSD.size(1)), int(k_BHSD.size(3)), int(k_BHSD.size(2))};
}

}  // namespace

void kv_cache_write(const Tensor& k_BHSD, const Tensor& v_BHSD, const SlotMove& move, int slot, const Tensor& k_BHD,
                    const Tensor& v_BHD) {
  const DecodeShape s = cache_shape("kv_cache_write", k_BHSD, v_BHSD, int(k_BHSD.size(1)));
  for (const Tensor* t : {&k_BHD, &v_BHD}) {
    check_same_device("kv_cache_write", k_BHSD, *t);
    check_contiguous("kv_cache_write", *t);
    HYLO_CHECK(t->shape() == Shape({s.B, s.Hkv, s.D}), "kv_cache_write: new k/v {} must be (B, Hkv, D) = ({}, {}, {})",
               shape_str(t->shape()), s.B, s.Hkv, s.D);
  }
  HYLO_CHECK(slot >= 0 && slot < s.slots, "kv_cache_write: slot {} outside the cache's {} slots", slot, s.slots);
  HYLO_CHECK(move.count == 0 || (move.count > 0 && move.src >= 0 && move.dst >= 0 && move.src + move.count <= s.slots &&
                                 move.dst + move.count <= s.slots &&
                                 (move.src + move.count <= move.dst || move.dst + move.count <= move.src)),
             "kv_cache_write: move of rows [{}, {}) to [{}, {}) invalid for {} slots", move.src, move.src + move.count,
             move.dst, move.dst + move.count, s.slots);
  if (on_cuda(k_BHSD, "kv_cache_write", [&] {
#if HYLO_WITH_CUDA
        cuda::kv_cache_move(s, move.src, move.dst, move.count, k_BHSD.data<bf16>(), v_BHSD.data<bf16>(),
                            cuda::stream());
        cuda::kv_cache_append(s, slot, k_BHD.data<bf16>(), v_BHD.data<bf16>(), k_BHSD.data<bf16>(),
                              v_BHSD.data<bf16>(), cuda::stream());
#endif
      }))
    return;
  // Byte copies: the CPU cache holds whatever float type its model computes in.
  const size_t row = size_t(s.D) * dtype_size(k_BHSD.dtype()), S = size_t(s.slots);
  for (const auto& [cache, fresh] : {std::pair{&k_BHSD, &k_BHD}, std::pair{&v_BHSD, &v_BHD}}) {
    auto* base = static_cast<char*>(cache->raw());
    const auto* src = static_cast<const char*>(fresh->raw());
    for (size_t head = 0; head < size_t(s.B) * s.Hkv; ++head) {  // (b, kv head) rows, b-major
      char* rows_S = base + head * S * row;
      if (move.count > 0) std::memcpy(rows_S + move.dst * row, rows_S + move.src * row, move.count * row);
      std::memcpy(rows_S + slot * row, src + head * row, row);
    }
  }
}

Tensor decode_attention(const Tensor& q_BHD, const Tensor& k_BHSD, const Tensor& v_BHSD, const LiveSlots& live) {
  check_same_device("decode_attention", q_BHD, k_BHSD);
  check_contiguous("decode_attention", q_BHD);
  HYLO_CHECK(q_BHD.dim() == 3, "decode_attention: q {} must be (B, Hq, D)", shape_str(q_BHD.shape()));
  const DecodeShape s = cache_shape("decode_attention", k_BHSD, v_BHSD, int(q_BHD.size(1)));
  HYLO_CHECK(q_BHD.size(0) == s.B && q_BHD.size(2) == s.D, "decode_attention: q {} against a cache {}",
             shape_str(q_BHD.shape()), shape_str(k_BHSD.shape()));
  check_decode_args(s, live);
  Tensor out = Tensor::empty(q_BHD.shape(), q_BHD.dtype(), q_BHD.device(), "decode attention output");
  if (on_cuda(q_BHD, "decode_attention", [&] {
#if HYLO_WITH_CUDA
        HYLO_CHECK(cuda::decode_supports_head_dim(s.D), "decode_attention: head_dim {} has no cuda kernel (use 64 or 128)",
                   s.D);
        // Split-KV partials; the caching allocator makes this per-step scratch free after warm-up.
        const size_t bytes = cuda::decode_workspace_bytes(s, live.keys());
        Tensor workspace;
        if (bytes > 0)
          workspace = Tensor::empty({int64_t(bytes + 3) / 4}, DType::i32, Device::cuda, "decode split-KV workspace");
        cuda::decode_attention_forward(s, live, q_BHD.data<bf16>(), k_BHSD.data<bf16>(), v_BHSD.data<bf16>(),
                                       out.data<bf16>(), bytes > 0 ? workspace.raw() : nullptr, bytes, cuda::stream());
#endif
      }))
    return out;
  with_cpu_float(q_BHD, "decode_attention", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    cpu::decode_attention_forward<T>(s, live, q_BHD.data<T>(), k_BHSD.data<T>(), v_BHSD.data<T>(), out.data<T>(),
                                     nullptr);
  });
  return out;
}

std::vector<int32_t> greedy_tokens(const Tensor& logits_BV, int n_valid) {
  check_contiguous("greedy_tokens", logits_BV);
  HYLO_CHECK(logits_BV.dim() == 2 && n_valid >= 1 && n_valid <= logits_BV.size(1),
             "greedy_tokens: logits {} with {} valid ids (must be (B, V), 1 <= valid <= V)",
             shape_str(logits_BV.shape()), n_valid);
  const int B = int(logits_BV.size(0)), V = int(logits_BV.size(1));
  std::vector<int32_t> tokens(size_t(B), 0);
  if (on_cuda(logits_BV, "greedy_tokens", [&] {
#if HYLO_WITH_CUDA
        Tensor ids = Tensor::empty({B}, DType::i32, Device::cuda, "greedy tokens");
        cuda::greedy_tokens(logits_BV.data<bf16>(), B, V, n_valid, ids.data<int32_t>(), cuda::stream());
        tokens = ids.to(Device::cpu).to_vector<int32_t>();
#endif
      }))
    return tokens;
  with_cpu_logits(logits_BV, "greedy_tokens", [&]<class T>(T*) {
    const T* logits = logits_BV.data<T>();
    parallel_for(size_t(B), [&](size_t b) { tokens[b] = first_argmax(logits + int64_t(b) * V, n_valid); });
  });
  return tokens;
}

std::vector<double> target_logprobs(const Tensor& logits_NV, std::span<const int32_t> targets_N, int n_valid) {
  check_contiguous("target_logprobs", logits_NV);
  HYLO_CHECK(logits_NV.dim() == 2 && n_valid >= 1 && n_valid <= logits_NV.size(1) &&
                 int64_t(targets_N.size()) == logits_NV.size(0),
             "target_logprobs: logits {} with {} targets and {} valid ids (must be (N, V), N targets, 1 <= valid <= V)",
             shape_str(logits_NV.shape()), targets_N.size(), n_valid);
  for (const int32_t t : targets_N)
    HYLO_CHECK(t >= -1 && t < n_valid, "target_logprobs: target {} outside [0, {}) (or -1: no target)", t, n_valid);
  const int N = int(logits_NV.size(0)), V = int(logits_NV.size(1));
  std::vector<double> logprobs(size_t(N), 0.0);
  if (N == 0) return logprobs;
  if (on_cuda(logits_NV, "target_logprobs", [&] {
#if HYLO_WITH_CUDA
        // The kernel writes the (here unused) gradient over the logits it reads: it gets a copy.
        Tensor scratch = logits_NV.clone();
        const Tensor targets =
            Tensor::from_vector(std::vector<int32_t>(targets_N.begin(), targets_N.end()), {N}).to(Device::cuda);
        Tensor loss = Tensor::empty({N}, DType::f32, Device::cuda, "target logprobs: loss");
        Tensor lse = Tensor::empty({N}, DType::f32, Device::cuda, "target logprobs: lse");
        cuda::cross_entropy_fused(N, V, n_valid, scratch.data<bf16>(), targets.data<int32_t>(), /*scale=*/0.0f,
                                  /*z_loss=*/0.0f, loss.data<float>(), lse.data<float>(), cuda::stream());
        const std::vector<float> host = loss.to(Device::cpu).to_vector<float>();
        for (int n = 0; n < N; ++n) logprobs[size_t(n)] = targets_N[size_t(n)] < 0 ? 0.0 : -double(host[size_t(n)]);
#endif
      }))
    return logprobs;
  with_cpu_logits(logits_NV, "target_logprobs", [&]<class T>(T*) {
    const auto value = [](T v) {
      if constexpr (std::is_same_v<T, bf16>) return double(bf16_to_float(v));
      else return double(v);
    };
    const T* logits = logits_NV.data<T>();
    parallel_for(size_t(N), [&](size_t n) {
      if (targets_N[n] < 0) return;
      const T* row = logits + int64_t(n) * V;
      double top = value(row[0]);
      for (int v = 1; v < n_valid; ++v) top = std::max(top, value(row[v]));
      double z = 0;
      for (int v = 0; v < n_valid; ++v) z += std::exp(value(row[v]) - top);
      logprobs[n] = value(row[targets_N[n]]) - top - std::log(z);
    });
  });
  return logprobs;
}

}  // namespace hylo
