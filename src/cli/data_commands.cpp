#include "cli/data_commands.h"

#include "cli/bench_json.h"
#include "cli/commands.h"
#include "cli/flags.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/file.h"
#include "core/rng.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "train/suggest.h"

namespace hylo {
namespace data {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kCoreSources = {"gutenberg", "sotu", "brown"};
const std::vector<std::string> kExtraSources = {"gcide", "linux-doc", "python-doc", "wordnet"};

std::string nearest_hint(const std::string& word, const std::vector<std::string>& choices) {
  for (const auto& choice : choices)  // an abbreviation: --val-frac for --val-fraction
    if (word.size() >= 3 && choice.starts_with(word)) return fmt::format(" (did you mean '{}'?)", choice);
  const std::string near = nearest_choice(word, choices, std::max<size_t>(2, word.size() / 3));
  return near.empty() ? "" : fmt::format(" (did you mean '{}'?)", near);
}

// "--key value" options of one subcommand; positional words are kept in order.
struct Options {
  std::map<std::string, std::string> values;
  std::vector<std::string> positional;

  Options(const std::string& command, const std::vector<std::string>& args, const std::vector<std::string>& known) {
    for (size_t i = 0; i < args.size(); ++i) {
      const std::string& arg = args[i];
      if (!arg.starts_with("--")) {
        positional.push_back(arg);
        continue;
      }
      std::string key = arg.substr(2), value;
      if (size_t eq = key.find('='); eq != std::string::npos) {
        value = key.substr(eq + 1);
        key.resize(eq);
      } else {
        HYLO_CHECK(i + 1 < args.size(), "data {}: option --{} needs a value", command, key);
        value = args[++i];
      }
      HYLO_CHECK(std::find(known.begin(), known.end(), key) != known.end(), "data {}: unknown option --{}{}",
                 command, key, nearest_hint(key, known));
      values[key] = value;
    }
  }
  std::string get(const std::string& key, const std::string& fallback) const {
    auto it = values.find(key);
    return it == values.end() ? fallback : it->second;
  }
};

std::string read_stream(std::istream& in) {
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

uint64_t fnv1a(std::string_view text) {
  uint64_t h = 1469598103934665603ull;
  for (char c : text) h = (h ^ uint8_t(c)) * 1099511628211ull;
  return h;
}

struct Document {
  size_t source;
  std::string name;
  std::string text;
  bool val = false;
};

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

std::string human_count(uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
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

int run_prepare(const std::vector<std::string>& args) {
  Options o("prepare", args, {"sources", "val-fraction", "seed", "raw", "out", "tokenizer", "threads"});
  HYLO_CHECK(o.positional.empty(), "data prepare: unexpected argument '{}'", o.positional.empty() ? "" : o.positional[0]);
  PrepareOptions options;
  options.sources = o.get("sources", options.sources);
  options.raw_dir = o.get("raw", options.raw_dir);
  options.out_dir = o.get("out", options.out_dir);
  options.tokenizer = o.get("tokenizer", options.tokenizer);
  if (o.values.count("val-fraction"))
    options.val_fraction = parse_number<double>("data prepare", "--val-fraction", o.values["val-fraction"]);
  if (o.values.count("seed")) options.seed = parse_number<uint64_t>("data prepare", "--seed", o.values["seed"]);
  if (o.values.count("threads")) options.threads = parse_number<int>("data prepare", "--threads", o.values["threads"]);

  auto start = std::chrono::steady_clock::now();
  auto summary = prepare_tokens(options);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  fmt::print("{:<12} {:>11} {:>13} {:>11} {:>13} {:>11}\n", "source", "docs tr/val", "train tokens", "val tokens",
             "bytes", "bytes/token");
  SourceSummary total{"total"};
  for (const auto& s : summary) {
    for (int k = 0; k < 2; ++k) total.documents[k] += s.documents[k], total.tokens[k] += s.tokens[k];
    total.bytes += s.bytes;
  }
  summary.push_back(total);
  for (const auto& s : summary) {
    fmt::print("{:<12} {:>11} {:>13} {:>11} {:>13} {:>11.3f}\n", s.name, fmt::format("{}/{}", s.documents[0], s.documents[1]),
               human_count(s.tokens[0]), human_count(s.tokens[1]), human_count(s.bytes),
               double(s.bytes) / double(std::max<uint64_t>(1, s.tokens[0] + s.tokens[1])));
  }
  fmt::print("wrote {0}/train.bin, {0}/val.bin, {0}/manifest.tsv in {1:.1f} s (one 50256 before each document)\n",
             options.out_dir, seconds);
  return 0;
}

}  // namespace

std::vector<std::string> resolve_sources(const std::string& spec) {
  if (spec == "core") return kCoreSources;
  std::vector<std::string> all = kCoreSources;
  all.insert(all.end(), kExtraSources.begin(), kExtraSources.end());
  if (spec == "all") return all;
  std::vector<std::string> chosen;
  std::istringstream in(spec);
  for (std::string name; std::getline(in, name, ',');) {
    HYLO_CHECK(std::find(all.begin(), all.end(), name) != all.end(), "--sources: unknown source '{}'{} (known: core, all, {})",
               name, nearest_hint(name, all), fmt::join(all, ", "));
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

namespace {

int run_encode(const std::vector<std::string>& args) {
  Options o("encode", args, {"tokenizer"});
  HYLO_CHECK(o.positional.empty(), "data encode: reads text from stdin; unexpected argument '{}'", o.positional[0]);
  const Tokenizer tokenizer = Tokenizer::from_tiktoken(o.get("tokenizer", kDefaultTokenizerPath));
  std::ios::sync_with_stdio(false);
  const std::string text = read_stream(std::cin);
  std::vector<int32_t> ids;
  try {
    ids = tokenizer.encode(text);
  } catch (const Error& e) {
    HYLO_FAIL("stdin: {}", e.what());
  }
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) line += ' ';
    line += std::to_string(ids[i]);
  }
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stdout);
  return 0;
}

int run_decode(const std::vector<std::string>& args) {
  Options o("decode", args, {"tokenizer"});
  HYLO_CHECK(o.positional.empty(), "data decode: reads ids from stdin; unexpected argument '{}'", o.positional[0]);
  const Tokenizer tokenizer = Tokenizer::from_tiktoken(o.get("tokenizer", kDefaultTokenizerPath));
  std::ios::sync_with_stdio(false);
  std::vector<int32_t> ids;
  for (std::string word; std::cin >> word;) {
    char* end = nullptr;
    long value = std::strtol(word.c_str(), &end, 10);
    HYLO_CHECK(end && *end == '\0' && value >= 0 && value < tokenizer.vocab_size(),
               "stdin: '{}' is not a token id in [0, {})", word, tokenizer.vocab_size());
    ids.push_back(int32_t(value));
  }
  const std::string text = tokenizer.decode(ids);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

int run_inspect(const std::vector<std::string>& args) {
  Options o("inspect", args, {});
  HYLO_CHECK(o.positional.size() == 1, "data inspect: expected one shard path");
  const ShardReader shard(o.positional[0]);
  const auto& h = shard.header();
  fmt::print("{}: valid (magic, header CRC, size, payload CRC)\n", shard.path());
  fmt::print("  version        {}\n  token dtype    uint{}\n  tokens         {}\n  vocab size     {}\n"
             "  documents      {}\n  payload CRC-32 0x{:08x}\n",
             h.version, h.token_bytes * 8, human_count(h.token_count), h.vocab_size, human_count(h.document_count),
             h.payload_crc);
  std::istringstream metadata(h.metadata);
  for (std::string line; std::getline(metadata, line);) fmt::print("  meta  {}\n", line);
  std::string head;
  for (uint64_t i = 0; i < std::min<uint64_t>(16, shard.size()); ++i) {
    head += ' ';
    head += std::to_string(shard.token(i));
  }
  fmt::print("  first tokens  {}\n", head);
  return 0;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("model name")) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

// Tokenizer throughput on the prepared corpus: one thread, then `threads`. A benchmark program,
// not a test: it prints a table and optionally writes the numbers as JSON.
int run_bench(const std::vector<std::string>& args) {
  Options o("bench", args, {"sources", "raw", "tokenizer", "threads", "repeat", "json"});
  const int repeat = std::max(1, parse_number<int>("data bench", "--repeat", o.get("repeat", "3")));
  const auto sources = resolve_sources(o.get("sources", "core"));
  const int threads = o.values.count("threads") ? parse_number<int>("data bench", "--threads", o.values["threads"])
                                                : int(std::max(1u, std::thread::hardware_concurrency()));
  const Tokenizer tokenizer = Tokenizer::from_tiktoken(o.get("tokenizer", kDefaultTokenizerPath));
  auto documents = read_documents(o.get("raw", "data/raw"), sources);
  std::vector<std::string> texts;
  uint64_t bytes = 0;
  for (auto& d : documents) bytes += d.text.size(), texts.push_back(std::move(d.text));

  struct Run {
    int threads;
    double seconds;
    uint64_t tokens;
  };
  std::vector<Run> runs;
  for (int t : {1, threads}) {
    if (!runs.empty() && runs.back().threads == t) continue;
    Run best{t, 1e30, 0};
    for (int r = 0; r < repeat; ++r) {  // best of `repeat`: the machine is shared, noise only adds time
      auto start = std::chrono::steady_clock::now();
      auto ids = tokenizer.encode_ordinary_batch(texts, t);
      best.seconds = std::min(best.seconds, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      best.tokens = 0;
      for (const auto& v : ids) best.tokens += v.size();
    }
    runs.push_back(best);
  }
  fmt::print("{:>8} {:>12} {:>10} {:>14} {:>12}\n", "threads", "MB", "seconds", "MB/s", "Mtokens/s");
  for (const auto& r : runs)
    fmt::print("{:>8} {:>12.2f} {:>10.2f} {:>14.2f} {:>12.2f}\n", r.threads, double(bytes) / 1e6, r.seconds,
               double(bytes) / 1e6 / r.seconds, double(r.tokens) / 1e6 / r.seconds);

  if (o.values.count("json")) {
    std::string joined;
    for (const auto& s : sources) joined += fmt::format("{}\"{}\"", joined.empty() ? "" : ", ", s);
    BenchJson json;
    json.bench = "data";
    json.device = fmt::format("{}, {} hardware threads", cpu_model(), std::thread::hardware_concurrency());
    json.extra = fmt::format("\"what\": \"tokenizer throughput (r50k_base, encode_ordinary_batch)\", \"documents\": "
                             "{}, \"bytes\": {}, \"tokens\": {}, \"bytes_per_token\": {:.4f}",
                             texts.size(), bytes, runs.front().tokens, double(bytes) / double(runs.front().tokens));
    json.settings = fmt::format("{{\"sources\": [{}], \"best_of\": {}}}", joined, repeat);
    for (const auto& r : runs)
      json.rows.push_back(fmt::format("{{\"threads\": {}, \"seconds\": {:.3f}, \"mb_per_s\": {:.2f}, \"mtokens_per_s\": {:.3f}}}",
                                      r.threads, r.seconds, double(bytes) / 1e6 / r.seconds,
                                      double(r.tokens) / 1e6 / r.seconds));
    write_bench_json(o.values["json"], json);
  }
  return 0;
}

}  // namespace
}  // namespace data

int run_data_command(const std::vector<std::string>& args) {
  const std::vector<std::string> commands = {"prepare", "encode", "decode", "inspect", "bench"};
  HYLO_CHECK(!args.empty(), "data: expected a subcommand ({})", fmt::join(commands, ", "));
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "prepare") return data::run_prepare(rest);
  if (args[0] == "encode") return data::run_encode(rest);
  if (args[0] == "decode") return data::run_decode(rest);
  if (args[0] == "inspect") return data::run_inspect(rest);
  if (args[0] == "bench") return data::run_bench(rest);
  HYLO_FAIL("data: unknown subcommand '{}'{} (expected {})", args[0], data::nearest_hint(args[0], commands),
            fmt::join(commands, ", "));
}

}  // namespace hylo
