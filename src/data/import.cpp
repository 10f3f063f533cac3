#include "data/import.h"

#include <fmt/format.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>

#include "core/error.h"
#include "core/file.h"
#include "core/sha256.h"
#include "data/shard_set.h"

namespace hylo::data {

ImportSummary import_tokens(const ImportOptions& o) {
  namespace fs = std::filesystem;
  const auto start = std::chrono::steady_clock::now();
  HYLO_CHECK(o.val_fraction > 0 && o.val_fraction <= 0.5, "--val-fraction {} is not in (0, 0.5]", o.val_fraction);
  HYLO_CHECK(o.shard_tokens >= 1, "--shard-tokens must be at least 1");
  HYLO_CHECK(!o.out_dir.empty(), "--out is empty");
  const std::vector<std::string> paths = resolve_shard_paths(o.inputs, "data import");

  std::vector<ShardReader> sources;
  for (const std::string& path : paths) {
    sources.emplace_back(path, /*verify_payload=*/true, o.format);  // CRC (hylo) and id range
    HYLO_CHECK(sources.back().vocab_size() == sources.front().vocab_size(), "{}: vocab {} differs from {}'s {}",
               path, sources.back().vocab_size(), paths.front(), sources.front().vocab_size());
  }
  const uint64_t vocab = sources.front().vocab_size();

  const fs::path out(o.out_dir);
  fs::create_directories(out);
  StagingDir staging(out / fmt::format(".import.{}", ::getpid()));
  SplitWriter writers[2] = {SplitWriter(staging.path, 0, o.shard_tokens, vocab),
                            SplitWriter(staging.path, 1, o.shard_tokens, vocab)};
  std::string rule = "by file: a name containing \"val\" is validation";
  nlohmann::ordered_json inputs = nlohmann::ordered_json::array();
  ImportSummary summary;
  std::vector<int32_t> buffer;
  for (const ShardReader& source : sources) {
    const int split = fs::path(source.path()).filename().string().find("val") != std::string::npos ? 1 : 0;
    ++summary.files[split];
    for (uint64_t at = 0; at < source.size();) {
      const uint64_t n = std::min<uint64_t>(source.size() - at, 1 << 20);
      buffer.resize(n);
      source.copy_tokens(at, n, buffer.data());
      writers[split].append(buffer);
      at += n;
    }
    inputs.push_back({{"path", source.path()}, {"format", shard_format_name(source.format())},
                      {"bytes", fs::file_size(source.path())}, {"sha256", sha256_file(source.path())},
                      {"tokens", source.size()}, {"split", kSplitNames[split]}});
  }
  sources.clear();
  for (SplitWriter& w : writers) {
    w.rule = rule;
    w.tokenizer = fmt::format("as imported ({} ids)", vocab);
    w.finish_shard();
  }
  HYLO_CHECK(writers[0].total > 0, "data import: the training files hold no tokens ({} of {} are validation by name)",
             summary.files[1], paths.size());
  if (writers[1].total == 0) {
    summary.token_range_split = true;
    rule = fmt::format("token range: the last {} of {} tokens (val_fraction {}; no file named val)",
                       token_range_size(writers[0].total, o.val_fraction), writers[0].total, o.val_fraction);
    writers[0].rule = writers[1].rule = rule;
    split_by_token_range(staging.path, writers[0], writers[1], o.val_fraction);
  }
  nlohmann::ordered_json shards = nlohmann::ordered_json::array();
  for (int k = 0; k < 2; ++k) {
    summary.tokens[k] = writers[k].total;
    for (const ShardSummary& s : writers[k].shards) {
      summary.shards.push_back(s);
      shards.push_back({{"file", s.file}, {"split", kSplitNames[k]}, {"tokens", s.tokens},
                        {"documents", s.documents}, {"crc32", fmt::format("{:08x}", s.crc)}});
    }
  }
  const nlohmann::ordered_json manifest = {
      {"format", "hylo corpus manifest"}, {"version", 1}, {"imported", true},
      {"tokenizer", {{"vocab_size", vocab}}},
      {"split", {{"by", summary.token_range_split ? "token range" : "file name"}, {"rule", rule}}},
      {"tokens", {{"train", summary.tokens[0]}, {"val", summary.tokens[1]}}},
      {"inputs", std::move(inputs)}, {"shards", std::move(shards)}};
  write_file_atomic((staging.path / "manifest.json").string(), manifest.dump(2) + "\n");
  publish(staging.path, out);
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
}

}  // namespace hylo::data
