#include "data/prepare.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <sstream>

#include "core/error.h"
#include "core/file.h"
#include "core/rng.h"
#include "core/suggest.h"
#include "data/shard.h"
#include "data/tokenizer.h"

namespace hylo::data {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kCoreSources = {"gutenberg", "sotu", "brown"};
const std::vector<std::string> kExtraSources = {"gcide", "linux-doc", "python-doc", "wordnet"};

uint64_t fnv1a(std::string_view text) {
  uint64_t h = 1469598103934665603ull;
  for (char c : text) h = (h ^ uint8_t(c)) * 1099511628211ull;
  return h;
}

// Train/val by whole documents, per source so every source is represented in validation: shuffle
// the source's documents with a stream named after it (adding a source never changes another's
// split), then move documents to val while the val share stays within val_fraction of its tokens.
void assign_splits(std::vector<Document>& documents, const std::vector<std::vector<int32_t>>& ids,
                   size_t source_count, double val_fraction, uint64_t seed, const std::vector<std::string>& names) {
  for (size_t s = 0; s < source_count; ++s) {
    std::vector<size_t> order;
    uint64_t source_tokens = 0;
    for (size_t d = 0; d < documents.size(); ++d)
      if (documents[d].source == s) order.push_back(d), source_tokens += ids[d].size();
    Rng rng{seed, fnv1a(names[s])};
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
    const double budget = val_fraction * double(source_tokens);
    uint64_t val_tokens = 0;
    for (size_t d : order) {
      if (double(val_tokens + ids[d].size()) <= budget) {
        documents[d].val = true;
        val_tokens += ids[d].size();
      }
    }
  }
}

std::string shard_metadata(const char* split, const PrepareOptions& options, const std::vector<std::string>& sources,
                           uint32_t val_list_crc) {
  std::string joined;
  for (const auto& s : sources) joined += (joined.empty() ? "" : ",") + s;
  return fmt::format(
      "split={}\ntokenizer={}\nseed={}\nval_fraction={}\nsources={}\n"
      "split_rule=per source: seeded shuffle, whole documents to val while within val_fraction of its tokens\n"
      "val_documents_crc=0x{:08x}\nmanifest=manifest.tsv\nseparator=50256 before every document\n",
      split, fs::path(options.tokenizer).filename().string(), options.seed, options.val_fraction, joined, val_list_crc);
}

}  // namespace

std::vector<Document> read_documents(const std::string& raw_dir, const std::vector<std::string>& sources) {
  std::vector<Document> documents;
  for (size_t s = 0; s < sources.size(); ++s) {
    fs::path dir = fs::path(raw_dir) / sources[s];
    HYLO_CHECK(fs::is_directory(dir) && fs::exists(dir / ".fetched"),
               "{}: missing or incomplete (run scripts/fetch_data.sh{})", dir.string(),
               std::find(kCoreSources.begin(), kCoreSources.end(), sources[s]) == kCoreSources.end() ? " --all" : "");
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(dir))
      if (entry.is_regular_file() && !entry.path().filename().string().starts_with(".")) files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    HYLO_CHECK(!files.empty(), "{}: holds no documents (run scripts/fetch_data.sh)", dir.string());
    for (const auto& file : files) {
      std::optional<std::string> text = read_file(file);
      HYLO_CHECK(text, "{}: cannot read", file.string());
      documents.push_back({s, file.filename().string(), std::move(*text)});
      size_t bad = first_invalid_utf8(documents.back().text);
      HYLO_CHECK(bad == std::string::npos, "{}: not valid UTF-8 (byte {}); documents must be UTF-8", file.string(),
                 bad);
    }
  }
  return documents;
}

std::vector<std::string> resolve_sources(const std::string& spec) {
  if (spec == "core") return kCoreSources;
  std::vector<std::string> all = kCoreSources;
  all.insert(all.end(), kExtraSources.begin(), kExtraSources.end());
  if (spec == "all") return all;
  std::vector<std::string> chosen;
  std::istringstream in(spec);
  for (std::string name; std::getline(in, name, ',');) {
    HYLO_CHECK(std::find(all.begin(), all.end(), name) != all.end(), "--sources: unknown source '{}'{} (known: core, all, {})",
               name, did_you_mean(name, all), fmt::join(all, ", "));
    if (std::find(chosen.begin(), chosen.end(), name) == chosen.end()) chosen.push_back(name);
  }
  HYLO_CHECK(!chosen.empty(), "--sources: empty source list");
  return chosen;
}

std::vector<SourceSummary> prepare_tokens(const PrepareOptions& options) {
  HYLO_CHECK(options.val_fraction >= 0 && options.val_fraction <= 0.5, "--val-fraction {} is not in [0, 0.5]",
             options.val_fraction);
  const auto sources = resolve_sources(options.sources);
  const Tokenizer tokenizer = Tokenizer::from_tiktoken(options.tokenizer);
  auto documents = read_documents(options.raw_dir, sources);
  std::vector<std::string> texts;
  texts.reserve(documents.size());
  for (auto& d : documents) texts.push_back(std::move(d.text));
  const auto ids = tokenizer.encode_ordinary_batch(texts, options.threads);
  assign_splits(documents, ids, sources.size(), options.val_fraction, options.seed, sources);

  std::vector<SourceSummary> summary(sources.size());
  for (size_t s = 0; s < sources.size(); ++s) summary[s].name = sources[s];
  std::vector<int32_t> split_tokens[2];
  uint64_t split_documents[2] = {0, 0};
  std::string manifest = "split\tsource\tfile\ttokens\n", val_list;
  for (size_t d = 0; d < documents.size(); ++d) {
    const int k = documents[d].val ? 1 : 0;
    auto& out = split_tokens[k];
    out.push_back(tokenizer.end_of_text_id());
    out.insert(out.end(), ids[d].begin(), ids[d].end());
    ++split_documents[k];
    auto& s = summary[documents[d].source];
    ++s.documents[k];
    s.tokens[k] += ids[d].size();
    s.bytes += texts[d].size();
    const std::string row = fmt::format("{}\t{}\t{}\t{}\n", k ? "val" : "train", sources[documents[d].source],
                                        documents[d].name, ids[d].size());
    manifest += row;
    if (k) val_list += row;
  }

  fs::create_directories(options.out_dir);
  const uint32_t val_crc = crc32(val_list.data(), val_list.size());
  const char* names[2] = {"train", "val"};
  for (int k = 0; k < 2; ++k) {
    write_shard((fs::path(options.out_dir) / (std::string(names[k]) + ".bin")).string(), split_tokens[k],
                uint64_t(tokenizer.vocab_size()), split_documents[k], shard_metadata(names[k], options, sources, val_crc));
  }
  write_file_atomic((fs::path(options.out_dir) / "manifest.tsv").string(), manifest);
  return summary;
}

}  // namespace hylo::data
