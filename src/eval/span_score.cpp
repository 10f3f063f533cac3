#include "eval/span_score.h"

#include <algorithm>
#include <cmath>

#include "autograd/variable.h"
#include "core/error.h"
#include <fmt/format.h>

namespace hylo {

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
  std::vector<SpanScore> scores;
  if (sequences.empty()) return scores;
  NoGradGuard no_grad;
  const int T = int(sequences.front().ids.size());
  const int64_t V = model.config().vocab_size;
  const int64_t cap = std::max<int64_t>(1, (int64_t(1) << 28) / (int64_t(T) * V));
  const int B_max = int(std::clamp<int64_t>(cap, 1, std::max(1, max_batch)));
  for (size_t at = 0; at < sequences.size(); at += size_t(B_max)) {
    const int B = int(std::min(sequences.size() - at, size_t(B_max)));
    std::vector<int32_t> ids;
    ids.reserve(size_t(B) * size_t(T));
    for (int b = 0; b < B; ++b) {
      const ScoredSequence& s = sequences[at + size_t(b)];
      HYLO_CHECK(int(s.ids.size()) == T, "score_sequences: sequence of {} tokens among sequences of {}", s.ids.size(), T);
      HYLO_CHECK(s.first >= 1 && s.count >= 1 && s.first + s.count <= T, "score_sequences: span [{}, {}) of {} tokens",
                 s.first, s.first + s.count, T);
      ids.insert(ids.end(), s.ids.begin(), s.ids.end());
    }
    const Tensor logits_NV = model.forward(Tensor::from_vector(ids, {B, T}).to(device)).value();  // (B*T, V)
    for (int b = 0; b < B; ++b) {
      const ScoredSequence& s = sequences[at + size_t(b)];
      const int64_t row = int64_t(b) * T + s.first - 1;
      const std::vector<float> rows =
          logits_NV.slice(0, row, row + s.count).to(Device::cpu).to(DType::f32).to_vector<float>();
      scores.push_back(score_span(rows, int(V), vocab_valid,
                                  std::span<const int32_t>(s.ids).subspan(size_t(s.first), size_t(s.count))));
    }
  }
  return scores;
}

}  // namespace hylo
