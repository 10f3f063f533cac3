// GPT-2 tokenizer: exact tiktoken ids, agreement of the .tiktoken route with OpenAI's original
// encoder.json + vocab.bpe route on tricky strings and on every core corpus document, and
// lossless round trips. The data comes from scripts/fetch_data.sh (run by .ci/run first).
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <unistd.h>

#include "core/error.h"
#include "core/rng.h"
#include "data/piece_cache.h"
#include "data/tokenizer.h"

namespace fs = std::filesystem;
using hylo::data::Tokenizer;

namespace {

// doctest's Contains takes its own string type; this builds one from a std::string.
doctest::Contains has(const std::string& text) { return doctest::Contains(text.c_str()); }

std::string data_path(const std::string& relative) { return std::string(HYLO_SOURCE_DIR "/data/") + relative; }

void require_fetched(const std::string& path) {
  REQUIRE_MESSAGE(fs::exists(path), path << " is missing: run scripts/fetch_data.sh first");
}

// Loaded once per test binary: parsing the files costs ~0.3 s each.
const Tokenizer& tiktoken_route() {
  require_fetched(data_path("tokenizer/r50k_base.tiktoken"));
  static const Tokenizer tokenizer = Tokenizer::from_tiktoken(data_path("tokenizer/r50k_base.tiktoken"));
  return tokenizer;
}

const Tokenizer& gpt2_route() {
  require_fetched(data_path("tokenizer/encoder.json"));
  require_fetched(data_path("tokenizer/vocab.bpe"));
  static const Tokenizer tokenizer =
      Tokenizer::from_gpt2_files(data_path("tokenizer/encoder.json"), data_path("tokenizer/vocab.bpe"));
  return tokenizer;
}

struct CorpusDocument {
  std::string name;
  std::string text;
};

// Every document of the core sources, in a fixed order.
const std::vector<CorpusDocument>& core_corpus() {
  static const std::vector<CorpusDocument> documents = [] {
    std::vector<CorpusDocument> out;
    for (const char* source : {"gutenberg", "sotu", "brown"}) {
      const std::string dir = data_path(std::string("raw/") + source);
      require_fetched(dir + "/.fetched");
      std::vector<fs::path> files;
      for (const auto& entry : fs::directory_iterator(dir))
        if (entry.is_regular_file() && entry.path().filename().string()[0] != '.') files.push_back(entry.path());
      std::sort(files.begin(), files.end());
      REQUIRE_MESSAGE(!files.empty(), dir << " holds no documents: run scripts/fetch_data.sh");
      for (const auto& file : files) {
        std::ifstream in(file, std::ios::binary);
        std::ostringstream text;
        text << in.rdbuf();
        out.push_back({std::string(source) + "/" + file.filename().string(), text.str()});
      }
    }
    return out;
  }();
  return documents;
}

struct Case {
  const char* text;
  std::vector<int32_t> ids;
};

// Expected ids computed once with two independent implementations that agreed on every row: the
// original GPT-2 encoder algorithm (merge list, Python `regex`, whose \s is Unicode White_Space
// like tiktoken's) and the npm gpt-tokenizer port of tiktoken reading r50k_base.tiktoken.
const std::vector<Case> kTrickyCases = {
    {"Hello world", {15496, 995}},
    {"I'm sure they'll say we've done what you'd expect, isn't it? It's hers.",
     {40, 1101, 1654, 484, 1183, 910, 356, 1053, 1760, 644, 345, 1549, 1607, 11, 2125, 470, 340, 30, 632, 338, 25144, 13}},
    {"DON'T SHOUT, Don't 'Quote' ''s ' s", {41173, 6, 51, 6006, 12425, 11, 2094, 470, 705, 25178, 6, 10148, 82, 705, 264}},
    {"Numbers: 12345 3.14159 1,000,000 2024-01-01 0x1F 1e-9",
     {49601, 25, 17031, 2231, 513, 13, 1415, 19707, 352, 11, 830, 11, 830, 48609, 12, 486, 12, 486, 657, 87, 16, 37, 352,
      68, 12, 24}},
    {"naïve café résumé Ångström Æsir façade",
     {2616, 38776, 40304, 40560, 16345, 2634, 6184, 227, 782, 2536, 9101, 76, 6184, 228, 82, 343, 24685, 16175, 671}},
    // Combining marks are \p{M}: neither letter nor number, so they split words.
    {"cafe\u0301 n\u0303o e\u0308\u0301 \u0301alone",
     {66, 8635, 136, 223, 299, 136, 225, 78, 304, 136, 230, 136, 223, 220, 136, 223, 17749}},
    {"I ❤\ufe0f \U0001f355 and \U0001f468\u200d\U0001f469\u200d\U0001f467! \U0001f44d\U0001f3fd",
     {40, 43074, 97, 37929, 12520, 235, 243, 290, 50169, 101, 447, 235, 41840, 102, 447, 235, 41840, 100, 0, 50169, 235,
      8582, 237, 121}},
    {"你好，世界！日本語のテキスト、한국어 텍스트",
     {19526, 254, 25001, 121, 171, 120, 234, 10310, 244, 45911, 234, 171, 120, 223, 33768, 98, 17312, 105, 45739, 252,
      5641, 24336, 25084, 43302, 23513, 47991, 250, 166, 113, 255, 168, 244, 112, 220, 169, 227, 235, 168, 232, 97, 169,
      232, 116}},
    {"a  b   c\n\n\nd \n e\t\tf\r\ng", {64, 220, 275, 220, 220, 269, 628, 198, 67, 220, 198, 304, 197, 197, 69, 201, 198, 70}},
    {"trailing spaces   ", {9535, 4386, 9029, 220, 220, 220}},
    {"   leading and\n\n  \n", {220, 220, 3756, 290, 628, 220, 220, 198}},
    {"end.<|endoftext|>Start again<|endoftext|>", {437, 13, 50256, 10434, 757, 50256}},
    {"almost <|endoftext| special <|end", {28177, 1279, 91, 437, 1659, 5239, 91, 2041, 1279, 91, 437}},
    {"Ελληνικά Русский العربية עברית हिन्दी",
     {138, 243, 39377, 39377, 138, 115, 26180, 29945, 43000, 138, 105, 12466, 254, 35072, 21727, 21727, 31583, 18849, 140,
      117, 28981, 44690, 26897, 39848, 22654, 45632, 14360, 95, 49603, 37778, 33951, 103, 28225, 117, 11976, 123, 11976,
      101, 24231, 235, 11976, 99, 24231, 222}},
    {"x=1;y+=2 // comment\n\tif (a&&b) {return -1;}",
     {87, 28, 16, 26, 88, 47932, 17, 3373, 2912, 198, 197, 361, 357, 64, 25226, 65, 8, 1391, 7783, 532, 16, 46956}},
    // No-break, ideographic and next-line (U+0085) spaces are White_Space.
    {"a\u00a0b\u3000c x\u0085y", {64, 1849, 65, 5099, 222, 66, 2124, 126, 227, 88}},
    {"abc123def ４５６ Ⅻ x²",
     {39305, 10163, 4299, 27332, 120, 242, 171, 120, 243, 171, 120, 244, 2343, 227, 104, 2124, 31185}},
    {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa !!!!!!!!!!!!!!!! ----",
     {24794, 24794, 24794, 24794, 24794, 24794, 24794, 24794, 24794, 24794, 220, 34635, 34635, 13498}},
    {"’s curly’s “quoted” — dash…", {447, 247, 82, 45731, 447, 247, 82, 564, 250, 421, 5191, 447, 251, 851, 14470, 1399}},
    // U+180E and the C0 separators are not White_Space (PCRE2's \s would take U+180E).
    {"a\u180e b", {64, 157, 254, 236, 275}},
    {"x!\u180e!", {87, 0, 157, 254, 236, 0}},
    {"x\x1cy\x1f z", {87, 216, 88, 219, 1976}},
    {"\ufeffBOM start", {171, 119, 123, 33, 2662, 923}},
    {"tab\vvt\fff", {8658, 199, 36540, 200, 487}},
    {"\u2028line\u2029para", {447, 101, 1370, 447, 102, 1845, 64}},
    {"", {}},
    {" ", {220}},
    {"\n", {198}},
};

}  // namespace

TEST_CASE("tokenizer: hard-coded GPT-2 ids") {
  const Tokenizer& tok = tiktoken_route();
  CHECK(tok.vocab_size() == 50257);
  CHECK(tok.end_of_text_id() == 50256);
  CHECK(tok.encode("Hello world") == std::vector<int32_t>{15496, 995});
  CHECK(tok.encode(" the") == std::vector<int32_t>{262});
  CHECK(tok.encode("The") == std::vector<int32_t>{464});
  CHECK(tok.encode(" and") == std::vector<int32_t>{290});
  CHECK(tok.encode(",") == std::vector<int32_t>{11});
  CHECK(tok.encode(".") == std::vector<int32_t>{13});
  CHECK(tok.encode("\n") == std::vector<int32_t>{198});
  CHECK(tok.encode("<|endoftext|>") == std::vector<int32_t>{50256});
  // encode_ordinary spells the special token as text, like tiktoken's encode_ordinary.
  CHECK(tok.encode_ordinary("<|endoftext|>") == std::vector<int32_t>{27, 91, 437, 1659, 5239, 91, 29});
  CHECK(tok.decode(std::vector<int32_t>{15496, 995, 50256}) == "Hello world<|endoftext|>");
}

TEST_CASE("tokenizer: tricky strings give tiktoken's ids by both routes") {
  const Tokenizer& tiktoken = tiktoken_route();
  const Tokenizer& gpt2 = gpt2_route();
  for (const auto& c : kTrickyCases) {
    CAPTURE(c.text);
    CHECK(tiktoken.encode(c.text) == c.ids);
    CHECK(gpt2.encode(c.text) == c.ids);
    CHECK(tiktoken.decode(c.ids) == c.text);
  }
}

TEST_CASE("tokenizer: encoder.json ids are the tiktoken ranks") {
  const Tokenizer& tiktoken = tiktoken_route();
  const Tokenizer& gpt2 = gpt2_route();
  REQUIRE(gpt2.vocab_size() == tiktoken.vocab_size());
  CHECK(gpt2.end_of_text_id() == tiktoken.end_of_text_id());
  int differing = 0;
  for (int32_t id = 0; id < tiktoken.vocab_size(); ++id) differing += tiktoken.token_bytes(id) != gpt2.token_bytes(id);
  CHECK(differing == 0);
}

TEST_CASE("tokenizer: both routes agree on every core corpus document") {
  const auto& corpus = core_corpus();
  std::vector<std::string> texts;
  for (const auto& d : corpus) texts.push_back(d.text);
  const auto by_ranks = tiktoken_route().encode_ordinary_batch(texts, 2);
  const auto by_merges = gpt2_route().encode_ordinary_batch(texts, 2);
  REQUIRE(by_ranks.size() == corpus.size());
  int differing = 0;
  for (size_t d = 0; d < corpus.size(); ++d) {
    if (by_ranks[d] != by_merges[d]) {
      ++differing;
      FAIL_CHECK(corpus[d].name << ": the .tiktoken and encoder.json/vocab.bpe routes disagree");
    }
  }
  CHECK(differing == 0);
  MESSAGE(corpus.size() << " documents cross-checked");
}

TEST_CASE("tokenizer: decode(encode(doc)) == doc for every core corpus document") {
  const Tokenizer& tok = tiktoken_route();
  const auto& corpus = core_corpus();
  std::vector<std::string> texts;
  for (const auto& d : corpus) texts.push_back(d.text);
  const auto ids = tok.encode_ordinary_batch(texts, 2);
  size_t tokens = 0, bytes = 0;
  for (size_t d = 0; d < corpus.size(); ++d) {
    if (tok.decode(ids[d]) != corpus[d].text) FAIL_CHECK(corpus[d].name << ": round trip changed the text");
    tokens += ids[d].size();
    bytes += corpus[d].text.size();
  }
  // English prose is ~4 bytes per GPT-2 token; far off means the corpus or tokenizer is wrong.
  const double bytes_per_token = double(bytes) / double(tokens);
  CHECK(bytes_per_token > 3.5);
  CHECK(bytes_per_token < 5.0);
}

TEST_CASE("tokenizer: batch encoding equals one-by-one encoding for any thread count") {
  const Tokenizer& tok = tiktoken_route();
  const auto& corpus = core_corpus();
  std::vector<std::string> texts;
  for (size_t d = 0; d < corpus.size(); d += 37) texts.push_back(corpus[d].text.substr(0, 20000));
  const auto one_thread = tok.encode_ordinary_batch(texts, 1);
  const auto three_threads = tok.encode_ordinary_batch(texts, 3);
  REQUIRE(one_thread.size() == texts.size());
  for (size_t d = 0; d < texts.size(); ++d) {
    CHECK(one_thread[d] == tok.encode_ordinary(texts[d]));
    CHECK(three_threads[d] == one_thread[d]);
  }
}

TEST_CASE("tokenizer: long runs use the heap merge and still match the merge-list route") {
  const Tokenizer& tiktoken = tiktoken_route();
  const Tokenizer& gpt2 = gpt2_route();
  for (const std::string& text :
       {std::string(5000, ' ') + "x", std::string(3001, '='), std::string(4097, 'a'), std::string(777, '\n'),
        std::string("x").append(1000, '!').append("?").append(999, '-'), std::string(600, '\t') + " end"}) {
    CAPTURE(text.size());
    const auto ids = tiktoken.encode(text);
    CHECK(ids == gpt2.encode(text));
    CHECK(tiktoken.decode(ids) == text);
  }
}

TEST_CASE("tokenizer: invalid UTF-8 and bad ids are rejected with a clear message") {
  const Tokenizer& tok = tiktoken_route();
  CHECK(hylo::data::first_invalid_utf8("plain ascii") == std::string_view::npos);
  CHECK(hylo::data::first_invalid_utf8("ok \xC3\xA9 then \xFF") == 11);
  CHECK(hylo::data::first_invalid_utf8("\xED\xA0\x80") == 0);  // a UTF-16 surrogate
  CHECK(hylo::data::first_invalid_utf8("\xC0\xAF") == 0);      // overlong '/'
  CHECK(hylo::data::first_invalid_utf8("abc\xE2\x82") == 3);   // truncated sequence
  for (size_t at = 0; at < 41; ++at) {  // ASCII is skipped eight bytes at a time: a bad byte anywhere
    CAPTURE(at);
    std::string text = std::string(41, 'a') + "\xC3\xA9" + std::string(19, 'b');
    CHECK(hylo::data::first_invalid_utf8(text) == std::string_view::npos);
    text[at] = '\xFF';
    CHECK(hylo::data::first_invalid_utf8(text) == at);
    text[at] = 'a';
    text[text.size() - 1 - at % 19] = '\x80';  // a stray continuation byte in the run after the 2-byte character
    CHECK(hylo::data::first_invalid_utf8(text) == text.size() - 1 - at % 19);
  }
  CHECK_THROWS_WITH_AS(tok.encode("ok \xC3\xA9 then \xFF"), has("byte 11"), hylo::Error);
  CHECK_THROWS_WITH_AS(tok.decode(std::vector<int32_t>{50257}), has("out of range"), hylo::Error);
  CHECK_THROWS_WITH_AS(Tokenizer::from_tiktoken(data_path("tokenizer/does-not-exist.tiktoken")),
                       has("does-not-exist.tiktoken"), hylo::Error);
}

TEST_CASE("tokenizer: a malformed rank file is rejected with file and line") {
  const fs::path path = fs::temp_directory_path() / ("hylo_bad_ranks_" + std::to_string(::getpid()) + ".tiktoken");
  {
    std::ofstream out(path);
    out << "IQ== 0\nIg== 1\nnot base64!! 2\n";
  }
  CHECK_THROWS_WITH_AS(Tokenizer::from_tiktoken(path.string()), has(path.string() + ":3:"), hylo::Error);
  fs::remove(path);
}

TEST_CASE("tokenizer: the pre-token memo finds exactly what it stored, or nothing, through growth and replacement") {
  // Random pieces (some too long to keep) with random ids, against a std::map of what was stored:
  // a lookup must give the stored ids or miss (a replaced piece), never another piece's ids; the
  // piece just stored is always found; with room for all, every piece is found. 16 slots reach
  // replacement within a few dozen pieces, the default size only grows.
  for (size_t max_slots : {size_t(16), size_t(1) << 17}) {
    CAPTURE(max_slots);
    hylo::data::PieceCache cache(max_slots);
    std::map<std::string, std::vector<int32_t>> stored;
    hylo::Rng rng{7, 0, 0};
    size_t found = 0, missed = 0;
    for (int n = 0; n < 3000; ++n) {
      std::string piece(1 + rng.below(34), ' ');
      for (char& c : piece) c = char('a' + rng.below(6));  // few letters: many shared prefixes and lengths
      std::vector<int32_t> got;
      if (stored.count(piece)) continue;  // the tokenizer stores only misses
      CHECK_FALSE(cache.append_cached(piece, hylo::data::PieceCache::hash_of(piece), got));  // never stored (or not kept): never found
      std::vector<int32_t> ids(1 + rng.below(7));
      for (int32_t& id : ids) id = int32_t(rng.below(50257));
      cache.insert(piece, hylo::data::PieceCache::hash_of(piece), ids);
      const bool kept = piece.size() <= hylo::data::PieceCache::kMaxKey && ids.size() <= hylo::data::PieceCache::kMaxIds;
      if (kept) stored[piece] = ids;
      got.clear();
      CHECK(cache.append_cached(piece, hylo::data::PieceCache::hash_of(piece), got) == kept);
      if (kept) CHECK(got == ids);
    }
    for (const auto& [piece, ids] : stored) {
      std::vector<int32_t> got = {-1};  // appended to, never replaced
      if (cache.append_cached(piece, hylo::data::PieceCache::hash_of(piece), got)) {
        ++found;
        got.erase(got.begin());
        CHECK(got == ids);
      } else {
        ++missed;
        CHECK(got.size() == 1);
      }
    }
    CHECK(found > 0);
    if (max_slots > 1000) CHECK(missed == 0);
    else CHECK(missed > 0);  // replacement happened
    MESSAGE(max_slots << " slots: " << found << " found, " << missed << " replaced");
  }
}
