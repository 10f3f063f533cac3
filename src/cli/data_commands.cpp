// `hylo data prepare|encode|decode|inspect|bench`: corpus preparation (data/prepare.h), the
// tokenizer and shard tools (SPEC §4) and the tokenizer's throughput (bench/bench.h).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "bench/bench.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "data/tokenizer.h"

namespace hylo {
namespace data {
namespace {

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

// The flags of `hylo data prepare`: a preset of the pinned sources, its split and where it goes.
struct PrepareFlags {
  std::string sources = "core", raw_dir = "data/raw";
  CorpusOptions corpus;
  bool val_fraction_given = false;  // else the preset's
};

int run_prepare(const PrepareFlags& flags) {
  CorpusOptions options = preset_options(flags.sources, flags.raw_dir);
  options.out_dir = flags.corpus.out_dir;
  options.tokenizer = flags.corpus.tokenizer;
  if (flags.val_fraction_given) options.val_fraction = flags.corpus.val_fraction;
  options.seed = flags.corpus.seed;
  options.workers = flags.corpus.workers;
  const PrepareSummary summary = prepare_corpus(options);
  fmt::print("{:<12} {:>11} {:>13} {:>11} {:>13}\n", "input", "docs tr/val", "train tokens", "val tokens", "text bytes");
  for (const InputSummary& s : summary.inputs)
    fmt::print("{:<12} {:>11} {:>13} {:>11} {:>13}\n", s.label, fmt::format("{}/{}", s.documents[0], s.documents[1]),
               human_count(s.tokens[0]), human_count(s.tokens[1]), human_count(s.text_bytes));
  fmt::print("wrote {} shards and {}/manifest.json in {:.1f} s (one 50256 before each document)\n",
             summary.shards.size(), options.out_dir, summary.seconds);
  return 0;
}

int run_encode(const std::string& tokenizer_path) {
  const Tokenizer tokenizer = Tokenizer::from_tiktoken(tokenizer_path);
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

int run_decode(const std::string& tokenizer_path) {
  const Tokenizer tokenizer = Tokenizer::from_tiktoken(tokenizer_path);
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

int run_inspect(const std::string& path) {
  const ShardReader shard(path);
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

}  // namespace
}  // namespace data

void add_data_command(CLI::App& app) {
  CLI::App* group = cli::add_command(app, "data", "prepare the corpus; the tokenizer and shard tools");
  cli::require_command(group);

  auto prepare = std::make_shared<data::PrepareFlags>();
  CLI::App* cmd = cli::add_command(*group, "prepare", "tokenize the raw sources into token shards and manifest.json");
  cmd->add_option("--sources", prepare->sources, "core, all, or source names a,b,...");
  cmd->add_option("--raw", prepare->raw_dir, "the fetched sources (scripts/fetch_data.sh)");
  CLI::Option* val_fraction = cli::add_number(cmd, "--val-fraction", prepare->corpus.val_fraction,
                                              "of each input's documents, to validation (default: the preset's)")
                                  ->default_str("");
  cli::add_number(cmd, "--seed", prepare->corpus.seed, "which documents go to validation");
  cmd->add_option("--out", prepare->corpus.out_dir, "where the shards go");
  cmd->add_option("--tokenizer", prepare->corpus.tokenizer, "a .tiktoken file");
  cli::add_number(cmd, "--threads", prepare->corpus.workers, "tokenizing workers; 0: every hardware thread");
  cli::run_with(cmd, [prepare, val_fraction] {
    prepare->val_fraction_given = val_fraction->count() > 0;
    return data::run_prepare(*prepare);
  });

  for (const auto& [name, description] :
       {std::pair{"encode", "UTF-8 text on stdin -> space-separated token ids on stdout"},
        std::pair{"decode", "token ids on stdin -> text on stdout"}}) {
    auto tokenizer = std::make_shared<std::string>(data::kDefaultTokenizerPath);
    cmd = cli::add_command(*group, name, description);
    cmd->add_option("--tokenizer", *tokenizer, "a .tiktoken file");
    const bool encode = std::string(name) == "encode";
    cli::run_with(cmd, [tokenizer, encode] { return encode ? data::run_encode(*tokenizer) : data::run_decode(*tokenizer); });
  }

  auto shard = std::make_shared<std::string>();
  cmd = cli::add_command(*group, "inspect", "validate a token shard and print its header");
  cmd->add_option("SHARD", *shard, "a .bin shard")->required();
  cli::run_with(cmd, [shard] { return data::run_inspect(*shard); });

  auto bench = std::make_shared<TokenizerBenchOptions>();
  cmd = cli::add_command(*group, "bench", "tokenizer throughput, one thread and then --threads (best of --repeat runs)");
  cmd->add_option("--sources", bench->sources, "core, all, or source names a,b,...");
  cmd->add_option("--raw", bench->raw_dir, "the fetched sources");
  cmd->add_option("--tokenizer", bench->tokenizer, "a .tiktoken file");
  cli::add_number(cmd, "--threads", bench->threads, "0: every hardware thread");
  cli::add_positive(cmd, "--repeat", bench->repeat, "runs per thread count; the best counts");
  cmd->add_option("--json", bench->json, "also write the rows here (bench/bench_table.h's layout)");
  cli::run_with(cmd, [bench] { return run_bench_tokenizer(*bench); });
}

}  // namespace hylo
