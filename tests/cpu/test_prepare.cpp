// `hylo data prepare` on users' corpora (data/prepare.h): each format (a txt folder, documents
// split by a separator, jsonl, jsonl.gz, jsonl.zst) gives the ids the tokenizer gives each
// document, behind one 50256; the split is by documents, or by a token range when there are too
// few; the ids do not depend on the worker count; bad input is refused naming the file (and line)
// with the output folder left as it was. And `hylo data import` of llm.c / nanoGPT token files.
#include <doctest/doctest.h>
#include <zlib.h>
#include <zstd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/sha256.h"
#include "data/import.h"
#include "data/prepare.h"
#include "data/json_line.h"
#include "data/prepare_pipeline.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "error_of.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using namespace hylo::data;
using hylo::test::TempDir;
using hylo::test::error_of;

namespace {

const std::string kRankFile = HYLO_SOURCE_DIR "/data/tokenizer/r50k_base.tiktoken";

const Tokenizer& tokenizer() {
  static const Tokenizer t = Tokenizer::from_tiktoken(kRankFile);
  return t;
}

// Distinct, varied documents: some long, with non-ASCII text and characters JSON must escape.
std::vector<std::string> sample_documents(int n) {
  std::vector<std::string> docs;
  for (int d = 0; d < n; ++d) {
    std::string text = "Document " + std::to_string(d) + " says \"hello\"\tto caf\u00e9 \u65e5\u672c.\n";
    for (int k = 0; k < d % 7; ++k) text += "And then line " + std::to_string(k * d) + " followed, slowly.\n";
    docs.push_back(text);
  }
  return docs;
}

std::string jsonl_of(const std::vector<std::string>& docs) {
  std::string out;
  for (size_t d = 0; d < docs.size(); ++d)
    out += nlohmann::json{{"id", d}, {"text", docs[d]}, {"meta", {{"n", 1}}}}.dump() + "\n";
  return out;
}

void write(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string gzip_of(const std::string& bytes) {
  uLongf size = compressBound(uLong(bytes.size())) + 64;
  std::string out(size, '\0');
  z_stream z{};
  deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);  // +16: a gzip wrapper
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = uInt(bytes.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = uInt(out.size());
  REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// Two frames, as `cat a.zst b.zst` or a parallel compressor writes them.
std::string zstd_of(const std::string& bytes) {
  std::string out;
  const size_t half = bytes.size() / 2;
  for (std::string_view piece : {std::string_view(bytes).substr(0, half), std::string_view(bytes).substr(half)}) {
    std::string frame(ZSTD_compressBound(piece.size()), '\0');
    const size_t n = ZSTD_compress(frame.data(), frame.size(), piece.data(), piece.size(), 3);
    REQUIRE(!ZSTD_isError(n));
    out.append(frame.data(), n);
  }
  return out;
}

CorpusOptions options_for(const std::vector<std::string>& inputs, const TempDir& dir) {
  CorpusOptions o;
  o.inputs = inputs;
  o.out_dir = dir.file("out");
  o.tokenizer = kRankFile;
  o.val_fraction = 0.1;
  o.workers = 2;
  o.batch_bytes = 2000;  // many batches from a small corpus
  o.shard_tokens = 1500;
  return o;
}

// All tokens of a split's shards, in order, as the manifest lists them.
std::vector<int32_t> split_tokens(const std::string& out, const std::string& split) {
  std::vector<int32_t> all;
  for (int i = 0;; ++i) {
    const fs::path p = fs::path(out) / fmt::format("{}_{:06d}.bin", split, i);
    if (!fs::exists(p)) break;
    const ShardReader shard(p.string());
    std::vector<int32_t> t(shard.size());
    shard.copy_tokens(0, t.size(), t.data());
    all.insert(all.end(), t.begin(), t.end());
  }
  return all;
}

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Every file prepare wrote, by name, for byte-for-byte comparisons.
std::map<std::string, std::string> output_files(const std::string& out) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::directory_iterator(out)) files[e.path().filename().string()] = bytes_of(e.path());
  return files;
}

// The ids prepare must write for `docs` split by `val` (one flag per document).
std::vector<int32_t> expected_stream(const std::vector<std::string>& docs, const std::vector<bool>& val, bool want_val) {
  std::vector<int32_t> out;
  for (size_t d = 0; d < docs.size(); ++d) {
    if (val[d] != want_val) continue;
    out.push_back(kEndOfTextId);
    const auto ids = tokenizer().encode_ordinary(docs[d]);
    out.insert(out.end(), ids.begin(), ids.end());
  }
  return out;
}

}  // namespace

TEST_CASE("data prepare: a folder of txt files, walked recursively, gives each file's ids behind a 50256") {
  REQUIRE_MESSAGE(fs::exists(kRankFile), kRankFile << " is missing: run scripts/fetch_data.sh first");
  TempDir dir("prepare_txt");
  const auto docs = sample_documents(60);
  for (size_t d = 0; d < docs.size(); ++d)  // zero-padded names: path order is document order
    write(dir.file(fmt::format("corpus/part{}/doc{:03d}.txt", d / 20, d)), docs[d]);
  write(dir.file("corpus/.hidden/skip.txt"), "never read");
  write(dir.file("corpus/.fetched"), "never read");
  const PrepareSummary s = prepare_corpus(options_for({dir.file("corpus")}, dir));

  REQUIRE(s.inputs.size() == 1);
  CHECK(s.inputs[0].files == 60);
  CHECK(s.inputs[0].label == "corpus");
  CHECK(s.inputs[0].documents[1] == 6);  // floor(60 x 0.1 + u), u < 0.9
  CHECK(s.inputs[0].documents[0] == 54);
  CHECK(!s.token_range_split);
  // Which documents are val: the manifest's val rows name them.
  std::vector<bool> val(docs.size(), false);
  std::ifstream rows(dir.file("out/val_documents.tsv"));
  std::string line;
  std::getline(rows, line);
  CHECK(line == "split\tsource\tfile\ttokens");
  while (std::getline(rows, line)) {
    const size_t at = line.find("doc");
    REQUIRE(at != std::string::npos);
    val[size_t(std::stoi(line.substr(at + 3, 3)))] = true;
  }
  CHECK(!val[0]);  // an input's first document always trains
  CHECK(split_tokens(dir.file("out"), "train") == expected_stream(docs, val, false));
  CHECK(split_tokens(dir.file("out"), "val") == expected_stream(docs, val, true));

  // Shards of at most shard_tokens, numbered; the manifest lists them and hashes every input.
  const auto manifest = nlohmann::json::parse(bytes_of(dir.file("out/manifest.json")));
  uint64_t listed = 0;
  for (const auto& shard : manifest["shards"]) {
    const ShardReader r(dir.file("out/" + shard["file"].get<std::string>()));
    CHECK(r.size() == shard["tokens"].get<uint64_t>());
    CHECK(r.size() <= 1500);
    CHECK(r.document_count() == shard["documents"].get<uint64_t>());
    CHECK(r.metadata_value("split") == shard["split"].get<std::string>());
    listed += r.size();
  }
  CHECK(listed == s.tokens[0] + s.tokens[1]);
  CHECK(manifest["shards"].size() > 2);
  CHECK(manifest["split"]["by"] == "documents");
  CHECK(manifest["tokenizer"]["vocab_size"] == 50257);
  const auto& first_file = manifest["inputs"][0]["files"][0];
  CHECK(first_file["sha256"] == hylo::sha256_file(first_file["path"].get<std::string>()));
  CHECK(manifest["inputs"][0]["files"].size() == 60);
  // Nothing of the staging folder is left.
  for (const auto& e : fs::directory_iterator(dir.file("out"))) CHECK(e.path().filename().string()[0] != '.');
}

TEST_CASE("data prepare: jsonl, jsonl.gz, jsonl.zst and txt with a separator give the same shards") {
  TempDir dir("prepare_formats");
  const auto docs = sample_documents(80);
  const std::string lines = jsonl_of(docs);
  write(dir.file("in/a.jsonl"), lines);
  write(dir.file("in/b.jsonl.gz"), gzip_of(lines));
  write(dir.file("in/c.jsonl.zst"), zstd_of(lines));
  std::string separated;
  for (const auto& d : docs) separated += d + "<|doc|>";
  write(dir.file("in/d.txt"), separated);

  std::map<std::string, std::string> reference;
  for (const char* name : {"a.jsonl", "b.jsonl.gz", "c.jsonl.zst", "d.txt"}) {
    CAPTURE(name);
    CorpusOptions o = options_for({dir.file(std::string("in/") + name)}, dir);
    o.doc_separator = std::string(name) == "d.txt" ? "<|doc|>" : "";
    const PrepareSummary s = prepare_corpus(o);
    CHECK(s.inputs[0].documents[0] + s.inputs[0].documents[1] == 80);
    auto files = output_files(dir.file("out"));
    files.erase("manifest.json");  // names its input
    files.erase("val_documents.tsv");
    if (reference.empty()) reference = files;
    CHECK(files == reference);
  }
  // And they are the documents' own ids.
  std::vector<bool> val(docs.size(), false);
  const auto manifest = nlohmann::json::parse(bytes_of(dir.file("out/manifest.json")));
  CHECK(manifest["inputs"][0]["files"][0]["compression"] == "none");
  std::vector<int32_t> train = split_tokens(dir.file("out"), "train");
  CHECK(train.size() + split_tokens(dir.file("out"), "val").size() == expected_stream(docs, val, false).size());
}

TEST_CASE("data prepare: the ids are the same for 1, 2 and 4 workers") {
  TempDir dir("prepare_workers");
  const auto docs = sample_documents(300);
  write(dir.file("c.jsonl.zst"), zstd_of(jsonl_of(docs)));
  std::map<std::string, std::string> reference;
  for (int workers : {1, 2, 4}) {
    CAPTURE(workers);
    CorpusOptions o = options_for({dir.file("c.jsonl.zst")}, dir);
    o.workers = workers;
    o.batch_bytes = 700;
    prepare_corpus(o);
    const auto files = output_files(dir.file("out"));
    if (reference.empty()) reference = files;
    CHECK(files == reference);  // manifest included: nothing in it depends on the workers
  }
}

TEST_CASE("data prepare: a document longer than a batch part is cut where the ids do not change") {
  TempDir dir("prepare_long");
  std::string book;  // ~9 MB: three parts of at most kMaxPartBytes
  for (const auto& e : fs::directory_iterator(HYLO_SOURCE_DIR "/data/raw/gutenberg")) {
    if (e.path().extension() == ".txt") book += bytes_of(e.path());
    if (book.size() > 2 * kMaxPartBytes + 1000) break;
  }
  REQUIRE_MESSAGE(book.size() > 2 * kMaxPartBytes, "needs data/raw/gutenberg (scripts/fetch_data.sh)");
  write(dir.file("book.txt"), book);
  write(dir.file("short.txt"), "A second, short document.");
  CorpusOptions o = options_for({dir.file("book.txt"), dir.file("short.txt")}, dir);
  o.shard_tokens = 100'000'000;
  const PrepareSummary s = prepare_corpus(o);
  CHECK(s.token_range_split);  // two inputs of one document each: no document rule can fill val
  std::vector<int32_t> all = split_tokens(dir.file("out"), "train"), val = split_tokens(dir.file("out"), "val");
  all.insert(all.end(), val.begin(), val.end());
  std::vector<int32_t> expected = {kEndOfTextId};
  const auto ids = tokenizer().encode_ordinary(book);
  expected.insert(expected.end(), ids.begin(), ids.end());
  expected.push_back(kEndOfTextId);
  const auto tail = tokenizer().encode_ordinary("A second, short document.");
  expected.insert(expected.end(), tail.begin(), tail.end());
  CHECK(all == expected);
}

TEST_CASE("data prepare: one document is split by a token range, and an empty split is refused at prepare time") {
  TempDir dir("prepare_range");
  const auto docs = sample_documents(40);
  std::string one;
  for (const auto& d : docs) one += d;
  write(dir.file("single.txt"), one);
  CorpusOptions o = options_for({dir.file("single.txt")}, dir);
  const PrepareSummary s = prepare_corpus(o);
  CHECK(s.token_range_split);
  const uint64_t total = s.tokens[0] + s.tokens[1];
  CHECK(s.tokens[1] == uint64_t(std::ceil(0.1 * double(total))));
  const ShardReader val(dir.file("out/val_000000.bin"));
  CHECK(val.metadata_value("split_rule").starts_with("token range"));
  CHECK(ShardReader(dir.file("out/train_000000.bin")).metadata_value("split_rule").starts_with("token range"));
  const auto manifest = nlohmann::json::parse(bytes_of(dir.file("out/manifest.json")));
  CHECK(manifest["split"]["by"] == "token range");
  std::vector<int32_t> stream = split_tokens(dir.file("out"), "train"), v = split_tokens(dir.file("out"), "val");
  stream.insert(stream.end(), v.begin(), v.end());
  CHECK(stream == expected_stream({one}, {false}, false));

  o.val_fraction = 0;
  CHECK(error_of([&] { prepare_corpus(o); }).find("--val-fraction 0 is not in (0, 0.5]") != std::string::npos);
  write(dir.file("empty.jsonl"), "{\"text\": \"\"}\n\n");
  CHECK(error_of([&] { prepare_corpus(options_for({dir.file("empty.jsonl")}, dir)); }).find("no documents") !=
        std::string::npos);
  write(dir.file("blank/a.txt"), "");
  write(dir.file("blank/b.txt"), "");
  CHECK(error_of([&] { prepare_corpus(options_for({dir.file("blank")}, dir)); }).find("no documents") !=
        std::string::npos);
}

TEST_CASE("data prepare: --val-docs takes exactly that many documents, globs work, stale shards are replaced") {
  TempDir dir("prepare_valdocs");
  const auto docs = sample_documents(90);
  for (int part = 0; part < 3; ++part)
    write(dir.file(fmt::format("shard{}.jsonl", part)),
          jsonl_of(std::vector<std::string>(docs.begin() + part * 30, docs.begin() + part * 30 + 30)));
  write(dir.file("other.txt"), "not matched by the glob");
  CorpusOptions o = options_for({dir.file("shard*.jsonl")}, dir);
  o.shard_tokens = 200;  // many shards
  prepare_corpus(o);
  const size_t many = output_files(dir.file("out")).size();
  o.val_docs = 7;
  o.shard_tokens = 100'000;
  const PrepareSummary s = prepare_corpus(o);
  CHECK(s.inputs[0].files == 3);
  CHECK(s.inputs[0].documents[1] == 7);
  CHECK(s.inputs[0].documents[0] == 83);
  CHECK(output_files(dir.file("out")).size() == 4);  // train_000000, val_000000, the manifest and the tsv
  CHECK(many > 4);
  o.val_docs = 90;
  CHECK(error_of([&] { prepare_corpus(o); }).find("--val-docs 90 leaves no training documents") != std::string::npos);
}

TEST_CASE("data prepare: with bad lines in several batches, the first in input order is the one named") {
  // Batch 0 is lines 1 to ~9,940 (a line's bytes, newline aside, count), bad only at 9,901; batch 1,
  // the file's last ~35 lines, is read at once and bad from 9,960. Its worker fails long before
  // batch 0's has tokenized 9,900 good lines: the pipeline before a6b1b43, which reported the first
  // failure in time, named line 9,960 in 3 of 3 runs here.
  TempDir dir("prepare_order");
  std::string lines;
  for (int i = 1; i <= 9975; ++i) {
    const bool bad = i == 9901 || i >= 9960;
    lines += bad ? fmt::format("{{\"body\": \"line {}\"}}\n", i)
                 : fmt::format("{{\"text\": \"Line {:05d} of a corpus, long enough to make a megabyte of batches.\"}}\n", i);  // 78 bytes
  }
  write(dir.file("order.jsonl"), lines);
  CorpusOptions o = options_for({dir.file("order.jsonl")}, dir);
  o.batch_bytes = 9940 * 78;
  const std::string message = error_of([&] { prepare_corpus(o); });
  CHECK_MESSAGE(message.find(dir.file("order.jsonl") + ":9901: no \"text\" key") != std::string::npos, message);
}

TEST_CASE("data prepare: bad input names the file and line, and leaves the output as it was") {
  TempDir dir("prepare_bad");
  write(dir.file("good.jsonl"), jsonl_of(sample_documents(30)));
  prepare_corpus(options_for({dir.file("good.jsonl")}, dir));
  const auto before = output_files(dir.file("out"));
  auto fails = [&](const std::string& input, const std::string& expected, const std::string& key = "text") {
    CAPTURE(input);
    CorpusOptions o = options_for({input}, dir);
    o.text_key = key;
    const std::string message = error_of([&] { prepare_corpus(o); });
    CHECK_MESSAGE(message.find(expected) != std::string::npos, message);
    CHECK(output_files(dir.file("out")) == before);
  };
  std::string lines = jsonl_of(sample_documents(30));
  write(dir.file("broken.jsonl"), lines + "{\"text\": \"unterminated\n" + lines);
  fails(dir.file("broken.jsonl"), dir.file("broken.jsonl") + ":31: not valid JSON");
  fails(dir.file("good.jsonl"), dir.file("good.jsonl") + ":1: no \"content\" key (top-level keys: id, meta, text)",
        "content");
  write(dir.file("number.jsonl"), "{\"text\": 5}\n");
  fails(dir.file("number.jsonl"), ":1: \"text\" holds a number, expected a string");
  write(dir.file("array.jsonl"), "[1, 2]\n");
  fails(dir.file("array.jsonl"), ":1: expected a JSON object, found an array");
  write(dir.file("latin1.txt"), "caf\xe9 au lait");
  fails(dir.file("latin1.txt"), dir.file("latin1.txt") + ": not valid UTF-8 at byte 3");
  const std::string zst = zstd_of(lines);
  write(dir.file("cut.jsonl.zst"), zst.substr(0, zst.size() - 5));
  fails(dir.file("cut.jsonl.zst"), dir.file("cut.jsonl.zst") + ": truncated zstd stream");
  const std::string gz = gzip_of(lines);
  write(dir.file("cut.jsonl.gz"), gz.substr(0, gz.size() / 2));
  fails(dir.file("cut.jsonl.gz"), dir.file("cut.jsonl.gz") + ": truncated gzip stream");
  fails(dir.file("absent.txt"), "--input " + dir.file("absent.txt") + ": no such file or folder");
  fails(dir.file("*.nothing"), "the pattern matches no file");
  fs::create_directories(dir.file("empty_folder"));
  fails(dir.file("empty_folder"), "holds no files");
}

TEST_CASE("data prepare: a jsonl line's text is read from its top-level key only") {
  // One parser reads line after line (its padded buffer reused), as a prepare worker does.
  hylo::data::JsonLineParser parser;
  auto json_line_text = [&](std::string_view line, const std::string& key) { return std::string(parser.text(line, key)); };
  CHECK(json_line_text(R"({"a": {"text": "inner"}, "text": "outer \u00e9\n", "b": [1, "x"]})", "text") ==
        "outer \u00e9\n");
  CHECK(json_line_text(R"({"content": "x"})", "content") == "x");
  auto error = [&](std::string_view line) { return error_of([&] { json_line_text(line, "text"); }); };
  CHECK(error(R"({"text": "a"} {"text": "b"})").find("not valid JSON") == 0);
  CHECK(error(R"("text")") == "expected a JSON object, found a string");
  CHECK(error(R"({"text": {"a": 1}})") == R"("text" holds an object, expected a string)");
  CHECK(error(R"({"text": null})") == R"("text" holds null, expected a string)");
  CHECK(error(R"({"text": [true]})") == R"("text" holds an array, expected a string)");
  CHECK(error("{\"text\": \"caf\xe9\"}") == "not valid UTF-8; documents must be UTF-8");
  CHECK(error(R"({"text": "a", "n": 01})").find("not valid JSON") == 0);  // a bad value beside the text
  CHECK(error(R"({"text": "\ud800"})").find("not valid JSON") == 0);      // a lone surrogate
  CHECK(error(R"({"a": 1, "b": 2, "c": 3, "d": 4, "e": 5, "f": 6, "g": 7, "h": 8, "i": 9})") ==
        "no \"text\" key (top-level keys: a, b, c, d, e, f, g, h); name the text field with --text-key");
  // A long line, then a short one: the reused buffer holds only the short one's text.
  const std::string long_text(5000, 'x');
  CHECK(json_line_text(R"({"text": ")" + long_text + R"("})", "text") == long_text);
  CHECK(json_line_text(R"({"id": 7, "text": "short \"quoted\""})", "text") == "short \"quoted\"");
}

TEST_CASE("data import: llm.c shards and nanoGPT's train.bin/val.bin become hylo shards and a manifest") {
  TempDir dir("import");
  std::vector<uint16_t> train(30000), val(4000);
  for (size_t i = 0; i < train.size(); ++i) train[i] = uint16_t(i % 7 == 0 ? 50256 : i % 50000);
  for (size_t i = 0; i < val.size(); ++i) val[i] = uint16_t(i % 5 == 0 ? 50256 : (i * 3) % 50000);
  auto write_llmc = [&](const std::string& name, const std::vector<uint16_t>& tokens) {
    std::vector<int32_t> header(256, 0);
    header[0] = 20240520, header[1] = 1, header[2] = int32_t(tokens.size());
    std::ofstream out(dir.file(name), std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), 1024);
    out.write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * 2));
  };
  write_llmc("fineweb_val_000000.bin", val);
  write_llmc("fineweb_train_000001.bin", std::vector<uint16_t>(train.begin(), train.begin() + 20000));
  write_llmc("fineweb_train_000002.bin", std::vector<uint16_t>(train.begin() + 20000, train.end()));
  ImportOptions o;
  o.inputs = {dir.file("fineweb_*.bin")};
  o.out_dir = dir.file("out");
  o.shard_tokens = 12000;
  const ImportSummary s = import_tokens(o);
  CHECK(s.files[0] == 2);
  CHECK(s.files[1] == 1);
  CHECK(!s.token_range_split);
  std::vector<int32_t> want_train(train.begin(), train.end()), want_val(val.begin(), val.end());
  CHECK(split_tokens(dir.file("out"), "train") == want_train);
  CHECK(split_tokens(dir.file("out"), "val") == want_val);
  CHECK(ShardReader(dir.file("out/train_000002.bin")).size() == 6000);  // 30000 in shards of 12000
  CHECK(ShardReader(dir.file("out/train_000000.bin")).document_count() == 12000 / 7 + 1);
  const auto manifest = nlohmann::json::parse(bytes_of(dir.file("out/manifest.json")));
  CHECK(manifest["inputs"][0]["format"] == "llmc");
  CHECK(manifest["inputs"][0]["sha256"] == hylo::sha256_file(dir.file("fineweb_train_000001.bin")));

  // nanoGPT: raw uint16, named by the format; without a val file the last tokens are validation.
  fs::create_directories(dir.file("nano"));
  std::ofstream(dir.file("nano/train.bin"), std::ios::binary)
      .write(reinterpret_cast<const char*>(train.data()), std::streamsize(train.size() * 2));
  o.inputs = {dir.file("nano/train.bin")};
  o.val_fraction = 0.1;
  CHECK(error_of([&] { import_tokens(o); }).find("must be named: format nanogpt") != std::string::npos);
  o.format = ShardFormat::nanogpt;
  const ImportSummary n = import_tokens(o);
  CHECK(n.token_range_split);
  CHECK(n.tokens[1] == 3000);
  std::vector<int32_t> all = split_tokens(dir.file("out"), "train"), tail = split_tokens(dir.file("out"), "val");
  all.insert(all.end(), tail.begin(), tail.end());
  CHECK(all == want_train);
}
