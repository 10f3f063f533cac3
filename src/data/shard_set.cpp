#include "data/shard_set.h"

#include <fmt/format.h>
#include <glob.h>

#include <algorithm>
#include <filesystem>

#include "core/error.h"

namespace hylo::data {

std::vector<std::string> resolve_shard_paths(const std::vector<std::string>& patterns, const std::string& what) {
  HYLO_CHECK(!patterns.empty(), "{}: no token files given (a path, a glob or a list)", what);
  std::vector<std::string> paths;
  for (const std::string& pattern : patterns) {
    if (pattern.find_first_of("*?[") == std::string::npos || std::filesystem::exists(pattern)) {
      paths.push_back(pattern);
      continue;
    }
    glob_t g{};
    const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);  // sorted by name
    const size_t before = paths.size();
    for (size_t k = 0; rc == 0 && k < g.gl_pathc; ++k) paths.emplace_back(g.gl_pathv[k]);
    ::globfree(&g);
    HYLO_CHECK(paths.size() > before, "{}: '{}' matches no file", what, pattern);
  }
  return paths;
}

ShardSet::ShardSet(const DatasetSpec& spec, const std::string& what) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&](uint64_t v) {
    for (int b = 0; b < 8; ++b) h = (h ^ ((v >> (8 * b)) & 0xFF)) * 0x100000001b3ull;
  };
  for (const std::string& path : resolve_shard_paths(spec.paths, what)) {
    shards_.emplace_back(path, /*verify_payload=*/true, spec.format);
    const ShardReader& s = shards_.back();
    offsets_.push_back(offsets_.back() + s.size());
    vocab_size_ = std::max(vocab_size_, s.vocab_size());
    mix(s.size());
    mix(s.header().payload_crc);
  }
  fingerprint_ = h;
}

void ShardSet::copy_tokens(uint64_t begin, uint64_t count, int32_t* out) const {
  HYLO_CHECK(begin <= size() && count <= size() - begin, "{}: tokens [{}, {}) are outside the {} tokens", describe(),
             begin, begin + count, size());
  auto i = size_t(std::upper_bound(offsets_.begin(), offsets_.end(), begin) - offsets_.begin()) - 1;
  while (count > 0) {
    const uint64_t local = begin - offsets_[i], take = std::min(count, shards_[i].size() - local);
    shards_[i].copy_tokens(local, take, out);
    out += take, begin += take, count -= take;
    ++i;
  }
}

std::string ShardSet::describe() const {
  if (shards_.size() == 1) return shards_[0].path();
  return fmt::format("{} ... {} ({} files)", shards_.front().path(), shards_.back().path(), shards_.size());
}

void check_vocab(const ShardReader& shard, uint64_t model_vocab) {
  HYLO_CHECK(shard.vocab_size() <= model_vocab,
             "{}: shard vocab {} exceeds the model's vocab {} (set model.vocab_size >= {})", shard.path(),
             shard.vocab_size(), model_vocab, shard.vocab_size());
}

void check_vocab(const std::string& shard_path, uint64_t model_vocab) {
  check_vocab(ShardReader(shard_path, /*verify_payload=*/false), model_vocab);
}

void check_vocab(const ShardSet& set, uint64_t model_vocab) {
  for (const ShardReader& s : set.shards()) check_vocab(s, model_vocab);
}

}  // namespace hylo::data
