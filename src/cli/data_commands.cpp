// `hylo data prepare|import|encode|decode|inspect|bench`: corpus preparation (data/prepare.h), the
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
#include "data/import.h"
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

// The flags of `hylo data prepare`: a corpus (--input) or a preset of the pinned sources.
struct PrepareFlags {
  std::string sources, raw_dir = "data/raw", format = "auto";
  CorpusOptions corpus;
  bool val_fraction_given = false;  // else the preset's
};

std::string size_text(double bytes) {
  return bytes >= 1e9 ? fmt::format("{:.2f} GB", bytes / 1e9) : fmt::format("{:.1f} MB", bytes / 1e6);
}

int run_prepare(const PrepareFlags& flags) {
  CorpusOptions options = flags.corpus;
  if (options.inputs.empty()) {  // a preset: its inputs and split, with what the flags set
    CorpusOptions preset = preset_options(flags.sources.empty() ? "core" : flags.sources, flags.raw_dir);
    options.inputs = preset.inputs;
    options.labels = preset.labels;
    options.format = preset.format;
    options.preset = preset.preset;
    if (!flags.val_fraction_given) options.val_fraction = preset.val_fraction;
  } else {
    options.format = parse_corpus_format(flags.format);
  }
  options.progress = [](const PrepareProgress& p) {
    fmt::print(stderr, "prepare: {} of text, {} documents, {} tokens in {:.0f} s ({:.1f} MB/s)\n",
               size_text(double(p.text_bytes)), human_count(p.documents), human_count(p.tokens), p.seconds,
               double(p.text_bytes) / 1e6 / std::max(p.seconds, 1e-9));
  };
  const PrepareSummary summary = prepare_corpus(options);
  fmt::print("{:<16} {:>13} {:>13} {:>11} {:>13}\n", "input", "docs tr/val", "train tokens", "val tokens", "text bytes");
  uint64_t text_bytes = 0;
  for (const InputSummary& s : summary.inputs) {
    fmt::print("{:<16} {:>13} {:>13} {:>11} {:>13}{}\n", s.label, fmt::format("{}/{}", s.documents[0], s.documents[1]),
               human_count(s.tokens[0]), human_count(s.tokens[1]), human_count(s.text_bytes),
               s.empty_documents ? fmt::format("  ({} empty skipped)", s.empty_documents) : "");
    text_bytes += s.text_bytes;
  }
  if (summary.token_range_split)
    fmt::print("validation: the last {} tokens (too few documents for a split by documents)\n",
               human_count(summary.tokens[1]));
  if (summary.tokens[1] < 4097)
    fmt::print("note: validation holds {} tokens; a run with train.seq_len >= that is refused at launch (raise "
               "--val-fraction)\n", human_count(summary.tokens[1]));
  fmt::print("wrote {} shards ({} train + {} val tokens) and manifest.json to {} in {:.1f} s ({:.1f} MB/s of text)\n",
             summary.shards.size(), human_count(summary.tokens[0]), human_count(summary.tokens[1]), options.out_dir,
             summary.seconds, double(text_bytes) / 1e6 / std::max(summary.seconds, 1e-9));
  return 0;
}

struct ImportFlags {
  ImportOptions options;
  std::string format = "auto";
};

int run_import(const ImportFlags& flags) {
  ImportOptions options = flags.options;
  options.format = parse_shard_format(flags.format, "--format");
  const ImportSummary s = import_tokens(options);
  fmt::print("imported {} train + {} val files: {} shards ({} train + {} val tokens{}) and manifest.json to {} in "
             "{:.1f} s\n",
             s.files[0], s.files[1], s.shards.size(), human_count(s.tokens[0]), human_count(s.tokens[1]),
             s.token_range_split ? ", val the last tokens" : "", options.out_dir, s.seconds);
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

int run_inspect(const std::string& path, const std::string& format) {
  const ShardReader shard(path, /*verify_payload=*/true, parse_shard_format(format, "--format"));
  const auto& h = shard.header();
  fmt::print("{}: valid {} token file (magic, header, size, payload CRC, every id below the vocab)\n", shard.path(),
             shard_format_name(shard.format()));
  fmt::print("  version        {}\n  token dtype    uint{}\n  tokens         {}\n  vocab size     {}\n"
             "  largest id     {}\n  documents      {}\n  payload CRC-32 0x{:08x}\n",
             h.version, h.token_bytes * 8, human_count(h.token_count), h.vocab_size, shard.max_token(),
             human_count(h.document_count), h.payload_crc);
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
  CLI::App* cmd = cli::add_command(*group, "prepare",
                                   "tokenize a corpus (--input) or the pinned sources (--sources) into numbered token "
                                   "shards and manifest.json");
  CLI::Option* input = cmd->add_option("--input", prepare->corpus.inputs,
                                       "files, folders (walked recursively) or globs: .txt, .jsonl, .jsonl.gz, .jsonl.zst");
  cmd->add_option("--sources", prepare->sources, "a preset of the pinned sources: core, all, or names a,b,... "
                  "(the default without --input)")->excludes(input);
  cmd->add_option("--raw", prepare->raw_dir, "the fetched sources (scripts/fetch_data.sh)");
  cmd->add_option("--out", prepare->corpus.out_dir, "where the shards go");
  cli::add_choice(cmd, "--format", prepare->format, {"auto", "txt", "jsonl"}, "auto: by each file's extension");
  cmd->add_option("--text-key", prepare->corpus.text_key, "jsonl: the field that holds the text");
  cmd->add_option("--doc-separator", prepare->corpus.doc_separator,
                  "txt: the string between documents (default: one document per file)");
  cli::add_number(cmd, "--workers,--threads", prepare->corpus.workers, "tokenizing threads; 0: every hardware thread");
  cli::add_positive(cmd, "--shard-tokens", prepare->corpus.shard_tokens, "tokens per shard at most");
  CLI::Option* val_fraction =
      cli::add_number(cmd, "--val-fraction", prepare->corpus.val_fraction,
                      "of each input's documents to validation (presets: 0.06)");
  cli::add_positive(cmd, "--val-docs", prepare->corpus.val_docs, "exactly this many validation documents")
      ->excludes(val_fraction);
  cli::add_number(cmd, "--seed", prepare->corpus.seed, "which documents go to validation");
  cmd->add_option("--tokenizer", prepare->corpus.tokenizer, "a .tiktoken file");
  cli::run_with(cmd, [prepare, val_fraction] {
    prepare->val_fraction_given = val_fraction->count() > 0;
    return data::run_prepare(*prepare);
  });

  auto import = std::make_shared<data::ImportFlags>();
  cmd = cli::add_command(*group, "import",
                         "rewrite llm.c / nanoGPT token files as hylo shards and manifest.json (names with 'val' are "
                         "validation)");
  cmd->add_option("SRC", import->options.inputs, "token files or globs")->required();
  cmd->add_option("--out", import->options.out_dir, "where the shards go")->required();
  cli::add_choice(cmd, "--format", import->format, {"auto", "hylo", "llmc", "nanogpt"},
                  "auto: by magic; nanoGPT's raw uint16 files must be named");
  cli::add_positive(cmd, "--shard-tokens", import->options.shard_tokens, "tokens per shard at most");
  cli::add_number(cmd, "--val-fraction", import->options.val_fraction,
                  "without a val file: this last share of the tokens is validation");
  cli::run_with(cmd, [import] { return data::run_import(*import); });

  for (const auto& [name, description] :
       {std::pair{"encode", "UTF-8 text on stdin -> space-separated token ids on stdout"},
        std::pair{"decode", "token ids on stdin -> text on stdout"}}) {
    auto tokenizer = std::make_shared<std::string>(data::kDefaultTokenizerPath);
    cmd = cli::add_command(*group, name, description);
    cmd->add_option("--tokenizer", *tokenizer, "a .tiktoken file");
    const bool encode = std::string(name) == "encode";
    cli::run_with(cmd, [tokenizer, encode] { return encode ? data::run_encode(*tokenizer) : data::run_decode(*tokenizer); });
  }

  auto shard = std::make_shared<std::pair<std::string, std::string>>("", "auto");
  cmd = cli::add_command(*group, "inspect", "validate a token file (CRC, every id below the vocab) and print its header");
  cmd->add_option("SHARD", shard->first, "a .bin shard (hylo, llm.c, or nanoGPT with --format nanogpt)")->required();
  cli::add_choice(cmd, "--format", shard->second, {"auto", "hylo", "llmc", "nanogpt"}, "auto: by magic");
  cli::run_with(cmd, [shard] { return data::run_inspect(shard->first, shard->second); });

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
