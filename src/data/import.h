// `hylo data import` (SPEC §4): token files tokenized elsewhere -- llm.c's .bin shards, nanoGPT's
// raw uint16 train.bin / val.bin, or hylo shards -- rewritten as hylo shards plus manifest.json, so
// an existing tokenized copy of a corpus (FineWeb, say) trains without re-tokenizing. The tokens are
// copied as they are (both write one 50256 per document). A file whose name contains "val" is
// validation, every other one training; with no validation file the last val_fraction of the
// training tokens become it (a token range, as in data/prepare.h). Training does not need an
// import: data.train reads these files directly (data/shard.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/shard.h"
#include "data/shard_output.h"

namespace hylo::data {

struct ImportOptions {
  std::vector<std::string> inputs;  // token files or globs
  std::string out_dir;
  ShardFormat format = ShardFormat::auto_detect;  // nanogpt must be named: raw files have no magic
  uint64_t shard_tokens = 100'000'000;
  double val_fraction = 0.005;
};

struct ImportSummary {
  std::vector<ShardSummary> shards;
  uint64_t files[2] = {0, 0}, tokens[2] = {0, 0};  // [train, val]
  bool token_range_split = false;
  double seconds = 0;
};

ImportSummary import_tokens(const ImportOptions& options);

}  // namespace hylo::data
