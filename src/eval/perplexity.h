// Perplexity of any UTF-8 text (`hylo eval --tasks ppl --text FILE...`, SPEC §5), scored as
// lm-evaluation-harness scores its loglikelihood_rolling tasks (wikitext; lm_eval/api/task.py
// PerplexityTask, lm_eval/api/metrics.py): each document's tokens in disjoint windows
// (eval/loglikelihood.h), summed log-likelihood ll per document, and over all documents
//   word_perplexity = exp(-sum ll / sum words), words = len(re.split(r"\s+", document)),
//   byte_perplexity = exp(-sum ll / sum bytes), bits_per_byte = -sum ll / sum bytes / ln 2,
// plus token_perplexity = exp(-sum ll / sum tokens), which lm-eval does not report (it depends on
// the tokenizer; the other three do not).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "nn/transformer.h"

namespace hylo {

struct TextDocument {
  std::string name;  // FILE, or FILE:LINE for a line of a .jsonl file
  std::string text;
};

// A .jsonl file gives one document per line (its "text"); any other file is one document. Text
// must be UTF-8: an error names the file (and line) and the byte where it is not.
std::vector<TextDocument> read_text_documents(const std::vector<std::string>& paths);

struct DocumentScore {
  double logprob = 0;  // natural log, summed over the document's tokens
  int64_t tokens = 0, words = 0, bytes = 0;
  int windows = 0;
};

struct PerplexityOptions {
  int max_length = 0;   // tokens the model reads per window: the model's config.train.seq_len
  int context_len = 1;  // lm-eval's huggingface model: a later window conditions on the token before it
  int batch = 8;
};

struct PerplexityResult {
  std::vector<std::string> names;
  std::vector<DocumentScore> documents;
  int max_length = 0;
  DocumentScore total() const;
  double word_perplexity() const;
  double byte_perplexity() const;
  double bits_per_byte() const;
  double token_perplexity() const;
  std::string table() const;
};

PerplexityResult evaluate_perplexity(const Transformer& model, const data::Tokenizer& tokenizer,
                                     const std::vector<TextDocument>& documents, const PerplexityOptions& options,
                                     Device device);

}  // namespace hylo
