// LAMBADA-style last-word prediction (SPEC §5) on held-out text: given a passage that ends just
// before a sentence's final word, predict the whole word.
//
// A target word, in GPT-2 BPE tokens, is: a token " xyz" (space + ASCII letters) followed by zero
// or more letter-only tokens, all letters lowercase, and then a token starting with '.', '!' or
// '?'. Lowercase keeps out what only looks sentence-final in these texts: speaker tags ("Ham."),
// stage directions ("Exit."), initials and abbreviations ("Mr."). The passage is the L tokens of
// the same document ending with the word's last token (L = train.seq_len), so every passage has
// the full context the model was trained with; the punctuation is not part of it.
//
// Score (teacher-forced, see train/span_score.h): accuracy = every token of the word is the
// argmax given the true prefix (= greedy decoding produces the word), and perplexity over the
// word's tokens. Also reported for the "in context" subset, where the word's tokens already occur
// earlier in the passage (LAMBADA's targets mostly do: a long-context signal).
//
// Documents: by default the val shard's. It has no source labels, but `hylo data prepare` writes
// manifest.tsv beside it with the val rows in shard order; when those rows match the shard's
// documents one for one (count and token counts) only `source` (gutenberg) documents are used,
// otherwise all of the shard's documents, and the result says which. Or held-out text in no
// training split (`hylo eval --tasks lastword --text FILE...`, e.g. the Austen novels of
// scripts/fetch_data.sh --heldout), tokenized here, a file (or jsonl line) a document.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "data/shard.h"
#include "data/tokenizer.h"
#include "nn/transformer.h"
#include "config/config.h"
#include "eval/perplexity.h"
#include "eval/span_score.h"

namespace hylo {

struct ShardDocument {
  uint64_t begin = 0, end = 0;  // tokens [begin, end) of the shard, its separator excluded
  std::string source, name;     // from the manifest; empty when it is missing or does not match
};

// The documents of a shard (each starts after a 50256), labelled from dir(shard)/manifest.tsv
// when that file matches the shard.
std::vector<ShardDocument> shard_documents(const data::ShardReader& shard);

// Tokens [0, word.size()) form a target word when followed by `next` (rule above).
bool is_last_word(const data::Tokenizer& tokenizer, std::span<const int32_t> word, int32_t next);

struct LastWordOptions {
  int seq_len = 0;  // 0: config.train.seq_len
  int passages = 64;
  uint64_t seed = 0x1a57;
  std::string source = "gutenberg";
  int batch = 8;
};

struct LastWordPassage {
  uint64_t word_begin = 0, word_end = 0;  // shard indices of the word's tokens
  int word_first = 0, word_tokens = 0;    // the word's place in ids: [word_first, word_first + word_tokens)
  bool in_context = false;
  std::vector<int32_t> ids;  // (L), ending with the word
};

struct LastWordSet {
  std::string documents;  // which documents the passages come from, in words
  int64_t candidates = 0;  // target words with a full passage before them
  std::vector<LastWordPassage> passages;  // a seeded sample of `passages`, in shard order
};

// The tokens passages are cut from, document after document (docs index into tokens).
struct LastWordSource {
  std::vector<int32_t> tokens;
  std::vector<ShardDocument> docs;
  std::string documents;  // which documents, in words
};

// The val shard's documents, only `source`'s when the manifest labels them (see above).
LastWordSource last_word_source(const data::ShardReader& shard, const std::string& source);
// Held-out text documents, tokenized.
LastWordSource last_word_source(const std::vector<TextDocument>& texts, const data::Tokenizer& tokenizer);

LastWordSet build_last_word_set(const LastWordSource& source, const data::Tokenizer& tokenizer,
                                const LastWordOptions& options);

struct LastWordResult {
  std::string documents;
  int64_t candidates = 0;
  int seq_len = 0, n = 0, exact = 0, word_tokens = 0, in_context_n = 0, in_context_exact = 0;
  double logprob = 0, in_context_logprob = 0;
  int in_context_tokens = 0;
  double accuracy() const { return n ? double(exact) / n : 0.0; }
  double perplexity() const;             // exp(-mean log-prob per word token)
  double in_context_accuracy() const { return in_context_n ? double(in_context_exact) / in_context_n : 0.0; }
  double in_context_perplexity() const;
  std::string table() const;
  nlohmann::ordered_json json() const;
};

LastWordResult tally_last_word(const LastWordSet& set, const std::vector<SpanScore>& scores, int seq_len);

// On `texts` when there are any, else on the config's val shard.
LastWordResult evaluate_last_word(const Transformer& model, const Config& config, Device device,
                                  const data::Tokenizer& tokenizer, LastWordOptions options,
                                  const std::vector<TextDocument>& texts = {});

}  // namespace hylo
