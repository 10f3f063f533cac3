#include "eval/span_score.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "autograd/variable.h"
#include "core/error.h"
#include "core/parallel_for.h"
#include <fmt/format.h>

namespace hylo {

namespace {

// Rows scored per task on the CPU: a continuation of retrieval or last-word size is one chunk, so
// its log-prob is the single sum it always was.
constexpr int kRowsPerChunk = 64;

}  // namespace

SpanScore score_span(std::span<const float> rows_nV, int vocab, int vocab_valid, std::span<const int32_t> targets) {
  const size_t n = targets.size();
  HYLO_CHECK(vocab_valid > 0 && vocab_valid <= vocab, "score_span: vocab_valid {} not in [1, {}]", vocab_valid, vocab);
  HYLO_CHECK(rows_nV.size() == n * size_t(vocab), "score_span: {} logits for {} rows of {}", rows_nV.size(), n, vocab);
  SpanScore s;
  s.tokens = int(n);
  for (size_t i = 0; i < n; ++i) {
    const float* row = rows_nV.data() + i * size_t(vocab);
    const int32_t target = targets[i];
    HYLO_CHECK(target >= 0 && target < vocab_valid, "score_span: target {} outside [0, {})", target, vocab_valid);
    int best = 0;
    for (int v = 1; v < vocab_valid; ++v)
      if (row[v] > row[best]) best = v;
    // log-sum-exp in double around the max: f32 logits of a trained model can reach the hundreds.
    double z = 0;
    for (int v = 0; v < vocab_valid; ++v) z += std::exp(double(row[v]) - double(row[best]));
    s.logprob += double(row[target]) - double(row[best]) - std::log(z);
    if (best == target) ++s.correct;
  }
  return s;
}

std::vector<SpanScore> score_sequences(const Transformer& model, const std::vector<ScoredSequence>& sequences,
                                       int vocab_valid, Device device, int max_batch) {
  std::vector<SpanScore> scores(sequences.size());
  if (sequences.empty()) return scores;
  NoGradGuard no_grad;
  const int64_t V = model.config().vocab_size;
  for (const ScoredSequence& s : sequences)
    HYLO_CHECK(s.first >= 1 && s.count >= 1 && s.first + s.count <= int(s.ids.size()),
               "score_sequences: span [{}, {}) of {} tokens", s.first, s.first + s.count, s.ids.size());
  std::vector<size_t> order(sequences.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return sequences[a].ids.size() > sequences[b].ids.size(); });
  for (size_t at = 0; at < order.size();) {
    const int T = int(sequences[order[at]].ids.size());  // the batch's longest
    const int64_t cap = std::max<int64_t>(1, (int64_t(1) << 28) / (int64_t(T) * V));
    const int B = int(std::min<int64_t>({int64_t(order.size() - at), cap, std::max(1, max_batch)}));
    std::vector<int32_t> ids(size_t(B) * size_t(T), 0);
    for (int b = 0; b < B; ++b) {
      const std::vector<int32_t>& s = sequences[order[at + size_t(b)]].ids;
      std::copy(s.begin(), s.end(), ids.begin() + ptrdiff_t(b) * T);
    }
    const Tensor logits_NV = model.forward(Tensor::from_vector(ids, {B, T}).to(device)).value();  // (B*T, V)
    std::vector<std::vector<float>> rows(static_cast<size_t>(B));
    std::vector<std::pair<int, int>> chunks;  // (b, first row of the chunk within the span)
    for (int b = 0; b < B; ++b) {
      const ScoredSequence& s = sequences[order[at + size_t(b)]];
      const int64_t row = int64_t(b) * T + s.first - 1;
      rows[size_t(b)] = logits_NV.slice(0, row, row + s.count).to(Device::cpu).to(DType::f32).to_vector<float>();
      for (int r = 0; r < s.count; r += kRowsPerChunk) chunks.push_back({b, r});
    }
    std::vector<SpanScore> parts(chunks.size());
    parallel_for(chunks.size(), [&](size_t c) {
      const auto [b, r] = chunks[c];
      const ScoredSequence& s = sequences[order[at + size_t(b)]];
      const int n = std::min(kRowsPerChunk, s.count - r);
      parts[c] = score_span(std::span<const float>(rows[size_t(b)]).subspan(size_t(r) * size_t(V), size_t(n) * size_t(V)),
                            int(V), vocab_valid,
                            std::span<const int32_t>(s.ids).subspan(size_t(s.first + r), size_t(n)));
    });
    for (size_t c = 0; c < chunks.size(); ++c) {
      SpanScore& total = scores[order[at + size_t(chunks[c].first)]];
      total.tokens += parts[c].tokens;
      total.correct += parts[c].correct;
      total.logprob += parts[c].logprob;
    }
    at += size_t(B);
  }
  return scores;
}

}  // namespace hylo
