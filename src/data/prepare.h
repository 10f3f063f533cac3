// `hylo data prepare` (SPEC §4): a corpus of files, folders or globs (txt, jsonl, jsonl.gz,
// jsonl.zst; data/corpus_reader.h) streamed through the tokenizer (data/prepare_pipeline.h) into
// numbered shards `train_000000.bin`, ..., `val_000000.bin`, ... of at most shard_tokens tokens,
// plus `manifest.json` (inputs with SHA-256, documents, tokens per shard, the split rule, the
// tokenizer) and `val_documents.tsv` (one row per validation document, which eval/last_word.h
// reads to find each document's source). Every document is preceded by one 50256.
//
// Split, deterministic and by whole documents, decided as each document streams past:
//   val_fraction f (per input): document i of an input goes to val when floor((i+1)f + u) >
//     floor(i f + u), u in [0, 1-f) drawn from (seed, input). A systematic sample: floor(n f + u)
//     of the input's n documents, spread evenly over it, never its first one.
//   val_docs N (over the whole corpus, counted first): document i is val when
//     floor(((i+1)N + s)/n) > floor((iN + s)/n), s in [0, n-N) from the seed: exactly N.
// When that leaves validation empty (fewer than two documents, or too small a fraction) the last
// ceil(f x tokens) tokens of the training stream (at least 65,537 or a tenth, whichever is fewer:
// data/shard_output.h) become validation instead (a token range). An
// empty corpus, an empty training split or an empty validation split is an error here, never at
// step 50.
//
// The output appears only when complete: shards are written to a staging folder inside out_dir
// and moved in at the end, replacing the numbered shards and manifest of an earlier prepare
// there. A failure leaves out_dir as it was.
//
// The pinned sources of scripts/fetch_data.sh are presets of the same path (preset_options).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/corpus_reader.h"
#include "data/shard_output.h"

namespace hylo::data {

inline constexpr const char* kDefaultTokenizerPath = "data/tokenizer/r50k_base.tiktoken";

struct PrepareProgress {
  uint64_t text_bytes = 0, tokens = 0, documents = 0;
  double seconds = 0;
};

struct CorpusOptions {
  std::vector<std::string> inputs;
  // Per input, its name in val_documents.tsv's source column; default: the input's file name.
  std::vector<std::string> labels;
  std::string out_dir = "data/tokens";
  CorpusFormat format = CorpusFormat::auto_detect;
  std::string text_key = "text";
  std::string doc_separator;  // txt: empty = one document per file
  int workers = 0;            // 0 = all cores
  size_t batch_bytes = size_t(1) << 20;  // text per tokenizing batch (tests make it small)
  uint64_t shard_tokens = 100'000'000;
  double val_fraction = 0.005;
  uint64_t val_docs = 0;  // > 0: exactly this many validation documents instead of a fraction
  uint64_t seed = 1234;
  std::string tokenizer = kDefaultTokenizerPath;
  std::string preset;  // recorded in the manifest when the inputs came from one
  std::function<void(const PrepareProgress&)> progress;  // about every two seconds, from this thread
};

struct InputSummary {
  std::string input, label;
  uint64_t files = 0, raw_bytes = 0, text_bytes = 0, empty_documents = 0;
  uint64_t documents[2] = {0, 0};  // [train, val]
  uint64_t tokens[2] = {0, 0};     // without the separators
};

struct PrepareSummary {
  std::vector<InputSummary> inputs;
  std::vector<ShardSummary> shards;
  bool token_range_split = false;  // validation is the training stream's tail, not documents
  uint64_t tokens[2] = {0, 0};     // [train, val], separators included: what the shards hold
  double seconds = 0;
};

PrepareSummary prepare_corpus(const CorpusOptions& options);

// The pinned sources' names behind "core", "all" or "a,b"; throws on an unknown name.
std::vector<std::string> resolve_sources(const std::string& spec);
// A preset: raw_dir/<source> for each source (fetched by scripts/fetch_data.sh, checked), as txt
// with one document per file, labelled by source, 6% of each source's documents to validation
// (at least one of gutenberg's 18 books, which eval/last_word.h reads).
CorpusOptions preset_options(const std::string& sources, const std::string& raw_dir = "data/raw");

// Every document of the given sources, whole and in preset order (for `hylo data bench`).
struct Document {
  size_t source;
  std::string name;
  std::string text;
};
std::vector<Document> read_documents(const std::string& raw_dir, const std::vector<std::string>& sources);

}  // namespace hylo::data
