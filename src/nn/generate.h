// Incremental decoding (SPEC §5): one KV cache per layer, chosen by the layer's mask (pbb ->
// Flash-PBB b slots, swa -> W-slot ring, full -> max_len slots), and one position at a time
// through the Transformer's own block pieces, so that the logits of step t equal row t of
// forward() on the whole sequence (tests/cpu/test_generate.cpp holds that to 1e-10 in fp64;
// tests/gpu/test_generate_gpu.cpp checks the CUDA path against the CUDA forward and the CPU).
// The caches live where the model's parameters live: on the CPU (f32, or f64 for the exactness
// tests) they run the reference decode attention, on CUDA (bf16) the decode kernels. Then
// sampling: greedy, temperature, top-k, top-p, drawn from a seeded hylo::Rng.
//
// One sequence at a time (the caches take a batch, the generator feeds B = 1). Every step runs
// without autograd.
//
// Shape legend: D d_model, H heads, Hkv kv heads, hd head dim, V vocab (valid rows only).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "core/rng.h"
#include "nn/kv_cache.h"
#include "nn/transformer.h"

namespace hylo {

struct SamplingOptions {
  double temperature = 0;  // 0 = greedy (argmax, ties to the lower id; draws nothing from the Rng)
  int top_k = 0;           // keep the k most likely tokens; 0 = all
  double top_p = 1.0;      // then the smallest most-likely set with probability >= top_p; 1 = all
};

// Throws naming the option unless temperature >= 0, top_k >= 0 and 0 < top_p <= 1.
void check_sampling_options(const SamplingOptions& options);

// One token from logits (V). Sampling draws exactly one uniform from `rng`, so a seed fixes the
// whole continuation.
int32_t sample_token(std::span<const double> logits_V, const SamplingOptions& options, Rng& rng);

struct LayerCacheInfo {
  int layer = 0;
  KvCacheKind kind = KvCacheKind::full;
  int slots = 0;     // per (sequence, kv head)
  size_t bytes = 0;  // k and v together
};

class Generator {
 public:
  // `model` must outlive the generator; decoding runs on its parameters' device. max_len: the
  // longest sequence (prompt + new tokens) the full-attention caches must hold, at most INT32_MAX
  // (int64_t so that a caller's sum cannot wrap before it is checked).
  // vocab_valid: logits of ids >= vocab_valid (embedding padding) are never returned.
  Generator(const Transformer& model, int64_t max_len, int vocab_valid);
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  // Feeds `token` at position position() and returns the next-token logits (vocab_valid).
  std::vector<double> step(int32_t token);
  // step() over the prompt, token by token (the caches then hold exactly what decoding wrote);
  // returns the logits after its last token. The prompt must not be empty.
  std::vector<double> prefill(std::span<const int32_t> prompt);
  // prefill(prompt), then `count` sampled tokens (the last one is not fed back).
  std::vector<int32_t> generate(std::span<const int32_t> prompt, int count, const SamplingOptions& options,
                                Rng& rng);

  int64_t position() const { return position_; }  // tokens fed so far
  int vocab_valid() const { return vocab_valid_; }
  std::vector<LayerCacheInfo> caches() const;

 private:
  const Transformer& model_;
  int vocab_valid_ = 0;
  int64_t position_ = 0;
  std::vector<KvCache> caches_;  // per layer

  // Feeds `token` through every layer and its cache; returns the last hidden state (1, D).
  Var advance(int32_t token);
};

const char* cache_kind_name(KvCacheKind kind);

}  // namespace hylo
