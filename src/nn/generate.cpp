// Incremental decoding and sampling (see generate.h).
#include "nn/generate.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "ops/decode.h"
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
  if (o.temperature == 0) return first_argmax(logits.data(), n);

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

Generator::Generator(const Transformer& model, int64_t max_len, int vocab_valid, int batch)
    : model_(model), vocab_valid_(vocab_valid), batch_(batch) {
  HYLO_CHECK(max_len >= 1, "generate: max length must be >= 1, got {}", max_len);
  // Cache slots and positions are int: a longer request would wrap into a negative length.
  HYLO_CHECK(max_len <= std::numeric_limits<int32_t>::max(),
             "generate: {} positions (prompt + new tokens) exceed the longest sequence the caches hold ({})", max_len,
             std::numeric_limits<int32_t>::max());
  HYLO_CHECK(vocab_valid >= 1 && vocab_valid <= model.config().vocab_size,
             "generate: valid vocabulary {} outside [1, model vocab_size {}]", vocab_valid, model.config().vocab_size);
  HYLO_CHECK(batch >= 1, "generate: batch must be >= 1, got {}", batch);
  // The caches hold k/v in the model's compute dtype on its device: what its projections produce.
  const Tensor& embed = model.parameters().front().var.value();
  const ModelConfig& c = model.config();
  for (int l = 0; l < model.n_layers(); ++l)
    caches_.emplace_back(slot_map_for(model.layer_mask(l), int(max_len)), batch, c.kv_heads(), c.head_dim(),
                         embed.dtype(), embed.device());
}

std::vector<std::vector<double>> Generator::logit_rows(const Var& x_BD) const {
  const Tensor logits_BV = model_.logits(x_BD).value().to(Device::cpu).contiguous().to(DType::f64);
  std::vector<std::vector<double>> rows;
  for (int64_t b = 0; b < logits_BV.size(0); ++b) {
    const double* row = logits_BV.data<double>() + b * logits_BV.size(1);
    rows.emplace_back(row, row + vocab_valid_);  // padding ids are no tokens
  }
  return rows;
}

std::vector<std::vector<double>> Generator::step(std::span<const int32_t> tokens_B) {
  NoGradGuard no_grad;
  return logit_rows(advance(tokens_B));
}

std::vector<int32_t> Generator::greedy_step(std::span<const int32_t> tokens_B) {
  NoGradGuard no_grad;
  return greedy_tokens(model_.logits(advance(tokens_B)).value(), vocab_valid_);
}

void Generator::check_tokens(std::span<const int32_t> tokens) const {
  for (const int32_t token : tokens)
    HYLO_CHECK(token >= 0 && token < vocab_valid_, "generate: token id {} outside the vocabulary [0, {})", token,
               vocab_valid_);
}

Var Generator::advance(std::span<const int32_t> tokens_B) {
  HYLO_CHECK(int64_t(tokens_B.size()) == batch_, "generate: {} tokens fed to a batch of {} sequences", tokens_B.size(),
             batch_);
  check_tokens(tokens_B);
  NoGradGuard no_grad;
  const ModelConfig& c = model_.config();
  const int64_t B = batch_, H = c.n_heads, Hkv = c.kv_heads(), hd = c.head_dim();
  const int64_t t = position_;
  const Device device = model_.parameters().front().var.value().device();
  const std::vector<int32_t> ids(tokens_B.begin(), tokens_B.end());
  Var x = model_.embed(Tensor::from_vector(ids, {B}).to(device));  // (B, D)
  for (int l = 0; l < model_.n_layers(); ++l) {
    const Transformer::AttentionInputs in = model_.attention_inputs(l, x, batch_, 1, int(t));
    KvCache& cache = caches_[size_t(l)];
    // (B, T, H, hd) with T = 1 is the (B, H, hd) token layout of the cache ops.
    cache.append(t, in.k.value().contiguous().view({B, Hkv, hd}), in.v.value().contiguous().view({B, Hkv, hd}));
    const Tensor a_BQ = cache.attend(t, in.q.value().contiguous().view({B, H, hd})).view({B, H * hd});
    x = model_.ffn_residual(l, model_.attention_residual(l, x, Var(a_BQ)), nullptr);
  }
  ++position_;
  return x;
}

std::vector<std::vector<double>> Generator::prefill(std::span<const std::vector<int32_t>> prompts_B) {
  HYLO_CHECK(int64_t(prompts_B.size()) == batch_, "generate: {} prompts for a batch of {} sequences",
             prompts_B.size(), batch_);
  HYLO_CHECK(position_ == 0, "generate: prefill starts the sequences, but {} positions were already fed", position_);
  const int64_t B = batch_, T = int64_t(prompts_B.front().size());
  HYLO_CHECK(T > 0, "generate: the prompt is empty");
  std::vector<int32_t> ids_BT;
  for (const std::vector<int32_t>& prompt : prompts_B) {
    HYLO_CHECK(int64_t(prompt.size()) == T, "generate: prompts of {} and {} tokens in one batch (decoding keeps them "
               "in lockstep: give them one length)", T, prompt.size());
    check_tokens(prompt);
    ids_BT.insert(ids_BT.end(), prompt.begin(), prompt.end());
  }
  // One forward over the whole prompt, as training runs it (the layers' attention masks are the
  // caches' own), each layer's k and v filling its cache: the caches then hold what T decode steps
  // would have written, at the cost of one forward, not T.
  NoGradGuard no_grad;
  const ModelConfig& c = model_.config();
  const Device device = model_.parameters().front().var.value().device();
  Var x = model_.embed(Tensor::from_vector(ids_BT, {B * T}).to(device));  // (B T, D)
  for (int l = 0; l < model_.n_layers(); ++l)
    x = model_.block_forward(l, x, int(B), int(T), nullptr, [&](const Var& k, const Var& v) {
      // (B, T, Hkv, hd) -> (T, B, Hkv, hd), as KvCache::fill takes it.
      caches_[size_t(l)].fill(k.value().transpose(0, 1), v.value().transpose(0, 1));
    });
  position_ = T;
  // The last position of every sequence: rows T - 1, 2T - 1, ... of x.
  const Tensor last_BD = x.value().view({B, T, c.d_model}).slice(1, T - 1, T).contiguous().view({B, c.d_model});
  return logit_rows(Var(last_BD));
}

std::vector<std::vector<int32_t>> Generator::generate(std::span<const std::vector<int32_t>> prompts_B, int count,
                                                      const SamplingOptions& options, Rng& rng) {
  check_sampling_options(options);
  HYLO_CHECK(count >= 0, "generate: token count must be >= 0, got {}", count);
  std::vector<std::vector<double>> logits = prefill(prompts_B);
  std::vector<std::vector<int32_t>> out(prompts_B.size());
  std::vector<int32_t> next_B(prompts_B.size());
  for (int i = 0; i < count; ++i) {
    for (size_t b = 0; b < out.size(); ++b) out[b].push_back(next_B[b] = sample_token(logits[b], options, rng));
    if (i + 1 < count) logits = step(next_B);
  }
  return out;
}

std::vector<double> Generator::step(int32_t token) { return std::move(step(std::span(&token, 1)).front()); }

std::vector<double> Generator::prefill(std::span<const int32_t> prompt) {
  const std::vector<std::vector<int32_t>> one{{prompt.begin(), prompt.end()}};
  return std::move(prefill(one).front());
}

std::vector<int32_t> Generator::generate(std::span<const int32_t> prompt, int count, const SamplingOptions& options,
                                         Rng& rng) {
  const std::vector<std::vector<int32_t>> one{{prompt.begin(), prompt.end()}};
  return std::move(generate(one, count, options, rng).front());
}

std::vector<LayerCacheInfo> Generator::caches() const {
  std::vector<LayerCacheInfo> info;
  for (size_t l = 0; l < caches_.size(); ++l)
    info.push_back({int(l), caches_[l].slot_map().kind(), caches_[l].slots(), caches_[l].allocated_bytes()});
  return info;
}

}  // namespace hylo
