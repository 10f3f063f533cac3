#include "data/shard_output.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <regex>

#include "core/error.h"
#include "data/tokenizer.h"

namespace hylo::data {
namespace {

namespace fs = std::filesystem;
constexpr int32_t kSeparator = kEndOfTextId;

}  // namespace

SplitWriter::SplitWriter(fs::path dir, int split, uint64_t shard_tokens, uint64_t vocab)
    : dir_(std::move(dir)), split_(split), shard_tokens_(shard_tokens), vocab_(vocab) {}

void SplitWriter::append(std::span<const int32_t> tokens) {
  while (!tokens.empty()) {
    if (!shard_) {
      const std::string name = fmt::format("{}_{:06d}.bin", kSplitNames[split_], shards.size());
      shard_ = std::make_unique<ShardWriter>((dir_ / name).string(), vocab_);
      documents_in_shard_ = 0;
    }
    const auto take = size_t(std::min<uint64_t>(tokens.size(), shard_tokens_ - shard_->size()));
    const auto piece = tokens.first(take);
    documents_in_shard_ += uint64_t(std::count(piece.begin(), piece.end(), kSeparator));
    shard_->append(piece);
    tokens = tokens.subspan(take);
    total += take;
    if (shard_->size() == shard_tokens_) finish_shard();
  }
}

void SplitWriter::finish_shard() {
  if (!shard_) return;
  ShardSummary s{fs::path(shard_->path()).filename().string(), split_ == 1, shard_->size(), documents_in_shard_, 0};
  s.crc = shard_->finish(documents_in_shard_, metadata(split_, shards.size()));
  shards.push_back(s);
  shard_.reset();
}

std::string SplitWriter::metadata(int split, size_t index) const {
  std::string m = fmt::format("split={}\nshard={}\ntokenizer={}\nseed={}\nsplit_rule={}\ncorpus=manifest.json\n"
                              "separator=50256 before every document\n",
                              kSplitNames[split], index, tokenizer, seed, rule);
  if (split == 1) m += "manifest=val_documents.tsv\n";  // eval/last_word.h's source labels
  return m.size() <= kShardMetadataBytes ? m : m.substr(0, kShardMetadataBytes);
}

StagingDir::StagingDir(fs::path p) : path(std::move(p)) {
  fs::remove_all(path);
  fs::create_directories(path);
}

StagingDir::~StagingDir() {
  std::error_code ec;
  fs::remove_all(path, ec);
}

uint64_t token_range_size(uint64_t tokens, double fraction) {
  const auto share = uint64_t(std::ceil(fraction * double(tokens)));
  const uint64_t floor = std::min<uint64_t>(kMinRangeTokens, (tokens + 9) / 10);
  return std::max<uint64_t>({1, share, floor});
}

void split_by_token_range(const fs::path& dir, SplitWriter& train, SplitWriter& val, double fraction) {
  const uint64_t total = train.total;
  HYLO_CHECK(total >= 2, "the corpus holds {} token(s): too few for a training and a validation split", total);
  const uint64_t take = token_range_size(total, fraction);
  const uint64_t cut = total - take;
  std::vector<ShardSummary> old = std::move(train.shards);
  train.shards.clear();
  std::vector<int32_t> buffer;
  auto copy = [&](const ShardReader& r, uint64_t begin, uint64_t end, auto&& sink) {
    for (uint64_t at = begin; at < end;) {
      const uint64_t n = std::min<uint64_t>(end - at, 1 << 20);
      buffer.resize(n);
      r.copy_tokens(at, n, buffer.data());
      sink(std::span<const int32_t>(buffer));
      at += n;
    }
  };
  uint64_t begin = 0;
  for (const ShardSummary& s : old) {
    const uint64_t end = begin + s.tokens;
    const std::string path = (dir / s.file).string();
    if (end <= cut) {
      rewrite_shard_metadata(path, train.metadata(0, train.shards.size()));
      train.shards.push_back(s);
    } else {
      std::optional<ShardReader> reader(std::in_place, path);
      if (begin < cut) {  // the new file replaces the mapped one by a rename: the mapping stays valid
        ShardWriter head(path, reader->vocab_size());
        uint64_t documents = 0;
        copy(*reader, 0, cut - begin, [&](std::span<const int32_t> t) {
          documents += uint64_t(std::count(t.begin(), t.end(), kSeparator));
          head.append(t);
        });
        ShardSummary h{s.file, false, cut - begin, documents, 0};
        h.crc = head.finish(documents, train.metadata(0, train.shards.size()));
        train.shards.push_back(h);
      }
      copy(*reader, std::max(begin, cut) - begin, s.tokens, [&](std::span<const int32_t> t) { val.append(t); });
      reader.reset();
      if (begin >= cut) fs::remove(path);
    }
    begin = end;
  }
  train.total = cut;
  val.finish_shard();
}

void publish(const fs::path& staging, const fs::path& out) {
  static const std::regex ours(R"((train|val)_\d{6}\.bin|manifest\.json|val_documents\.tsv)");
  for (const auto& entry : fs::directory_iterator(out))
    if (entry.is_regular_file() && std::regex_match(entry.path().filename().string(), ours)) fs::remove(entry.path());
  for (const auto& entry : fs::directory_iterator(staging)) fs::rename(entry.path(), out / entry.path().filename());
}

}  // namespace hylo::data
