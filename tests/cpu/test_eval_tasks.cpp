// Evaluation tasks of SPEC §5: the retrieval set is a fixed function of (val shard, seed) with K/V
// exactly where the spec puts them; the scoring gives an induction "oracle" 100% and a uniform
// model 0%; last-word extraction takes whole lowercase sentence-final words from the manifest's
// Gutenberg documents; `hylo eval --tasks val,retrieval,lastword` on a hand-built checkpoint.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "model_checkpoint_fixture.h"
#include "peaked_model.h"
#include "run_command.h"
#include "temp_dir.h"
#include "autograd/variable.h"
#include "core/rng.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "checkpoint/buffers.h"
#include "checkpoint/checkpoint.h"
#include "config/config.h"
#include "eval/last_word.h"
#include "eval/retrieval.h"

using namespace hylo;
namespace fs = std::filesystem;

namespace {

const std::string kTokenizer = std::string(HYLO_SOURCE_DIR) + "/data/tokenizer/r50k_base.tiktoken";

const data::Tokenizer& tokenizer() {
  static const data::Tokenizer t = data::Tokenizer::from_tiktoken(kTokenizer);
  return t;
}

// The test case's folder, hylo_test_<name>_<pid>; scratch / "f" is the path of its file f.
struct ScratchDir : test::TempDir {
  explicit ScratchDir(const std::string& name) : TempDir("test_" + name) {}
  std::string operator/(const std::string& name) const { return file(name); }
};

// Seeded prose over a small word list: sentences end in '.', '!' or '?', some with a capitalized
// or abbreviated last word, so the last-word rule has something to reject.
std::string prose(uint64_t seed, int sentences) {
  static const char* words[] = {"the", "cat", "saw", "a", "garden", "under", "moon", "river", "walked", "quietly",
                                "into", "old", "house", "hippopotamuses", "bright", "and", "stone", "window"};
  static const char* ends[] = {".", "!", "?"};
  static const char* odd_last[] = {"Hamlet", "Mr", "Exit", "I"};
  Rng rng{seed, 1};
  std::string text;
  for (int s = 0; s < sentences; ++s) {
    const int n = 4 + int(rng.below(8));
    for (int w = 0; w < n; ++w) text += std::string(w ? " " : "The ") + words[rng.below(std::size(words))];
    if (rng.below(5) == 0) text += std::string(" ") + odd_last[rng.below(std::size(odd_last))];
    text += std::string(ends[rng.below(3)]) + (rng.below(4) == 0 ? "\n" : " ");
  }
  return text;
}

// Writes a val shard of GPT-2 tokens (one 50256 before each document) and, optionally, the
// manifest `hylo data prepare` would write beside it.
void write_val_shard(const std::string& path, const std::vector<std::pair<std::string, std::string>>& docs,
                     bool manifest) {
  std::vector<int32_t> tokens;
  std::string rows = "split\tsource\tfile\ttokens\n";
  for (const auto& [source, text] : docs) {
    const std::vector<int32_t> ids = tokenizer().encode_ordinary(text);
    tokens.push_back(data::kEndOfTextId);
    tokens.insert(tokens.end(), ids.begin(), ids.end());
    rows += "train\t" + source + "\tother.txt\t999\n";  // rows of another split are skipped
    rows += "val\t" + source + "\t" + source + ".txt\t" + std::to_string(ids.size()) + "\n";
  }
  data::write_shard(path, tokens, 50257, docs.size(), "split=val\nmanifest=manifest.tsv\n");
  if (manifest) std::ofstream((fs::path(path).parent_path() / "manifest.tsv").string()) << rows;
}

// The induction oracle: the token that followed the most recent earlier occurrence of the 4
// tokens ending at position p, as one-hot logits (zeros when there is none).
std::vector<float> induction_rows(const std::vector<int32_t>& ids, int first, int count, int vocab) {
  std::vector<float> rows(size_t(count) * size_t(vocab), 0.0f);
  for (int i = 0; i < count; ++i) {
    const int p = first - 1 + i;
    for (int j = p - 1; j >= 3; --j) {
      if (std::equal(ids.begin() + (j - 3), ids.begin() + j + 1, ids.begin() + (p - 3))) {
        rows[size_t(i) * size_t(vocab) + size_t(ids[size_t(j + 1)])] = 30.0f;
        break;
      }
    }
  }
  return rows;
}

}  // namespace

TEST_CASE("retrieval distances: the x4 ladder from 8, then the largest that fits") {
  CHECK(default_retrieval_distances(128) == std::vector<int>{8, 32, 112});
  CHECK(default_retrieval_distances(2048) == std::vector<int>{8, 32, 128, 512, 2032});
  CHECK(default_retrieval_distances(4096) == std::vector<int>{8, 32, 128, 512, 2048, 4080});
  CHECK(default_retrieval_distances(24) == std::vector<int>{8});
  CHECK(default_retrieval_distances(16).empty());
}

TEST_CASE("retrieval set: deterministic per seed, prefix-stable, K V placed exactly at distance d") {
  ScratchDir scratch("retrieval_set");
  write_val_shard(scratch / "val.bin", {{"gutenberg", prose(1, 600)}, {"brown", prose(2, 600)}}, false);
  const data::ShardReader val(scratch / "val.bin");
  const std::vector<int32_t> pool = data::common_token_pool(val);
  REQUIRE(pool.size() >= 8);
  CHECK(std::find(pool.begin(), pool.end(), data::kEndOfTextId) == pool.end());

  RetrievalOptions o;
  o.seq_len = 160;
  o.per_distance = 12;
  o.seed = 77;
  // The set is built from the shard and the options alone (no model is an input), so every model
  // evaluated with the same shard and seed sees these very sequences.
  const std::vector<RetrievalItem> a = build_retrieval_set(val, o), b = build_retrieval_set(val, o);
  REQUIRE(a.size() == 12 * 4);  // distances 8, 32, 128, 144
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].ids == b[i].ids);
    CHECK(a[i].query == b[i].query);
  }
  RetrievalOptions fewer = o;
  fewer.per_distance = 5;
  const std::vector<RetrievalItem> prefix = build_retrieval_set(val, fewer);
  CHECK(prefix[0].ids == a[0].ids);
  CHECK(prefix[4].ids == a[4].ids);
  CHECK(prefix[5].ids == a[12].ids);  // first item of distance 32
  RetrievalOptions other = o;
  other.seed = 78;
  const std::vector<RetrievalItem> c = build_retrieval_set(val, other);
  int same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i].ids == c[i].ids;
  CHECK(same == 0);

  std::vector<int> queries_mod;
  for (const RetrievalItem& item : a) {
    CAPTURE(item.distance);
    CHECK(item.ids.size() == 160);
    CHECK(item.source >= 0);
    CHECK(item.query == item.source + data::kSpanTokens + item.distance);
    CHECK(item.query + data::kSpanTokens <= 160);
    for (int k = 0; k < 4; ++k) {
      CHECK(item.ids[size_t(item.source + k)] == item.key[size_t(k)]);
      CHECK(item.ids[size_t(item.source + 4 + k)] == item.value[size_t(k)]);
      CHECK(item.ids[size_t(item.query + k)] == item.key[size_t(k)]);
      CHECK(item.ids[size_t(item.query + 4 + k)] == item.value[size_t(k)]);
    }
    std::vector<int32_t> kv(item.key.begin(), item.key.end());
    kv.insert(kv.end(), item.value.begin(), item.value.end());
    for (int32_t id : kv) CHECK(std::find(pool.begin(), pool.end(), id) != pool.end());
    std::sort(kv.begin(), kv.end());
    CHECK(std::adjacent_find(kv.begin(), kv.end()) == kv.end());  // 8 distinct ids
    CHECK(std::count(item.ids.begin(), item.ids.end(), data::kEndOfTextId) == 0);  // filler inside one document
    queries_mod.push_back(item.query % 16);
  }
  // The query position varies (the block-offset buckets need both sides).
  CHECK(std::count_if(queries_mod.begin(), queries_mod.end(), [](int r) { return r < 4; }) > 0);
  CHECK(std::count_if(queries_mod.begin(), queries_mod.end(), [](int r) { return r >= 4; }) > 0);
  o.distances = {200};
  CHECK_THROWS_WITH_AS(build_retrieval_set(val, o), doctest::Contains("does not fit"), Error);
}

TEST_CASE("retrieval scoring: an induction oracle scores 100%, a uniform model 0%, by distance and block offset") {
  ScratchDir scratch("retrieval_score");
  write_val_shard(scratch / "val.bin", {{"gutenberg", prose(3, 800)}}, false);
  const data::ShardReader val(scratch / "val.bin");
  RetrievalOptions o;
  o.seq_len = 128;
  o.per_distance = 10;
  const std::vector<RetrievalItem> items = build_retrieval_set(val, o);
  constexpr int kVocab = 50304, kValid = 50257;
  std::vector<SpanScore> oracle, uniform;
  for (const RetrievalItem& item : items) {
    const int first = item.query + data::kSpanKeyTokens;
    const std::vector<int32_t> targets(item.value.begin(), item.value.end());
    std::vector<float> rows = induction_rows(item.ids, first, 4, kVocab);
    for (int i = 0; i < 4; ++i) rows[size_t(i) * kVocab + kValid + 3] = 1e4f;  // padding ids never win
    oracle.push_back(score_span(Tensor::from_vector(rows, {4, kVocab}), kValid, targets));
    uniform.push_back(score_span(Tensor::from_vector(std::vector<float>(4 * size_t(kVocab), 0.0f), {4, kVocab}), kValid, targets));
  }
  const RetrievalResult good = tally_retrieval(items, oracle, o, 64, 16);
  const RetrievalResult bad = tally_retrieval(items, uniform, o, 64, 16);
  REQUIRE(good.rows.size() == 3);
  for (const RetrievalRow& row : good.rows) {
    CHECK(row.all.n == 10);
    CHECK(row.all.accuracy() == 1.0);
    CHECK(row.all.mean_logprob() > -1e-6);
    CHECK(row.near.n + row.far.n == 10);
  }
  int near = 0;
  for (const RetrievalItem& item : items) near += item.query % 64 < 16;
  CHECK(good.near.n == near);
  CHECK(good.far.n == int(items.size()) - near);
  CHECK(good.rows.back().near.n == 0);  // d = 112: the query can only be at 120, r = 56
  CHECK(bad.overall.accuracy() == 0.0);
  // All-equal logits: argmax ties go to id 0, which this small shard's pool may hold.
  CHECK(bad.overall.token_accuracy() < 0.1);
  CHECK(bad.overall.mean_logprob() == doctest::Approx(-std::log(double(kValid))));
  const RetrievalResult one = tally_retrieval(items, oracle, o, 0, 0);  // not pbb: one bucket
  CHECK(one.near.n == 0);
  CHECK(one.far.n == 0);
  CHECK_FALSE(one.json().contains("near"));
  CHECK(good.json()["near"]["n"] == near);
  CHECK(good.json()["by_distance"].size() == good.rows.size());
}

TEST_CASE("score_sequences: batched scores equal score_span over one sequence's own forward rows") {
  const Transformer model(test::peaked_hybrid(40), 11);
  Rng rng{2, 0, 0};
  std::vector<ScoredSequence> sequences;
  for (int s = 0; s < 5; ++s) {
    ScoredSequence q;
    for (int t = 0; t < 12; ++t) q.ids.push_back(int32_t(rng.below(37)));
    q.first = 3 + s;
    q.count = 1 + s % 3;
    sequences.push_back(q);
  }
  const std::vector<SpanScore> batched = score_sequences(model, sequences, 37, Device::cpu, /*max_batch=*/2);
  REQUIRE(batched.size() == 5);
  NoGradGuard no_grad;
  for (size_t s = 0; s < 5; ++s) {
    const ScoredSequence& q = sequences[s];
    const std::vector<float> all = model.forward(Tensor::from_vector(q.ids, {1, 12})).value().to_vector<float>();
    const std::vector<float> rows(all.begin() + (q.first - 1) * 40, all.begin() + (q.first - 1 + q.count) * 40);
    const SpanScore one = score_span(Tensor::from_vector(rows, {q.count, 40}), 37,
                                     std::span<const int32_t>(q.ids).subspan(size_t(q.first), size_t(q.count)));
    CHECK(batched[s].tokens == q.count);
    CHECK(batched[s].correct == one.correct);
    CHECK(batched[s].logprob == doctest::Approx(one.logprob).epsilon(1e-5));
  }
}

TEST_CASE("last word: whole lowercase sentence-final words, from the manifest's gutenberg documents") {
  const data::Tokenizer& tok = tokenizer();
  auto ids = [&](const std::string& s) { return tok.encode_ordinary(s); };
  const std::vector<int32_t> hippo = ids(" hippopotamuses");
  REQUIRE(hippo.size() >= 2);  // the multi-token case below is real
  CHECK(is_last_word(tok, hippo, ids(".")[0]));
  CHECK(is_last_word(tok, ids(" garden"), ids("!")[0]));
  CHECK_FALSE(is_last_word(tok, std::vector<int32_t>(hippo.begin() + 1, hippo.end()), ids(".")[0]));  // a word's tail
  CHECK_FALSE(is_last_word(tok, ids(" garden"), ids(",")[0]));
  CHECK_FALSE(is_last_word(tok, ids(" Hamlet"), ids(".")[0]));
  CHECK_FALSE(is_last_word(tok, ids(" Mr"), ids(".")[0]));

  ScratchDir scratch("last_word");
  write_val_shard(scratch / "val.bin", {{"brown", prose(4, 300)}, {"gutenberg", prose(5, 300)}, {"sotu", prose(6, 100)}},
                  true);
  const data::ShardReader val(scratch / "val.bin");
  const std::vector<ShardDocument> docs = shard_documents(val);
  REQUIRE(docs.size() == 3);
  CHECK(docs[1].source == "gutenberg");
  LastWordOptions o;
  o.seq_len = 48;
  o.passages = 40;
  const LastWordSet set = build_last_word_set(last_word_source(val, o.source), tok, o);
  CHECK(set.documents.find("1 gutenberg documents") != std::string::npos);
  REQUIRE(set.passages.size() == 40);
  CHECK(set.candidates > 40);
  bool multi = false, in_context = false;
  for (const LastWordPassage& p : set.passages) {
    CHECK(p.word_begin >= docs[1].begin + uint64_t(o.seq_len) - uint64_t(p.word_tokens));
    CHECK(p.word_end < docs[1].end);
    CHECK(p.ids.size() == 48);
    std::vector<int32_t> shard_ids(48);
    val.copy_tokens(p.word_end - 48, 48, shard_ids.data());
    CHECK(p.ids == shard_ids);
    const std::vector<int32_t> word(p.ids.begin() + p.word_first, p.ids.end());
    CHECK(int(word.size()) == p.word_tokens);
    const std::string text = tok.decode(word);
    CAPTURE(text);
    CHECK(text[0] == ' ');
    CHECK(std::all_of(text.begin() + 1, text.end(), [](char c) { return c >= 'a' && c <= 'z'; }));
    const std::string next = tok.token_bytes(int32_t(val.token(p.word_end)));
    CHECK((next[0] == '.' || next[0] == '!' || next[0] == '?'));
    multi |= text == " hippopotamuses";
    in_context |= p.in_context;
  }
  CHECK(multi);
  CHECK(in_context);
  // Same seed, same passages; without a matching manifest every document is used.
  const LastWordSet again = build_last_word_set(last_word_source(val, o.source), tok, o);
  CHECK(again.passages.front().ids == set.passages.front().ids);
  CHECK(again.passages.back().word_end == set.passages.back().word_end);
  fs::remove(scratch / "manifest.tsv");
  const LastWordSet all = build_last_word_set(last_word_source(val, o.source), tok, o);
  CHECK(all.documents.find("all 3 documents") != std::string::npos);
  CHECK(all.candidates > set.candidates);
}

TEST_CASE("last word from held-out text: each file a document, passages never cross documents") {
  const data::Tokenizer tok = data::Tokenizer::from_tiktoken(kTokenizer);
  const std::vector<TextDocument> texts{{"a.txt", prose(11, 200)}, {"b.txt", prose(12, 200)}};
  const LastWordSource source = last_word_source(texts, tok);
  REQUIRE(source.docs.size() == 2);
  CHECK(source.docs[0].begin == 0);
  CHECK(source.docs[0].end == source.docs[1].begin);
  CHECK(source.docs[1].end == source.tokens.size());
  CHECK(std::vector<int32_t>(source.tokens.begin(), source.tokens.begin() + int64_t(source.docs[0].end)) ==
        tok.encode_ordinary(texts[0].text));
  CHECK(source.documents == "2 held-out documents (a.txt, b.txt)");
  LastWordOptions o;
  o.seq_len = 48;
  o.passages = 1000;  // every candidate
  const LastWordSet set = build_last_word_set(source, tok, o);
  REQUIRE(set.passages.size() == size_t(set.candidates));
  REQUIRE(set.candidates > 20);
  bool second = false;
  for (const LastWordPassage& p : set.passages) {
    const ShardDocument& doc = p.word_end < source.docs[0].end ? source.docs[0] : source.docs[1];
    CHECK(p.word_end - uint64_t(o.seq_len) >= doc.begin);  // the whole passage inside one document
    CHECK(p.ids == std::vector<int32_t>(source.tokens.begin() + int64_t(p.word_end) - o.seq_len,
                                        source.tokens.begin() + int64_t(p.word_end)));
    second |= p.word_begin >= source.docs[1].begin;
  }
  CHECK(second);
}

TEST_CASE("hylo eval --tasks val,retrieval,lastword on a hand-built checkpoint writes the expected JSON") {
  ScratchDir scratch("eval_tasks");
  write_val_shard(scratch / "val.bin", {{"gutenberg", prose(7, 400)}, {"brown", prose(8, 200)}}, true);
  Config config;
  config.model.vocab_size = 50304;
  config.model.d_model = 16;
  config.model.n_layers = 2;
  config.model.n_heads = 2;
  config.model.ffn_hidden = 32;
  config.model.pattern = "LG";
  config.model.local = {"pbb", 0, 16, 4};
  config.train.seq_len = 64;
  config.train.batch_size = 2;
  config.train.eval_batches = 1;
  config.data.train = config.data.val = scratch / "val.bin";
  config.device = "cpu";
  validate(config);
  Transformer model(config.model, 5);
  test::write_model_checkpoint(scratch / "run", config, model, 3);

  const std::string base = std::string(HYLO_BINARY_DIR) + "/hylo eval " + (scratch / "run") +
                           " --tasks val,retrieval,lastword --n 4 --tokenizer " + kTokenizer + " --json ";
  const test::CommandResult a = test::run_command(base + (scratch / "a.json"));
  REQUIRE_MESSAGE(a.exit_code == 0, a.output);
  const test::CommandResult b = test::run_command(base + (scratch / "b.json"));
  REQUIRE_MESSAGE(b.exit_code == 0, b.output);
  CHECK(a.output.find("val_loss") != std::string::npos);
  CHECK(a.output.find("retrieval: 4 sequences/distance, L 64") != std::string::npos);
  CHECK(a.output.find("near r<4") != std::string::npos);
  CHECK(a.output.find("lastword: 4 of") != std::string::npos);
  auto slurp = [](const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string text = slurp(scratch / "a.json");
  CHECK(text == slurp(scratch / "b.json"));  // same sequences, same numbers
  const nlohmann::json json = nlohmann::json::parse(text);
  CHECK(json.contains("checkpoint"));
  CHECK(json["step"] == 3);
  CHECK(json["val"]["loss"].is_number());
  CHECK(json["val"]["perplexity"].is_number());
  const nlohmann::json& retrieval = json["retrieval"];
  CHECK(retrieval["by_distance"].front()["distance"] == 8);
  CHECK(retrieval["by_distance"].back()["distance"] == 48);
  for (const char* bucket : {"overall", "near", "far"}) CHECK(retrieval[bucket]["mean_logprob"].is_number());
  CHECK(retrieval["block"] == 16);
  CHECK(retrieval["bridge"] == 4);
  CHECK(json["lastword"]["in_context"]["accuracy"].is_number());
  CHECK(json["lastword"]["documents"].get<std::string>().find("gutenberg") != std::string::npos);

  // Held-out text instead of the val shard: --text serves lastword as it serves ppl.
  std::ofstream(scratch / "heldout.txt") << prose(9, 300);
  const test::CommandResult held = test::run_command(std::string(HYLO_BINARY_DIR) + "/hylo eval " + (scratch / "run") +
                                                     " --tasks lastword --n 6 --tokenizer " + kTokenizer + " --text " +
                                                     (scratch / "heldout.txt") + " --json " + (scratch / "h.json"));
  REQUIRE_MESSAGE(held.exit_code == 0, held.output);
  const nlohmann::json held_json = nlohmann::json::parse(slurp(scratch / "h.json"));
  CHECK(held_json["lastword"]["n"] == 6);
  CHECK(held_json["lastword"]["documents"] == "1 held-out documents (" + (scratch / "heldout.txt") + ")");
  const test::CommandResult stray = test::run_command(std::string(HYLO_BINARY_DIR) + "/hylo eval " + (scratch / "run") +
                                                      " --tasks val --text " + (scratch / "heldout.txt"));
  CHECK(stray.exit_code == 2);
  CHECK(stray.output.find("--text is the text of --tasks ppl and lastword, neither of which is among the tasks") !=
        std::string::npos);

  const test::CommandResult bad = test::run_command(base + (scratch / "c.json") + " --tasks val,lambada");
  CHECK(bad.exit_code != 0);
  CHECK(bad.output.find("eval: --tasks: lambada needs its file: lambada=PATH") != std::string::npos);
  // A missing tokenizer fails before any task runs (it used to, after val and retrieval had).
  const test::CommandResult no_tokenizer =
      test::run_command(base + (scratch / "d.json") + " --tokenizer " + (scratch / "none.tiktoken"));
  CHECK(no_tokenizer.exit_code != 0);
  CHECK(no_tokenizer.output.find((scratch / "none.tiktoken") + ": cannot open tokenizer file") !=
        std::string::npos);
  CHECK(no_tokenizer.output.find("val_loss") == std::string::npos);
  CHECK_FALSE(std::filesystem::exists(scratch / "d.json"));
}
