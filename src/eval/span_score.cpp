#include "eval/span_score.h"

#include <algorithm>
#include <numeric>

#include "autograd/variable.h"
#include "core/error.h"
#include "ops/decode.h"

namespace hylo {

SpanScore score_span(const Tensor& rows_nV, int vocab_valid, std::span<const int32_t> targets) {
  HYLO_CHECK(rows_nV.dim() == 2 && rows_nV.size(0) == int64_t(targets.size()), "score_span: logits {} for {} targets",
             shape_str(rows_nV.shape()), targets.size());
  for (const int32_t t : targets)
    HYLO_CHECK(t >= 0 && t < vocab_valid, "score_span: target {} outside [0, {})", t, vocab_valid);
  const std::vector<int32_t> best = greedy_tokens(rows_nV, vocab_valid);
  const std::vector<double> logprobs = target_logprobs(rows_nV, targets, vocab_valid);
  SpanScore s;
  s.tokens = int(targets.size());
  for (size_t i = 0; i < targets.size(); ++i) {
    s.logprob += logprobs[i];
    s.correct += best[i] == targets[i];
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
    for (int b = 0; b < B; ++b) {
      const ScoredSequence& s = sequences[order[at + size_t(b)]];
      const int64_t row = int64_t(b) * T + s.first - 1;
      scores[order[at + size_t(b)]] = score_span(logits_NV.slice(0, row, row + s.count), vocab_valid,
                                                 std::span<const int32_t>(s.ids).subspan(size_t(s.first), size_t(s.count)));
    }
    at += size_t(B);
  }
  return scores;
}

}  // namespace hylo
