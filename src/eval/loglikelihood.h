// lm-evaluation-harness's two model requests, on hylo's model (SPEC §5):
//   loglikelihood(context, continuation): the summed log-probability of the continuation's tokens
//     and whether greedy decoding reproduces them;
//   loglikelihood_rolling(text): the summed log-probability of every token of a text of any length.
// Definitions matched (lm-evaluation-harness, lm_eval/api/model.py and lm_eval/models/huggingface.py
// `_encode_pair`, `loglikelihood`, `loglikelihood_rolling`, `_loglikelihood_tokens`; lm_eval/utils.py
// `get_rolling_token_windows`, `make_disjoint_window`):
//   - trailing whitespace of the context moves to the front of the continuation; the continuation's
//     tokens are those of tok(context + continuation) after the first len(tok(context)); an empty
//     context becomes the end-of-text token (the model's "prefix token");
//   - the model reads (context + continuation)[-(max_length + 1):][:-1]: a long context is cut from
//     the left, and the last len(continuation) logit rows score the continuation;
//   - a text is cut into disjoint windows predicting max_length tokens each; the first reads the
//     prefix token and its own tokens, each later one the context_len tokens before it (the model
//     sees max_length tokens every time). lm-eval's huggingface model uses context_len = 1.
#pragma once
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"
#include "eval/span_score.h"
#include "nn/transformer.h"

namespace hylo {

struct TokenRequest {
  std::vector<int32_t> context;       // never empty
  std::vector<int32_t> continuation;  // the tokens scored, never empty
};

// lm-eval's tokenisation of a (context, continuation) pair (rules above). Text may hold
// `<|endoftext|>`, which becomes the special token, as the Hugging Face GPT-2 tokenizer makes it.
TokenRequest encode_request(const data::Tokenizer& tokenizer, std::string_view context, std::string_view continuation);

// get_rolling_token_windows(tokens, prefix_token, max_seq_len, context_len) with each window made
// disjoint: every token of `tokens` is in exactly one window's continuation, in order.
std::vector<TokenRequest> rolling_windows(std::span<const int32_t> tokens, int32_t prefix_token, int max_seq_len,
                                          int context_len = 1);

// Scores every request (SpanScore: summed log-prob, exact() = greedy decoding reproduces the
// continuation), max_batch sequences per forward pass. A continuation longer than max_length is an
// error, as it is in lm-eval.
std::vector<SpanScore> score_requests(const Transformer& model, const std::vector<TokenRequest>& requests,
                                      int max_length, int vocab_valid, Device device, int max_batch);

}  // namespace hylo
