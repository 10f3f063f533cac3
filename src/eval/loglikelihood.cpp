#include "eval/loglikelihood.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "eval/python_text.h"

namespace hylo {

TokenRequest encode_request(const data::Tokenizer& tokenizer, std::string_view context, std::string_view continuation) {
  const int32_t prefix = tokenizer.end_of_text_id();
  TokenRequest r;
  if (context.empty()) {
    r.continuation = tokenizer.encode(continuation);
    HYLO_CHECK(!r.continuation.empty(), "loglikelihood: empty continuation (nothing to score)");
    // A continuation that starts with the prefix token has it as its context instead.
    if (r.continuation.front() == prefix) r.continuation.erase(r.continuation.begin());
    r.context.push_back(prefix);
    HYLO_CHECK(!r.continuation.empty(), "loglikelihood: the continuation is only the end-of-text token");
    return r;
  }
  const std::string_view kept = pytext::rstrip(context);
  HYLO_CHECK(!kept.empty(), "loglikelihood: the context is only whitespace");
  const std::string moved = std::string(context.substr(kept.size())) + std::string(continuation);
  const std::vector<int32_t> whole = tokenizer.encode(std::string(kept) + moved);
  r.context = tokenizer.encode(kept);
  HYLO_CHECK(whole.size() > r.context.size(), "loglikelihood: empty continuation after the context '{}'", kept);
  r.continuation.assign(whole.begin() + ptrdiff_t(r.context.size()), whole.end());
  return r;
}

std::vector<TokenRequest> rolling_windows(std::span<const int32_t> tokens, int32_t prefix_token, int max_seq_len,
                                          int context_len) {
  HYLO_CHECK(context_len >= 1 && context_len <= max_seq_len, "rolling windows: context_len {} not in [1, {}]",
             context_len, max_seq_len);
  std::vector<TokenRequest> windows;
  if (tokens.empty()) return windows;
  const size_t L = size_t(max_seq_len), n = tokens.size();
  const size_t pred_len = L - size_t(context_len) + 1;
  const size_t first = std::min(L, n);
  windows.push_back({{prefix_token}, {tokens.begin(), tokens.begin() + ptrdiff_t(first)}});
  for (size_t predicted = first; predicted < n;) {
    const size_t count = std::min(n - predicted, pred_len), end = predicted + count;
    // The window reads tokens [end - L - 1, end - 1) and predicts the last `count` of [.., end);
    // made disjoint, its context is what comes before them.
    windows.push_back({{tokens.begin() + ptrdiff_t(end - L - 1), tokens.begin() + ptrdiff_t(end - count)},
                       {tokens.begin() + ptrdiff_t(end - count), tokens.begin() + ptrdiff_t(end)}});
    predicted += count;
  }
  return windows;
}

std::vector<SpanScore> score_requests(const Transformer& model, const std::vector<TokenRequest>& requests,
                                      int max_length, int vocab_valid, Device device, int max_batch) {
  std::vector<ScoredSequence> sequences;
  sequences.reserve(requests.size());
  for (const TokenRequest& r : requests) {
    const size_t count = r.continuation.size();
    HYLO_CHECK(!r.context.empty() && count > 0, "loglikelihood: a request needs a context and a continuation");
    HYLO_CHECK(count <= size_t(max_length), "loglikelihood: a continuation of {} tokens is longer than max_length {}",
               count, max_length);
    // (context + continuation)[-(max_length + 1):]; the last token is read by no scored row.
    const size_t take_context = std::min(r.context.size(), size_t(max_length) + 1 - count);
    ScoredSequence s;
    s.ids.assign(r.context.end() - ptrdiff_t(take_context), r.context.end());
    s.ids.insert(s.ids.end(), r.continuation.begin(), r.continuation.end());
    s.first = int(take_context);
    s.count = int(count);
    sequences.push_back(std::move(s));
  }
  return score_sequences(model, sequences, vocab_valid, device, max_batch);
}

}  // namespace hylo
