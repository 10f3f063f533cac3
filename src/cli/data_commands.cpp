// `hylo data ...`: corpus preparation (data/prepare.h) and tokenizer/shard tools (SPEC §4).
//   prepare [--sources core|all|a,b] [--val-fraction F] [--seed S] [--raw DIR] [--out DIR]
//           [--tokenizer PATH] [--threads N]
//   encode  [--tokenizer PATH]            UTF-8 on stdin -> space-separated ids on stdout
//   decode  [--tokenizer PATH]            ids on stdin -> text on stdout
//   inspect SHARD                         validate a shard and print its header
//   bench   [--sources ...] [--threads N] [--repeat R] [--json PATH]
//                                         tokenizer throughput (best of R runs)
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include "bench/bench_json.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "core/error.h"
#include "core/suggest.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "data/tokenizer.h"

namespace hylo {
namespace data {
namespace {

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
                 command, key, did_you_mean(key, known));
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

std::string human_count(uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
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
  HYLO_FAIL("data: unknown subcommand '{}'{} (expected {})", args[0], did_you_mean(args[0], commands),
            fmt::join(commands, ", "));
}

}  // namespace hylo
