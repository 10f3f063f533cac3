// GPT-2's tokenizer files for Hugging Face (vocab.json, merges.txt, tokenizer_config.json,
// special_tokens_map.json), derived from the tiktoken rank file hylo tokenizes with, so that
// AutoTokenizer reproduces hylo's ids.
//
// GPT-2 is byte-level BPE: each token is a byte string, written in vocab.json over GPT-2's
// byte -> character mapping (data::gpt2_token_text: printable bytes stand for themselves, the
// other 68 become U+0100...U+0143 in byte order, so ' ' is 'Ġ'). tiktoken has no merge list: it
// merges the adjacent pair whose concatenation has the lowest rank. The merge list that does the same is, for every
// token of two or more bytes in rank order, the two tokens that BPE over the token's own bytes,
// with the ranks below the token's, ends on; for r50k_base this is GPT-2's vocab.bpe line for line.
#pragma once
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace hylo {

struct HfTokenizerFiles {
  std::string vocab_json, merges_txt, tokenizer_config_json, special_tokens_map_json;
};

// The merge list of `tokenizer`'s ranks, "left right" per line in rank order (no header).
std::vector<std::string> bpe_merges(const data::Tokenizer& tokenizer);

// `model_max_length` is the tokenizer's nominal context (the run's train.seq_len).
HfTokenizerFiles hf_tokenizer_files(const data::Tokenizer& tokenizer, int model_max_length);

}  // namespace hylo
