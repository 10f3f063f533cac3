// Corpus preparation (SPEC §4): the pinned sources' raw files, tokenized, split train/val by whole
// documents per source, written as shards plus a manifest (`hylo data prepare`).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hylo::data {

inline constexpr const char* kDefaultTokenizerPath = "data/tokenizer/r50k_base.tiktoken";

struct PrepareOptions {
  std::string raw_dir = "data/raw";
  std::string sources = "core";  // core, all, or a comma-separated list of source names
  // 5% of each source's tokens, taken as whole documents: ~300k validation tokens on core.
  double val_fraction = 0.05;
  uint64_t seed = 1234;
  std::string out_dir = "data/tokens";
  std::string tokenizer = kDefaultTokenizerPath;
  int threads = 0;  // 0 = all cores
};

struct SourceSummary {
  std::string name;
  uint64_t documents[2] = {0, 0};  // [train, val]
  uint64_t tokens[2] = {0, 0};     // without the end-of-text separators
  uint64_t bytes = 0;
};

// One raw file of a source, as read (train/val assigned by prepare_tokens).
struct Document {
  size_t source;
  std::string name;
  std::string text;
  bool val = false;
};

// Every file of raw_dir/<source> for each source (sources[i] is Document::source i), in name
// order; fails naming the directory when a source was not fetched, or a file that is not UTF-8.
std::vector<Document> read_documents(const std::string& raw_dir, const std::vector<std::string>& sources);

// Reads raw_dir/<source>/*, tokenizes, splits by whole documents and writes out_dir/train.bin,
// out_dir/val.bin and out_dir/manifest.tsv (split, source, file, tokens per document).
std::vector<SourceSummary> prepare_tokens(const PrepareOptions& options);

// The source names behind "core", "all" or "a,b"; throws on an unknown name.
std::vector<std::string> resolve_sources(const std::string& spec);

}  // namespace hylo::data
