// Incremental decoding and sampling (see generate.h).
#include "nn/generate.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "ops/ops.h"

namespace hylo {

const char* cache_kind_name(KvCacheKind kind) {
  switch (kind) {
    case KvCacheKind::pbb: return "pbb";
    case KvCacheKind::swa_ring: return "swa";
    case KvCacheKind::swa_linear: return "swa-linear";
    case KvCacheKind::full: return "full";
  }
  return "?";
}

void check_sampling_options(const SamplingOptions& o) {
  HYLO_CHECK(std::isfinite(o.temperature) && o.temperature >= 0, "--temperature must be >= 0 (0 = greedy), got {}",
             o.temperature);
  HYLO_CHECK(o.top_k >= 0, "--top-k must be >= 0 (0 = all tokens), got {}", o.top_k);
  HYLO_CHECK(o.top_p > 0 && o.top_p <= 1, "--top-p must be in (0, 1], got {}", o.top_p);
}

int32_t sample_token(std::span<const double> logits, const SamplingOptions& o, Rng& rng) {
  check_sampling_options(o);
  const int n = int(logits.size());
  HYLO_CHECK(n > 0, "sample_token: empty logits");
  if (o.temperature == 0) return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());

  // Candidates most likely first; equal logits keep id order so the draw is reproducible.
  std::vector<int32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  const int keep_k = o.top_k > 0 ? std::min(o.top_k, n) : n;
  std::partial_sort(order.begin(), order.begin() + keep_k, order.end(), [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
  });
  order.resize(size_t(keep_k));

  const double top = logits[size_t(order[0])];
  HYLO_CHECK(std::isfinite(top), "sample_token: the largest logit is {} (a diverged model?)", top);
  std::vector<double> p(order.size());
  double total = 0;
  for (size_t i = 0; i < order.size(); ++i) total += (p[i] = std::exp((logits[size_t(order[i])] - top) / o.temperature));
  // Nucleus: the shortest prefix whose probability reaches top_p (always at least one token).
  size_t keep = order.size();
  if (o.top_p < 1) {
    double cumulative = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      cumulative += p[i] / total;
      if (cumulative >= o.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept = 0;
  for (size_t i = 0; i < keep; ++i) kept += p[i];
  const double u = rng.uniform() * kept;
  double acc = 0;
  for (size_t i = 0; i < keep; ++i)
    if (u < (acc += p[i])) return order[i];
  return order[keep - 1];  // u within rounding of the total
}

namespace {

KvSlotMap slot_map_for(const AttnMask& mask, int max_len) {
  switch (mask.kind) {
    case MaskKind::pbb: return KvSlotMap::pbb(mask.block, mask.bridge);  // Flash-PBB: b slots
    case MaskKind::swa: return KvSlotMap::swa_ring(mask.window);         // Flash-SWA: W-slot ring
    case MaskKind::full: break;
  }
  return KvSlotMap::full(max_len);
}

}  // namespace

Generator::Generator(const Transformer& model, int64_t max_len, int vocab_valid)
    : model_(model), vocab_valid_(vocab_valid) {
  HYLO_CHECK(max_len >= 1, "generate: max length must be >= 1, got {}", max_len);
  // Cache slots and positions are int: a longer request would wrap into a negative length.
  HYLO_CHECK(max_len <= std::numeric_limits<int32_t>::max(),
             "generate: {} positions (prompt + new tokens) exceed the longest sequence the caches hold ({})", max_len,
             std::numeric_limits<int32_t>::max());
  HYLO_CHECK(vocab_valid >= 1 && vocab_valid <= model.config().vocab_size,
             "generate: valid vocabulary {} outside [1, model vocab_size {}]", vocab_valid, model.config().vocab_size);
  // The caches hold k/v in the model's compute dtype on its device: what its projections produce.
  const Tensor& embed = model.parameters().front().var.value();
  const ModelConfig& c = model.config();
  for (int l = 0; l < model.n_layers(); ++l)
    caches_.emplace_back(slot_map_for(model.layer_mask(l), int(max_len)), 1, c.kv_heads(), c.head_dim(), embed.dtype(),
                         embed.device());
}

std::vector<double> Generator::step(int32_t token) {
  NoGradGuard no_grad;
  const Var x = advance(token);
  std::vector<double> logits = model_.logits(x).value().to(Device::cpu).to(DType::f64).to_vector<double>();
  logits.resize(size_t(vocab_valid_));  // padding rows are no tokens
  return logits;
}

Var Generator::advance(int32_t token) {
  HYLO_CHECK(token >= 0 && token < vocab_valid_, "generate: token id {} outside the vocabulary [0, {})", token,
             vocab_valid_);
  NoGradGuard no_grad;
  const ModelConfig& c = model_.config();
  const int64_t H = c.n_heads, Hkv = c.kv_heads(), hd = c.head_dim();
  const int64_t t = position_;
  const Device device = model_.parameters().front().var.value().device();
  Var x = model_.embed(Tensor::from_vector(std::vector<int32_t>{token}, {1}).to(device));  // (1, D)
  for (int l = 0; l < model_.n_layers(); ++l) {
    const Transformer::AttentionInputs in = model_.attention_inputs(l, x, 1, 1, int(t));
    KvCache& cache = caches_[size_t(l)];
    // (B, T, H, hd) with B = T = 1 is the (B, H, hd) token layout of the cache ops.
    cache.append(t, in.k.value().contiguous().view({1, Hkv, hd}), in.v.value().contiguous().view({1, Hkv, hd}));
    const Tensor a_1Q = cache.attend(t, in.q.value().contiguous().view({1, H, hd})).view({1, H * hd});
    x = model_.ffn_residual(l, model_.attention_residual(l, x, Var(a_1Q)), nullptr);
  }
  ++position_;
  return x;
}

std::vector<double> Generator::prefill(std::span<const int32_t> prompt) {
  HYLO_CHECK(!prompt.empty(), "generate: the prompt is empty");
  for (size_t i = 0; i + 1 < prompt.size(); ++i) advance(prompt[i]);  // their logits are not needed
  return step(prompt.back());
}

std::vector<int32_t> Generator::generate(std::span<const int32_t> prompt, int count, const SamplingOptions& options,
                                         Rng& rng) {
  check_sampling_options(options);
  HYLO_CHECK(count >= 0, "generate: token count must be >= 0, got {}", count);
  std::vector<double> logits = prefill(prompt);
  std::vector<int32_t> out;
  for (int i = 0; i < count; ++i) {
    out.push_back(sample_token(logits, options, rng));
    if (i + 1 < count) logits = step(out.back());
  }
  return out;
}

std::vector<LayerCacheInfo> Generator::caches() const {
  std::vector<LayerCacheInfo> info;
  for (size_t l = 0; l < caches_.size(); ++l)
    info.push_back({int(l), caches_[l].slot_map().kind(), caches_[l].slots(), caches_[l].allocated_bytes()});
  return info;
}

}  // namespace hylo
