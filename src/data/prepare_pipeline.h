// The tokenizing middle of `hylo data prepare`: one thread reads batches of documents
// (data/corpus_reader.h), a pool of workers parses (jsonl) and tokenizes them, and the caller's
// thread receives the tokenized batches strictly in corpus order. Ids therefore never depend on
// the worker count. At most 4 x workers + 4 batches exist at once, each about `batch_bytes` of text
// (plus any single document longer than that), so memory does not grow with the corpus.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "data/corpus_reader.h"
#include "data/tokenizer.h"

namespace hylo::data {

struct TokenizedBatch {
  RawBatch raw;
  std::vector<int32_t> ids;           // the parts' ids, one after the other (no separators)
  std::vector<uint64_t> part_tokens;  // ids of each part
  std::vector<uint64_t> text_bytes;   // text of each part (a JSON line's text, not the line)
};

struct PipelineOptions {
  int workers = 0;  // 0 = all cores
  std::string text_key = "text";
  size_t batch_bytes = size_t(1) << 20;
};

// Runs the reader and the workers until the corpus is done, calling `consume` for every batch in
// order. The first error of any thread (naming the file, and the line for jsonl) stops them all
// and is rethrown here.
void run_tokenize_pipeline(CorpusReader& reader, const Tokenizer& tokenizer, const PipelineOptions& options,
                           const std::function<void(const TokenizedBatch&)>& consume);

}  // namespace hylo::data
