// Token shards: round trips in both dtypes, and every kind of damage (corrupt byte, truncation,
// wrong magic, damaged header) is refused with a message naming the file. Also `data prepare` on
// a small synthetic raw corpus: whole-document split, separators, determinism.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <numeric>

#include "data/prepare.h"
#include "core/error.h"
#include "data/shard.h"
#include "data/tokenizer.h"

namespace fs = std::filesystem;
using namespace hylo::data;

namespace {

// doctest's Contains takes its own string type; this builds one from a std::string.
doctest::Contains has(const std::string& text) { return doctest::Contains(text.c_str()); }

// A fresh folder per test case, removed at the end.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag)
      : path(fs::temp_directory_path() / ("hylo_" + tag + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

std::vector<int32_t> sample_tokens(size_t n, int32_t vocab) {
  std::vector<int32_t> tokens(n);
  for (size_t i = 0; i < n; ++i) tokens[i] = int32_t((i * 7919 + 13) % size_t(vocab));
  return tokens;
}

void flip_byte(const std::string& path, std::streamoff offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  char c;
  f.get(c);
  f.seekp(offset);
  f.put(char(c ^ 0x5A));
}

}  // namespace

TEST_CASE("shard: crc32 matches the standard check value") {
  CHECK(crc32("123456789", 9) == 0xCBF43926u);
  CHECK(crc32("", 0) == 0u);
  // Chaining over pieces equals one pass (the slicing-by-8 and byte loops agree).
  std::string text(1000, '\0');
  for (size_t i = 0; i < text.size(); ++i) text[i] = char(i * 31 + 7);
  CHECK(crc32(text.data() + 5, 995, crc32(text.data(), 5)) == crc32(text.data(), text.size()));
}

TEST_CASE("shard: write then read back, uint16 and uint32") {
  TempDir dir("shard_roundtrip");
  for (uint64_t vocab : {uint64_t(50257), uint64_t(65536), uint64_t(70000)}) {
    CAPTURE(vocab);
    const auto tokens = sample_tokens(12345, int32_t(vocab));
    const std::string path = dir.file("s" + std::to_string(vocab) + ".bin");
    write_shard(path, tokens, vocab, 17, "split=train\nseed=7\n");
    const ShardReader shard(path);
    const uint32_t token_bytes = vocab <= 65536 ? 2 : 4;
    CHECK(shard.header().token_bytes == token_bytes);
    CHECK(fs::file_size(path) == kShardHeaderBytes + tokens.size() * token_bytes);
    CHECK(shard.size() == tokens.size());
    CHECK(shard.vocab_size() == vocab);
    CHECK(shard.document_count() == 17);
    CHECK(shard.metadata_value("split") == "train");
    CHECK(shard.metadata_value("seed") == "7");
    CHECK(shard.metadata_value("missing").empty());
    CHECK((token_bytes == 2 ? shard.tokens_u16().size() : shard.tokens_u32().size()) == tokens.size());
    std::vector<int32_t> back(tokens.size());
    shard.copy_tokens(0, tokens.size(), back.data());
    CHECK(back == tokens);
    CHECK(shard.token(12344) == uint32_t(tokens[12344]));
    CHECK_THROWS_AS(shard.copy_tokens(12340, 6, back.data()), hylo::Error);
  }
  // No temporary file is left beside the shards.
  for (const auto& entry : fs::directory_iterator(dir.path))
    CHECK(entry.path().string().find(".tmp") == std::string::npos);
}

TEST_CASE("shard: an empty shard is valid") {
  TempDir dir("shard_empty");
  write_shard(dir.file("empty.bin"), {}, 50257, 0, "");
  const ShardReader shard(dir.file("empty.bin"));
  CHECK(shard.size() == 0);
  CHECK(fs::file_size(dir.file("empty.bin")) == kShardHeaderBytes);
}

TEST_CASE("shard: a corrupted payload byte is a CRC error naming the file") {
  TempDir dir("shard_crc");
  const std::string path = dir.file("train.bin");
  write_shard(path, sample_tokens(5000, 50257), 50257, 3, "split=train\n");
  flip_byte(path, std::streamoff(kShardHeaderBytes + 4321));
  CHECK_THROWS_WITH_AS(ShardReader{path}, has(path + ": CRC mismatch (header 0x"), hylo::Error);
  // Opening without the payload check is possible (e.g. to inspect a damaged shard's header).
  CHECK(ShardReader(path, /*verify_payload_crc=*/false).size() == 5000);
}

TEST_CASE("shard: a truncated file is a size error naming the file") {
  TempDir dir("shard_truncated");
  const std::string path = dir.file("val.bin");
  write_shard(path, sample_tokens(5000, 50257), 50257, 3, "");
  fs::resize_file(path, kShardHeaderBytes + 2 * 4000 + 1);
  CHECK_THROWS_WITH_AS(ShardReader{path}, has(path + ": truncated: header says 5000 tokens, file holds 4000"),
                       hylo::Error);
  fs::resize_file(path, 100);
  CHECK_THROWS_WITH_AS(ShardReader{path}, has(path + ": truncated: file is 100 bytes"), hylo::Error);
}

TEST_CASE("shard: trailing bytes, wrong magic, damaged header and missing file are refused") {
  TempDir dir("shard_bad");
  const std::string path = dir.file("x.bin");
  write_shard(path, sample_tokens(100, 50257), 50257, 1, "split=val\n");
  {
    std::ofstream append(path, std::ios::binary | std::ios::app);
    append << "zz";
  }
  CHECK_THROWS_WITH_AS(ShardReader{path}, has(path + ": 2 unexpected trailing bytes"), hylo::Error);

  write_shard(path, sample_tokens(100, 50257), 50257, 1, "split=val\n");
  flip_byte(path, 3);
  CHECK_THROWS_WITH_AS(ShardReader{path}, has(path + ": not a hylo token shard (bad magic"), hylo::Error);

  write_shard(path, sample_tokens(100, 50257), 50257, 1, "split=val\n");
  flip_byte(path, 16);  // token count
  CHECK_THROWS_WITH_AS(ShardReader{path}, has(path + ": header CRC mismatch"), hylo::Error);

  write_shard(path, sample_tokens(100, 50257), 50257, 1, "split=val\n");
  flip_byte(path, 60);  // metadata
  CHECK_THROWS_WITH_AS(ShardReader{path}, has("header CRC mismatch"), hylo::Error);

  CHECK_THROWS_WITH_AS(ShardReader{dir.file("absent.bin")}, has(dir.file("absent.bin") + ": cannot open"),
                       hylo::Error);
}

TEST_CASE("shard: the writer refuses out-of-vocab tokens and oversized metadata, keeping the old file") {
  TempDir dir("shard_writer");
  const std::string path = dir.file("keep.bin");
  write_shard(path, sample_tokens(10, 100), 100, 1, "");
  CHECK_THROWS_WITH_AS(write_shard(path, std::vector<int32_t>{1, 2, 100}, 100, 1, ""),
                       has("token 100 at position 2 is outside the vocab"), hylo::Error);
  CHECK_THROWS_WITH_AS(write_shard(path, std::vector<int32_t>{1}, 100, 1, std::string(kShardMetadataBytes + 1, 'm')),
                       has("metadata"), hylo::Error);
  CHECK(ShardReader(path).size() == 10);  // the earlier shard is untouched
}

TEST_CASE("data prepare: whole-document split, separators and determinism") {
  const std::string rank_file = HYLO_SOURCE_DIR "/data/tokenizer/r50k_base.tiktoken";
  REQUIRE_MESSAGE(fs::exists(rank_file), rank_file << " is missing: run scripts/fetch_data.sh first");
  TempDir dir("prepare");
  // Two sources of small documents, each a distinct sentence so documents can be told apart.
  for (const char* source : {"gutenberg", "sotu"}) {
    fs::create_directories(dir.path / "raw" / source);
    std::ofstream(dir.path / "raw" / source / ".fetched") << "test\n";
    for (int d = 0; d < 40; ++d)
      std::ofstream(dir.path / "raw" / source / ("doc" + std::to_string(100 + d) + ".txt"))
          << "Document " << d << " of " << source << " says hello.\n";
  }
  PrepareOptions options;
  options.raw_dir = dir.file("raw");
  options.sources = "gutenberg,sotu";
  options.val_fraction = 0.1;
  options.seed = 99;
  options.out_dir = dir.file("tokens");
  options.tokenizer = rank_file;
  options.threads = 2;
  const auto summary = prepare_tokens(options);
  REQUIRE(summary.size() == 2);
  const ShardReader train(dir.file("tokens/train.bin")), val(dir.file("tokens/val.bin"));
  for (const auto& s : summary) {
    CAPTURE(s.name);
    CHECK(s.documents[0] + s.documents[1] == 40);
    CHECK(s.documents[1] >= 3);  // ~10% of each source's tokens, as whole documents
    CHECK(s.documents[1] <= 4);
  }
  CHECK(train.document_count() + val.document_count() == 80);
  CHECK(val.metadata_value("split") == "val");
  CHECK(train.metadata_value("seed") == "99");
  CHECK(train.metadata_value("sources") == "gutenberg,sotu");
  CHECK(train.vocab_size() == 50257);
  // Every document starts right after one end-of-text token.
  for (const ShardReader* shard : {&train, &val}) {
    uint64_t separators = 0;
    for (uint64_t i = 0; i < shard->size(); ++i) separators += shard->token(i) == kEndOfTextId;
    CHECK(separators == shard->document_count());
    CHECK(shard->token(0) == uint32_t(kEndOfTextId));
  }
  // Same seed: byte-identical shards. Another seed: another split.
  const uint32_t val_crc = val.header().payload_crc;
  prepare_tokens(options);
  CHECK(ShardReader(dir.file("tokens/val.bin")).header().payload_crc == val_crc);
  options.seed = 100;
  prepare_tokens(options);
  CHECK(ShardReader(dir.file("tokens/val.bin")).header().payload_crc != val_crc);

  options.sources = "gutenbreg";
  CHECK_THROWS_WITH_AS(prepare_tokens(options), has("did you mean 'gutenberg'"), hylo::Error);
  options.sources = "brown";
  CHECK_THROWS_WITH_AS(prepare_tokens(options), has("brown: missing or incomplete"), hylo::Error);

  // A document that is not UTF-8 is named, and the shards already written stay as they were.
  const auto bad_file = dir.path / "raw" / "sotu" / "doc999.txt";
  std::ofstream(bad_file, std::ios::binary) << "Latin-1 caf\xe9\n";
  options.sources = "gutenberg,sotu";
  const uint32_t train_crc = ShardReader(dir.file("tokens/train.bin")).header().payload_crc;
  CHECK_THROWS_WITH_AS(prepare_tokens(options), has(bad_file.string() + ": not valid UTF-8 (byte 11)"), hylo::Error);
  CHECK(ShardReader(dir.file("tokens/train.bin")).header().payload_crc == train_crc);
}
