// Incremental decoding (SPEC §5): one KV cache per layer, chosen by the layer's mask (pbb ->
// Flash-PBB b slots, swa -> W-slot ring, full -> max_len slots), and one position at a time
// through the Transformer's own block pieces, so that the logits of step t equal row t of
// forward() on the whole sequence (tests/cpu/test_generate.cpp holds that to 1e-10 in fp64;
// tests/gpu/test_generate_gpu.cpp checks the CUDA path against the CUDA forward and the CPU).
// The caches live where the model's parameters live: on the CPU (f32, or f64 for the exactness
// tests) they run the reference decode attention, on CUDA (bf16) the decode kernels. Then
// sampling: greedy, temperature, top-k, top-p, drawn from a seeded hylo::Rng.
//
// B sequences in lockstep (B = 1 for `hylo generate`): every step feeds one token to each, all at
// the same position, so their prompts have one length; each sequence owns its row of every cache.
// Every step runs without autograd.
//
// Shape legend: B batch, D d_model, H heads, Hkv kv heads, hd head dim, V vocab (valid rows only).
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
  size_t bytes = 0;  // k and v together, all B sequences
};

class Generator {
 public:
  // `model` must outlive the generator; decoding runs on its parameters' device. max_len: the
  // longest sequence (prompt + new tokens) the full-attention caches must hold, at most INT32_MAX
  // (int64_t so that a caller's sum cannot wrap before it is checked).
  // vocab_valid: logits of ids >= vocab_valid (embedding padding) are never returned.
  // batch: the sequences decoded together (B >= 1).
  Generator(const Transformer& model, int64_t max_len, int vocab_valid, int batch = 1);
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  // Feeds tokens_B[b] to sequence b at position position(); returns each sequence's next-token
  // logits, B rows of vocab_valid.
  std::vector<std::vector<double>> step(std::span<const int32_t> tokens_B);
  // step()'s greedy tokens (each row's argmax, ties to the lower id: ops/decode.h greedy_tokens),
  // reduced where the logits are: on CUDA only B ids reach the host. With the B x 50304 bf16
  // logits read on the host instead (a ~4 ms scan at B = 64 on a 2-core CPU), a batch-64 step of
  // the 205M models took ~7 ms on an H100, transformers' 5.5 (experiments/results/decode/SUMMARY.md).
  std::vector<int32_t> greedy_step(std::span<const int32_t> tokens_B);
  // Starts the B sequences with their prompts (one length, not empty): one forward over all of
  // them, whose k/v fill the caches as step() on each position in turn would; returns the logits
  // after their last tokens. (An MoE with a capacity factor routes the whole prompt at once here.)
  std::vector<std::vector<double>> prefill(std::span<const std::vector<int32_t>> prompts_B);
  // prefill(prompts), then `count` sampled tokens per sequence (the last ones are not fed back);
  // each step samples sequence 0, 1, ... in turn from `rng`.
  std::vector<std::vector<int32_t>> generate(std::span<const std::vector<int32_t>> prompts_B, int count,
                                             const SamplingOptions& options, Rng& rng);

  // The same for one sequence (B = 1).
  std::vector<double> step(int32_t token);
  std::vector<double> prefill(std::span<const int32_t> prompt);
  std::vector<int32_t> generate(std::span<const int32_t> prompt, int count, const SamplingOptions& options, Rng& rng);

  int64_t position() const { return position_; }  // tokens fed to each sequence so far
  int batch() const { return batch_; }
  int vocab_valid() const { return vocab_valid_; }
  std::vector<LayerCacheInfo> caches() const;

 private:
  const Transformer& model_;
  int vocab_valid_ = 0, batch_ = 0;
  int64_t position_ = 0;
  std::vector<KvCache> caches_;  // per layer

  // Every id in [0, vocab_valid): one line naming the first that is not.
  void check_tokens(std::span<const int32_t> tokens) const;
  // Feeds tokens_B through every layer and its cache; returns the last hidden states (B, D).
  Var advance(std::span<const int32_t> tokens_B);
  // The next-token logits of the hidden states x_BD (B, D): B host rows of vocab_valid.
  std::vector<std::vector<double>> logit_rows(const Var& x_BD) const;
};

const char* cache_kind_name(KvCacheKind kind);

}  // namespace hylo
