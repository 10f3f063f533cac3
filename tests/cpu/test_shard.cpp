// Token shards: round trips in both dtypes, and every kind of damage (corrupt byte, truncation,
// wrong magic, damaged header, ids outside the vocab) is refused with a message naming the file.
// Also the foreign token files read directly: llm.c's and nanoGPT's.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <numeric>

#include <fmt/format.h>

#include "core/error.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using namespace hylo::data;
using hylo::test::TempDir;

namespace {

// doctest's Contains takes its own string type; this builds one from a std::string.
doctest::Contains has(const std::string& text) { return doctest::Contains(text.c_str()); }

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
    const std::string path = dir.file(fmt::format("s{}.bin", vocab));
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

TEST_CASE("shard: a CRC-valid shard with an id outside its vocab is refused at open, naming the file") {
  TempDir dir("shard_range");
  const std::string path = dir.file("bad.bin");
  write_shard(path, sample_tokens(3000, 50257), 50257, 1, "");
  // Rewrite one token and fix the payload CRC, as a buggy external writer would leave it.
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(kShardHeaderBytes + 2 * 1234));
    const uint16_t big = 60000;
    f.write(reinterpret_cast<const char*>(&big), 2);
  }
  std::vector<int32_t> tokens(3000);
  ShardReader(path, false).copy_tokens(0, 3000, tokens.data());
  CHECK(tokens[1234] == 60000);
  std::vector<uint16_t> narrow(tokens.begin(), tokens.end());
  const uint32_t crc = crc32(narrow.data(), narrow.size() * 2);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.write(reinterpret_cast<const char*>(&crc), 4);
  }
  rewrite_shard_metadata(path, "split=train\n");  // recomputes the header CRC
  CHECK_THROWS_WITH_AS(ShardReader{path},
                       has(path + ": token id 60000 at position 1234 is outside the shard's vocab [0, 50257)"),
                       hylo::Error);
  CHECK(ShardReader(path, false).metadata_value("split") == "train");
}

TEST_CASE("shard: the streaming writer equals write_shard, and the largest id is known at open") {
  TempDir dir("shard_stream");
  const auto tokens = sample_tokens(3'000'001, 50257);  // more than one flush of the writer
  write_shard(dir.file("whole.bin"), tokens, 50257, 5, "split=train\n");
  {
    ShardWriter writer(dir.file("pieces.bin"), 50257);
    for (size_t at = 0; at < tokens.size(); at += 777'777)
      writer.append(std::span(tokens).subspan(at, std::min<size_t>(777'777, tokens.size() - at)));
    CHECK(writer.size() == tokens.size());
    CHECK(!fs::exists(dir.file("pieces.bin")));  // only the temporary file until finish()
    writer.finish(5, "split=train\n");
  }
  std::ifstream a(dir.file("whole.bin"), std::ios::binary), b(dir.file("pieces.bin"), std::ios::binary);
  CHECK(std::string(std::istreambuf_iterator<char>(a), {}) == std::string(std::istreambuf_iterator<char>(b), {}));
  CHECK(ShardReader(dir.file("pieces.bin")).max_token() == 50256);
  {
    ShardWriter abandoned(dir.file("abandoned.bin"), 50257);
    abandoned.append(tokens);
  }
  CHECK(!fs::exists(dir.file("abandoned.bin")));
  CHECK(!fs::exists(dir.file("abandoned.bin.tmp")));
}

namespace {

// llm.c's dev/data/data_common.py write_datafile: 256 int32 header (magic, version, count), tokens.
void write_llmc(const std::string& path, const std::vector<uint16_t>& tokens, int32_t magic = 20240520,
                int32_t version = 1) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic, header[1] = version, header[2] = int32_t(tokens.size());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), 1024);
  out.write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * 2));
}

}  // namespace

TEST_CASE("shard: llm.c token files are read by their magic, nanoGPT's raw uint16 when named") {
  TempDir dir("shard_foreign");
  std::vector<uint16_t> tokens = {50256, 15496, 995, 50256, 40, 716, 13};
  write_llmc(dir.file("fineweb_val_000000.bin"), tokens);
  const ShardReader llmc(dir.file("fineweb_val_000000.bin"));
  CHECK(llmc.format() == ShardFormat::llmc);
  CHECK(llmc.size() == 7);
  CHECK(llmc.vocab_size() == 50257);
  CHECK(llmc.document_count() == 2);
  CHECK(llmc.token(2) == 995);

  std::vector<uint16_t> long_tokens;
  for (int k = 0; k < 100; ++k) long_tokens.insert(long_tokens.end(), tokens.begin(), tokens.end());
  std::ofstream(dir.file("train.bin"), std::ios::binary)
      .write(reinterpret_cast<const char*>(long_tokens.data()), std::streamsize(long_tokens.size() * 2));
  CHECK_THROWS_WITH_AS(ShardReader{dir.file("train.bin")}, has("must be named: format nanogpt"), hylo::Error);
  const ShardReader raw(dir.file("train.bin"), true, ShardFormat::nanogpt);
  CHECK(raw.size() == 700);
  CHECK(raw.token(699) == 13);
  CHECK(raw.document_count() == 200);
  std::ofstream(dir.file("small.bin"), std::ios::binary).write("\x01\x00", 2);
  CHECK_THROWS_WITH_AS(ShardReader{dir.file("small.bin")}, has("must be named: format nanogpt"), hylo::Error);
  CHECK(ShardReader(dir.file("small.bin"), true, ShardFormat::nanogpt).size() == 1);

  write_llmc(dir.file("v2.bin"), tokens, 20240520, 2);
  CHECK_THROWS_WITH_AS(ShardReader{dir.file("v2.bin")}, has("v2.bin: llm.c token file version 2"), hylo::Error);
  tokens.push_back(50300);  // beyond GPT-2's vocab
  write_llmc(dir.file("big.bin"), tokens);
  CHECK_THROWS_WITH_AS(ShardReader{dir.file("big.bin")},
                       has("big.bin: token id 50300 at position 7 is outside the shard's vocab [0, 50257)"), hylo::Error);
  write_llmc(dir.file("short.bin"), tokens);
  fs::resize_file(dir.file("short.bin"), 1024 + 6);
  CHECK_THROWS_WITH_AS(ShardReader{dir.file("short.bin")}, has("short.bin: truncated: header says 8 tokens, file holds 3"),
                       hylo::Error);
}
