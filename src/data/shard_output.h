// The output side of `hylo data prepare` and `hylo data import`: each split's numbered shards
// (train_000000.bin, ...) streamed into a staging folder, the token-range split for corpora whose
// documents left validation empty, and the move of the finished files into the output folder.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "data/shard.h"

namespace hylo::data {

struct ShardSummary {
  std::string file;  // name inside the output folder
  bool val = false;
  uint64_t tokens = 0, documents = 0;
  uint32_t crc = 0;
};

inline const char* const kSplitNames[2] = {"train", "val"};

// One split's stream of shards in the staging folder: a new shard every shard_tokens tokens.
class SplitWriter {
 public:
  SplitWriter(std::filesystem::path dir, int split, uint64_t shard_tokens, uint64_t vocab);
  // A shard's documents are its separators (text never encodes to 50256).
  void append(std::span<const int32_t> tokens);
  void finish_shard();
  // The header metadata of shard `index` of `split`.
  std::string metadata(int split, size_t index) const;

  std::vector<ShardSummary> shards;  // finished
  uint64_t total = 0;                // tokens appended
  std::string rule, tokenizer;       // recorded in every shard's metadata
  uint64_t seed = 0;

 private:
  std::filesystem::path dir_;
  int split_;
  uint64_t shard_tokens_, vocab_;
  std::unique_ptr<ShardWriter> shard_;
  uint64_t documents_in_shard_ = 0;
};

// A folder removed on destruction: a failed prepare leaves none behind.
struct StagingDir {
  std::filesystem::path path;
  explicit StagingDir(std::filesystem::path p);
  ~StagingDir();
};

// A token-range validation split of `tokens`: ceil(fraction x tokens), but at least
// kMinRangeTokens (16 sequences of 4096) or a tenth of the tokens, whichever is fewer, so that a
// small corpus still gets a validation split long enough to evaluate on.
inline constexpr uint64_t kMinRangeTokens = 16 * 4096 + 1;
uint64_t token_range_size(uint64_t tokens, double fraction);

// The last token_range_size(tokens, fraction) tokens of train's shards (all finished) move to val: the shards
// past the cut become val's, the one holding it is rewritten in two, and the kept ones get train's
// (new) rule in their metadata. Throws when there are fewer than two tokens.
void split_by_token_range(const std::filesystem::path& dir, SplitWriter& train, SplitWriter& val, double fraction);

// Replaces the numbered shards, manifest.json and val_documents.tsv of an earlier run in `out`
// with the staged files.
void publish(const std::filesystem::path& staging, const std::filesystem::path& out);

}  // namespace hylo::data
