// `hylo data ...`: corpus preparation and tokenizer/shard tools (SPEC §4).
//   prepare [--sources core|all|a,b] [--val-fraction F] [--seed S] [--raw DIR] [--out DIR]
//           [--tokenizer PATH] [--threads N]
//   encode  [--tokenizer PATH]            UTF-8 on stdin -> space-separated ids on stdout
//   decode  [--tokenizer PATH]            ids on stdin -> text on stdout
//   inspect SHARD                         validate a shard and print its header
//   bench   [--sources ...] [--threads N] [--repeat R] [--json PATH]
//                                         tokenizer throughput (best of R runs)
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace hylo {

namespace data {

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

// Reads raw_dir/<source>/*, tokenizes, splits by whole documents and writes out_dir/train.bin,
// out_dir/val.bin and out_dir/manifest.tsv (split, source, file, tokens per document).
std::vector<SourceSummary> prepare_tokens(const PrepareOptions& options);

// The source names behind "core", "all" or "a,b"; throws on an unknown name.
std::vector<std::string> resolve_sources(const std::string& spec);

}  // namespace data
}  // namespace hylo
