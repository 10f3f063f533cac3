// A dataset: token files read as one stream, in order (SPEC §4). data.train and data.val name one
// as a path, a glob or a list of either; data.mix names several, each with a weight.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/shard.h"

namespace hylo::data {

struct DatasetSpec {
  std::vector<std::string> paths;  // files or globs, in order
  double weight = 1;               // share of a mixture's sequences
  ShardFormat format = ShardFormat::auto_detect;
};

// The files `patterns` name, in order; a glob expands to its matches in name order. `what` (the
// config key) prefixes the error for an empty list or a glob that matches nothing.
std::vector<std::string> resolve_shard_paths(const std::vector<std::string>& patterns, const std::string& what);

class ShardSet {
 public:
  // Opens and verifies (CRC and id range, data/shard.h) every file.
  ShardSet(const DatasetSpec& spec, const std::string& what);

  uint64_t size() const { return offsets_.back(); }
  uint64_t vocab_size() const { return vocab_size_; }  // the largest of its shards'
  const std::vector<ShardReader>& shards() const { return shards_; }
  // Tokens [begin, begin + count) of the stream, which may span shards, widened to int32.
  void copy_tokens(uint64_t begin, uint64_t count, int32_t* out) const;
  // Identifies the content: every shard's token count and payload CRC, in order.
  uint64_t fingerprint() const { return fingerprint_; }
  // "a.bin" or "a.bin ... z.bin (12 files)", for messages.
  std::string describe() const;

 private:
  std::vector<ShardReader> shards_;
  std::vector<uint64_t> offsets_{0};  // offsets_[i]: first token of shard i in the stream
  uint64_t vocab_size_ = 0, fingerprint_ = 0;
};

// Throws a one-line error at start-up when a shard's ids may not fit the model's embedding.
// A model vocab padded above the shard's (50304 >= 50257) is fine.
void check_vocab(const ShardReader& shard, uint64_t model_vocab);
void check_vocab(const std::string& shard_path, uint64_t model_vocab);  // reads the header only
void check_vocab(const ShardSet& set, uint64_t model_vocab);

}  // namespace hylo::data
