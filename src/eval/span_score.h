// Scoring a known continuation under teacher forcing, shared by the retrieval and last-word tasks
// (SPEC §5). The whole sequence, continuation included, goes through one forward pass; the rows
// before each continuation token give its argmax and log-probability. "All argmaxes hit" equals
// "greedy decoding from the prefix reproduces the continuation": if every step's argmax given the
// true prefix is the true token, free-running greedy feeds itself exactly that prefix.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "nn/transformer.h"

namespace hylo {

struct SpanScore {
  int tokens = 0;
  int correct = 0;       // positions whose argmax (ties to the lower id) is the target
  double logprob = 0;    // sum over the span of log softmax(target), natural log
  bool exact() const { return tokens > 0 && correct == tokens; }
};

// rows_nV: n = targets.size() contiguous logit rows (n, V) on any device, row i predicting
// targets[i]. Argmax and softmax run over ids [0, vocab_valid): padding rows of the embedding are
// never a prediction. Both reduce the rows where they are (ops/decode.h: greedy_tokens,
// target_logprobs): on CUDA only 2n numbers reach the host.
SpanScore score_span(const Tensor& rows_nV, int vocab_valid, std::span<const int32_t> targets);

// A sequence whose tokens [first, first + count) are the continuation to score (first >= 1).
struct ScoredSequence {
  std::vector<int32_t> ids;  // (T); the sequences of one call may differ in T
  int first = 1, count = 1;
};

// Runs the model (no grad) over the sequences in batches of at most max_batch (fewer when the
// (B*T, V) logits would pass ~1 GiB) and scores each continuation. Longest first, and each batch is
// padded on the right to its longest: no position of a causal model reads the padding after it.
// Sequences of one length keep their order, so equal-length sets batch as given. Each continuation's
// rows are scored where the logits are (score_span), and its log-probabilities summed in row order
// (the result does not depend on the thread count).
std::vector<SpanScore> score_sequences(const Transformer& model, const std::vector<ScoredSequence>& sequences,
                                       int vocab_valid, Device device, int max_batch = 8);

}  // namespace hylo
