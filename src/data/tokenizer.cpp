#include "data/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstring>
#include <atomic>
#include <limits>
#include <optional>
#include <queue>
#include <span>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "core/error.h"
#include "data/piece_cache.h"
#include "core/file.h"

namespace hylo::data {
namespace {

// GPT-2's pre-tokenizer. tiktoken runs it through Rust's regex, where \s means the Unicode
// White_Space property; PCRE2's \s under UCP also matches U+180E, so White_Space is spelled out
// to get tiktoken's splits exactly.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\p{White_Space}\p{L}\p{N}]+)"
    R"(|\p{White_Space}+(?!\P{White_Space})|\p{White_Space}+)";

constexpr uint32_t kNoRank = std::numeric_limits<uint32_t>::max();
// Pieces longer than this use the heap-based merge; shorter ones the simpler linear rescan,
// which is faster for typical word-sized pieces.
constexpr size_t kLongPiece = 128;

// Heterogeneous hashing so maps keyed by std::string can be probed with string_views.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

std::string read_tokenizer_file(const std::string& path) {
  std::optional<std::string> text = read_file(path);
  HYLO_CHECK(text, "{}: cannot open tokenizer file (run scripts/fetch_data.sh)", path);
  return std::move(*text);
}

bool decode_base64(std::string_view text, std::string& out) {
  out.clear();
  uint32_t accumulator = 0;
  int bits = 0;
  for (char c : text) {
    int v;
    if (c >= 'A' && c <= 'Z') v = c - 'A';
    else if (c >= 'a' && c <= 'z') v = c - 'a' + 26;
    else if (c >= '0' && c <= '9') v = c - '0' + 52;
    else if (c == '+') v = 62;
    else if (c == '/') v = 63;
    else if (c == '=') break;
    else return false;
    accumulator = (accumulator << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(char((accumulator >> bits) & 0xFF));
    }
  }
  return !out.empty();
}

// Decodes a vocab string written in GPT-2's code-point alphabet back to raw bytes.
bool gpt2_string_to_bytes(std::string_view text, const std::unordered_map<uint32_t, uint8_t>& byte_of,
                          std::string& out) {
  out.clear();
  for (size_t i = 0; i < text.size();) {
    auto c = uint8_t(text[i]);
    uint32_t cp;
    int len;
    if (c < 0x80) cp = c, len = 1;
    else if ((c & 0xE0) == 0xC0) cp = c & 0x1F, len = 2;
    else if ((c & 0xF0) == 0xE0) cp = c & 0x0F, len = 3;
    else return false;  // the alphabet stays below U+0144
    if (i + len > text.size()) return false;
    for (int k = 1; k < len; ++k) cp = (cp << 6) | (uint8_t(text[i + k]) & 0x3F);
    auto it = byte_of.find(cp);
    if (it == byte_of.end()) return false;
    out.push_back(char(it->second));
    i += len;
  }
  return true;
}

struct PcreCodeDeleter {
  void operator()(pcre2_code* code) const { pcre2_code_free(code); }
};

}  // namespace

const std::array<uint32_t, 256>& gpt2_byte_codepoints() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> cp{};
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      cp[b] = printable ? b : next++;
    }
    return cp;
  }();
  return table;
}

std::string gpt2_token_text(std::string_view bytes) {
  std::string text;
  for (unsigned char b : bytes) {
    const uint32_t cp = gpt2_byte_codepoints()[b];  // below U+0800: one or two UTF-8 bytes
    if (cp < 0x80) {
      text.push_back(char(cp));
    } else {
      text.push_back(char(0xC0 | (cp >> 6)));
      text.push_back(char(0x80 | (cp & 0x3F)));
    }
  }
  return text;
}

// Rank of every mergeable byte string (tiktoken: rank = id), probed several times per BPE merge.
// Open addressing over 32-byte slots that hold the first 16 key bytes inline, so a probe for a
// short string (nearly all: pairs of word fragments) reads one cache line; longer keys are
// compared against the token's own bytes. One table serves every thread (read-only after
// loading), about 4 MiB for r50k_base. (An unordered_map chased bucket, node and key: ~17% of a
// prepare worker's time, perf on the dev box.)
class RankTable {
 public:
  void build(const std::vector<std::string>& bytes_of, size_t count, const std::string& source) {
    size_t size = 16;
    while (size < 2 * count + 16) size *= 2;  // load <= 1/2: a miss ends at an empty slot soon
    slots_.assign(size, Slot{});
    mask_ = size - 1;
    bytes_of_ = &bytes_of;
    for (size_t id = 0; id < count; ++id) {
      const std::string_view key = bytes_of[id];
      HYLO_CHECK(!key.empty() && key.size() < 65536, "{}: token bytes of id {} have length {}", source, id, key.size());
      HYLO_CHECK(find(key) == kNoRank, "{}: token bytes of id {} appear twice", source, id);
      const uint64_t h = hash_of(key);
      size_t i = h & mask_;
      while (slots_[i].length != 0) i = (i + 1) & mask_;
      Slot& slot = slots_[i];
      slot.hash = h;
      slot.rank = uint32_t(id);
      slot.length = uint16_t(key.size());
      std::memcpy(slot.prefix, key.data(), std::min(key.size(), sizeof slot.prefix));
    }
  }
  // The rank of `key`, or kNoRank.
  uint32_t find(std::string_view key) const {
    if (key.empty() || key.size() >= 65536) return kNoRank;
    const uint64_t h = hash_of(key);
    const size_t inline_bytes = std::min(key.size(), sizeof(Slot::prefix));
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (slot.length == 0) return kNoRank;
      if (slot.hash != h || slot.length != key.size() || std::memcmp(slot.prefix, key.data(), inline_bytes) != 0)
        continue;
      if (key.size() <= sizeof(Slot::prefix) || std::string_view((*bytes_of_)[slot.rank]) == key) return slot.rank;
    }
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t rank = 0;
    uint16_t length = 0;  // 0: empty (no token is empty)
    char prefix[16] = {};
  };
  static_assert(sizeof(Slot) == 32, "two slots a cache line");
  static uint64_t hash_of(std::string_view key) { return std::hash<std::string_view>{}(key); }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  const std::vector<std::string>* bytes_of_ = nullptr;  // the keys past their inline prefix
};

struct Tokenizer::Impl {
  std::string source;
  std::vector<std::string> bytes_of;  // id -> token bytes, special token last
  int32_t end_of_text = kEndOfTextId;
  std::unique_ptr<pcre2_code, PcreCodeDeleter> pattern;
  bool jit = false;

  // tiktoken route: rank (= id) of every mergeable byte string; keys are bytes_of's.
  RankTable rank_of;

  // encoder.json + vocab.bpe route: (left id, right id) -> (merge priority, merged id).
  bool use_merge_list = false;
  std::unordered_map<uint64_t, std::pair<uint32_t, int32_t>> merge_of;
  std::array<int32_t, 256> id_of_byte{};

  void compile_pattern();
  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
  void bpe_by_rank(std::string_view piece, std::vector<int32_t>& out) const;
  void bpe_by_rank_long(std::string_view piece, std::vector<int32_t>& out) const;
  void bpe_by_merge_list(std::string_view piece, std::vector<int32_t>& out) const;
  void index_ranks();
};

void Tokenizer::Impl::compile_pattern() {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pattern.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kGpt2Pattern.data()), kGpt2Pattern.size(),
                              PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr));
  if (!pattern) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof message);
    HYLO_FAIL("GPT-2 pre-tokenizer regex does not compile at offset {}: {}", error_offset,
              reinterpret_cast<char*>(message));
  }
  jit = pcre2_jit_compile(pattern.get(), PCRE2_JIT_COMPLETE) == 0;
}

void Tokenizer::Impl::index_ranks() {
  rank_of.build(bytes_of, bytes_of.size() - 1, source);  // the special token (last) is not mergeable
}

void Tokenizer::Impl::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  if (use_merge_list) bpe_by_merge_list(piece, out);
  else bpe_by_rank(piece, out);
}

// tiktoken's byte_pair_merge: repeatedly merge the adjacent pair whose concatenation has the
// lowest rank (leftmost on ties) until no adjacent pair is a token.
void Tokenizer::Impl::bpe_by_rank(std::string_view piece, std::vector<int32_t>& out) const {
  if (const uint32_t whole = rank_of.find(piece); whole != kNoRank) {
    out.push_back(int32_t(whole));
    return;
  }
  if (piece.size() > kLongPiece) {
    bpe_by_rank_long(piece, out);
    return;
  }
  struct Part {
    uint32_t start;
    uint32_t rank;  // rank of the bytes from this part's start to the start of the part after next
  };
  thread_local std::vector<Part> parts;
  parts.clear();
  for (uint32_t i = 0; i <= piece.size(); ++i) parts.push_back({i, kNoRank});
  auto pair_rank = [&](size_t i) -> uint32_t {
    if (i + 2 >= parts.size()) return kNoRank;
    return rank_of.find(piece.substr(parts[i].start, parts[i + 2].start - parts[i].start));
  };
  for (size_t i = 0; i + 2 < parts.size(); ++i) parts[i].rank = pair_rank(i);
  while (parts.size() > 2) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < parts.size(); ++i)
      if (parts[i].rank < parts[best].rank) best = i;
    if (parts[best].rank == kNoRank) break;
    parts.erase(parts.begin() + ptrdiff_t(best) + 1);
    parts[best].rank = pair_rank(best);
    if (best > 0) parts[best - 1].rank = pair_rank(best - 1);
  }
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    const uint32_t rank = rank_of.find(piece.substr(parts[i].start, parts[i + 1].start - parts[i].start));
    HYLO_CHECK(rank != kNoRank, "{}: byte {} has no rank (not a byte-level BPE file?)", source,
               int(uint8_t(piece[parts[i].start])));
    out.push_back(int32_t(rank));
  }
}

// The same merge order as bpe_by_rank in O(n log n), for long pieces (runs of spaces or symbols)
// where rescanning every pair after each merge would be quadratic. A heap ordered by (rank,
// start) pops the lowest rank, leftmost on ties -- exactly the pair the linear scan would pick,
// since merging never moves a part's start. Entries made stale by a merge are skipped on pop.
void Tokenizer::Impl::bpe_by_rank_long(std::string_view piece, std::vector<int32_t>& out) const {
  const uint32_t n = uint32_t(piece.size());
  std::vector<uint32_t> next(n), prev(n), pair_rank(n, kNoRank);
  std::vector<bool> alive(n, true);
  for (uint32_t i = 0; i < n; ++i) next[i] = i + 1, prev[i] = i - 1;  // prev[0] wraps: never read
  auto end_of = [&](uint32_t part) { return part < n ? next[part] : n; };  // one past a part's bytes
  auto rank_after = [&](uint32_t part) -> uint32_t {                    // rank of part + next part
    if (next[part] >= n) return kNoRank;
    return rank_of.find(piece.substr(part, end_of(next[part]) - part));
  };
  using Entry = std::pair<uint32_t, uint32_t>;  // (rank, start)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
  for (uint32_t i = 0; i + 1 < n; ++i)
    if ((pair_rank[i] = rank_after(i)) != kNoRank) heap.push({pair_rank[i], i});
  while (!heap.empty()) {
    auto [rank, part] = heap.top();
    heap.pop();
    if (!alive[part] || pair_rank[part] != rank) continue;
    const uint32_t absorbed = next[part];
    alive[absorbed] = false;
    next[part] = next[absorbed];
    if (next[part] < n) prev[next[part]] = part;
    if ((pair_rank[part] = rank_after(part)) != kNoRank) heap.push({pair_rank[part], part});
    if (part > 0) {
      const uint32_t before = prev[part];
      if ((pair_rank[before] = rank_after(before)) != kNoRank) heap.push({pair_rank[before], before});
    }
  }
  for (uint32_t part = 0; part < n; part = next[part]) {
    const uint32_t rank = rank_of.find(piece.substr(part, next[part] - part));
    HYLO_CHECK(rank != kNoRank, "{}: byte {} has no rank (not a byte-level BPE file?)", source,
               int(uint8_t(piece[part])));
    out.push_back(int32_t(rank));
  }
}

// The original GPT-2 encoder: find the adjacent pair that appears earliest in the merge list and
// merge every occurrence of it in one left-to-right pass; repeat.
void Tokenizer::Impl::bpe_by_merge_list(std::string_view piece, std::vector<int32_t>& out) const {
  std::vector<int32_t> word, merged;
  for (char c : piece) word.push_back(id_of_byte[uint8_t(c)]);
  auto key = [](int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); };
  while (word.size() > 1) {
    uint32_t best_priority = kNoRank;
    int32_t first = -1, second = -1, result = -1;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      auto it = merge_of.find(key(word[i], word[i + 1]));
      if (it != merge_of.end() && it->second.first < best_priority) {
        best_priority = it->second.first;
        first = word[i], second = word[i + 1], result = it->second.second;
      }
    }
    if (best_priority == kNoRank) break;
    merged.clear();
    for (size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == first && word[i + 1] == second) {
        merged.push_back(result);
        i += 2;
      } else {
        merged.push_back(word[i++]);
      }
    }
    word.swap(merged);
  }
  out.insert(out.end(), word.begin(), word.end());
}

namespace {

// Per-thread PCRE2 state: match data and a JIT stack big enough for long whitespace runs, where
// `\s+(?!\S)` backtracks one character at a time.
class PatternMatcher {
 public:
  explicit PatternMatcher(const pcre2_code* pattern, bool jit) : pattern_(pattern), jit_(jit) {
    match_data_ = pcre2_match_data_create_from_pattern(pattern, nullptr);
    context_ = pcre2_match_context_create(nullptr);
    if (jit_) {
      jit_stack_ = pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, nullptr);
      pcre2_jit_stack_assign(context_, nullptr, jit_stack_);
    }
    HYLO_CHECK(match_data_ && context_ && (!jit_ || jit_stack_), "out of memory creating PCRE2 match state");
  }
  ~PatternMatcher() {
    if (jit_stack_) pcre2_jit_stack_free(jit_stack_);
    pcre2_match_context_free(context_);
    pcre2_match_data_free(match_data_);
  }
  PatternMatcher(const PatternMatcher&) = delete;
  PatternMatcher& operator=(const PatternMatcher&) = delete;

  // End of the pre-token starting at `start` (the pattern covers every character, so matches
  // are contiguous). The text was validated as UTF-8 once, so PCRE2 need not re-check it.
  size_t match_end(std::string_view text, size_t start) {
    auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    int rc = jit_ ? pcre2_jit_match(pattern_, subject, text.size(), start, 0, match_data_, context_)
                  : pcre2_match(pattern_, subject, text.size(), start, PCRE2_NO_UTF_CHECK, match_data_, context_);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
      rc = pcre2_match(pattern_, subject, text.size(), start, PCRE2_NO_UTF_CHECK, match_data_, nullptr);
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof message);
      HYLO_FAIL("pre-tokenizer failed at byte {}: {}", start, reinterpret_cast<char*>(message));
    }
    PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match_data_);
    HYLO_CHECK(ovector[0] == start && ovector[1] > start, "pre-tokenizer skipped text at byte {}", start);
    return ovector[1];
  }

 private:
  const pcre2_code* pattern_;
  bool jit_;
  pcre2_match_data* match_data_ = nullptr;
  pcre2_match_context* context_ = nullptr;
  pcre2_jit_stack* jit_stack_ = nullptr;
};

void encode_plain(const Tokenizer::Impl& impl, std::string_view text, PatternMatcher& matcher, PieceCache& cache,
                  std::vector<int32_t>& out) {
  // Pieces go through the memo in runs of kRun: all of a run's slots are prefetched before the
  // first lookup (PieceCache::prefetch). Lookups still go in text order, so a piece stored by an
  // earlier one of the run is found by a later one, and the ids are those of one at a time.
  constexpr size_t kRun = 16;
  std::array<std::string_view, kRun> pieces;
  std::array<uint64_t, kRun> hashes;
  std::vector<int32_t> piece_ids;
  for (size_t start = 0; start < text.size();) {
    size_t n = 0;
    for (; n < kRun && start < text.size(); ++n) {
      const size_t end = matcher.match_end(text, start);
      pieces[n] = text.substr(start, end - start);
      hashes[n] = PieceCache::hash_of(pieces[n]);
      cache.prefetch(hashes[n]);
      start = end;
    }
    for (size_t i = 0; i < n; ++i) {
      if (cache.append_cached(pieces[i], hashes[i], out)) continue;
      piece_ids.clear();
      impl.bpe(pieces[i], piece_ids);
      out.insert(out.end(), piece_ids.begin(), piece_ids.end());
      cache.insert(pieces[i], hashes[i], piece_ids);
    }
  }
}

void check_utf8(std::string_view text) {
  size_t bad = first_invalid_utf8(text);
  HYLO_CHECK(bad == std::string_view::npos, "text is not valid UTF-8 (byte {} of {})", bad, text.size());
}

}  // namespace

size_t first_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  size_t n = text.size();
  for (size_t i = 0; i < n;) {
    uint8_t c = s[i];
    if (c < 0x80) {
      ++i;
      // Runs of ASCII (most of English text) eight bytes at a time.
      for (uint64_t word; i + 8 <= n; i += 8) {
        std::memcpy(&word, s + i, 8);
        if (word & 0x8080808080808080ull) break;
      }
      continue;
    }
    int len;
    uint32_t cp, min_cp;
    if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F, min_cp = 0x80;
    else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F, min_cp = 0x800;
    else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07, min_cp = 0x10000;
    else return i;
    if (i + len > n) return i;
    for (int k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::string_view::npos;
}

Tokenizer Tokenizer::from_tiktoken(const std::string& rank_file) {
  auto impl = std::make_shared<Impl>();
  impl->source = rank_file;
  std::string text = read_tokenizer_file(rank_file);
  std::string bytes;
  size_t line_number = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string_view line(text.data() + pos, eol - pos);
    pos = eol + 1;
    ++line_number;
    if (line.empty()) continue;
    size_t space = line.find(' ');
    HYLO_CHECK(space != std::string_view::npos && decode_base64(line.substr(0, space), bytes),
               "{}:{}: expected '<base64 token> <rank>'", rank_file, line_number);
    size_t rank = 0;
    for (char c : line.substr(space + 1)) {
      HYLO_CHECK(c >= '0' && c <= '9' && rank < (1u << 30), "{}:{}: bad rank", rank_file, line_number);
      rank = rank * 10 + size_t(c - '0');
    }
    // tiktoken assigns ids = ranks; requiring them dense and in order keeps id lookup a vector.
    HYLO_CHECK(rank == impl->bytes_of.size(), "{}:{}: rank {} out of order (expected {})", rank_file,
               line_number, rank, impl->bytes_of.size());
    impl->bytes_of.push_back(bytes);
  }
  HYLO_CHECK(impl->bytes_of.size() >= 256, "{}: holds {} ranks, fewer than the 256 single bytes", rank_file,
             impl->bytes_of.size());
  impl->end_of_text = int32_t(impl->bytes_of.size());  // r50k_base: 50256
  impl->bytes_of.emplace_back(kEndOfText);
  impl->index_ranks();
  for (int b = 0; b < 256; ++b)
    HYLO_CHECK(impl->rank_of.find(std::string(1, char(b))) != kNoRank, "{}: byte {} has no rank", rank_file, b);
  impl->compile_pattern();
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_gpt2_files(const std::string& encoder_json, const std::string& vocab_bpe) {
  auto impl = std::make_shared<Impl>();
  impl->source = encoder_json + " + " + vocab_bpe;
  impl->use_merge_list = true;

  std::unordered_map<uint32_t, uint8_t> byte_of_codepoint;
  for (int b = 0; b < 256; ++b) byte_of_codepoint[gpt2_byte_codepoints()[b]] = uint8_t(b);

  nlohmann::json encoder;
  try {
    encoder = nlohmann::json::parse(read_tokenizer_file(encoder_json));
  } catch (const nlohmann::json::parse_error& e) {
    HYLO_FAIL("{}: not valid JSON: {}", encoder_json, e.what());
  }
  HYLO_CHECK(encoder.is_object(), "{}: expected a JSON object of token -> id", encoder_json);
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> id_of;  // GPT-2 alphabet
  std::string bytes;
  for (const auto& [token, value] : encoder.items()) {
    HYLO_CHECK(value.is_number_integer(), "{}: the id of '{}' is not an integer: {}", encoder_json, token, value.dump());
    const auto id = value.get<int64_t>();
    HYLO_CHECK(id >= 0 && id < (1 << 24), "{}: id {} of '{}' out of range", encoder_json, id, token);
    if (size_t(id) >= impl->bytes_of.size()) impl->bytes_of.resize(size_t(id) + 1);
    if (token == kEndOfText) {
      impl->end_of_text = int32_t(id);
      impl->bytes_of[size_t(id)] = token;
      continue;
    }
    HYLO_CHECK(gpt2_string_to_bytes(token, byte_of_codepoint, bytes),
               "{}: token '{}' is not in GPT-2's byte alphabet", encoder_json, token);
    impl->bytes_of[size_t(id)] = bytes;
    id_of[token] = int32_t(id);
  }
  HYLO_CHECK(impl->end_of_text == int32_t(impl->bytes_of.size()) - 1, "{}: '{}' must be the last id", encoder_json,
             kEndOfText);
  for (size_t id = 0; id < impl->bytes_of.size(); ++id)
    HYLO_CHECK(!impl->bytes_of[id].empty(), "{}: no token has id {}", encoder_json, id);
  for (int b = 0; b < 256; ++b) {
    const char byte = char(b);
    auto it = id_of.find(gpt2_token_text(std::string_view(&byte, 1)));
    HYLO_CHECK(it != id_of.end(), "{}: byte {} has no token", encoder_json, b);
    impl->id_of_byte[b] = it->second;
  }

  std::string merges = read_tokenizer_file(vocab_bpe);
  std::istringstream lines(merges);
  std::string line;
  size_t line_number = 0;
  uint32_t priority = 0;
  while (std::getline(lines, line)) {
    ++line_number;
    if (line.empty() || line.starts_with("#version")) continue;
    size_t space = line.find(' ');
    HYLO_CHECK(space != std::string::npos, "{}:{}: expected 'left right'", vocab_bpe, line_number);
    std::string left = line.substr(0, space), right = line.substr(space + 1);
    auto l = id_of.find(left), r = id_of.find(right), m = id_of.find(left + right);
    HYLO_CHECK(l != id_of.end() && r != id_of.end() && m != id_of.end(),
               "{}:{}: merge '{} {}' uses a token missing from {}", vocab_bpe, line_number, left, right, encoder_json);
    uint64_t key = (uint64_t(uint32_t(l->second)) << 32) | uint32_t(r->second);
    impl->merge_of.emplace(key, std::pair{priority++, m->second});
  }
  impl->index_ranks();
  impl->compile_pattern();
  return Tokenizer(std::move(impl));
}

namespace {

// encode and encode_ordinary: with `specials`, each "<|endoftext|>" in the text becomes its token;
// without, it is plain text like any other.
std::vector<int32_t> encode_text(const Tokenizer::Impl& impl, std::string_view text, bool specials) {
  check_utf8(text);
  PatternMatcher matcher(impl.pattern.get(), impl.jit);
  PieceCache cache;
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3);
  for (size_t start = 0;;) {
    const size_t special = specials ? text.find(kEndOfText, start) : std::string_view::npos;
    encode_plain(impl, text.substr(start, special - start), matcher, cache, ids);
    if (special == std::string_view::npos) break;
    ids.push_back(impl.end_of_text);
    start = special + kEndOfText.size();
  }
  return ids;
}

}  // namespace

std::vector<int32_t> Tokenizer::encode_ordinary(std::string_view text) const {
  return encode_text(*impl_, text, false);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const { return encode_text(*impl_, text, true); }

struct TokenEncoder::State {
  explicit State(const Tokenizer::Impl& impl) : matcher(impl.pattern.get(), impl.jit) {}
  PatternMatcher matcher;
  PieceCache cache;  // shared across this thread's documents: vocabulary repeats across them
};

TokenEncoder::TokenEncoder(const Tokenizer& tokenizer)
    : impl_(tokenizer.impl_), state_(std::make_unique<State>(*impl_)) {}

TokenEncoder::~TokenEncoder() = default;

size_t TokenEncoder::encode_ordinary(std::string_view text, std::vector<int32_t>& out) {
  const size_t bad = first_invalid_utf8(text);
  if (bad == std::string_view::npos) encode_valid(text, out);
  return bad;
}

void TokenEncoder::encode_valid(std::string_view text, std::vector<int32_t>& out) {
  encode_plain(*impl_, text, state_->matcher, state_->cache, out);
}

std::vector<std::vector<int32_t>> Tokenizer::encode_ordinary_batch(std::span<const std::string> documents,
                                                                   int threads) const {
  for (size_t d = 0; d < documents.size(); ++d) {
    size_t bad = first_invalid_utf8(documents[d]);
    HYLO_CHECK(bad == std::string_view::npos, "document {} is not valid UTF-8 (byte {})", d, bad);
  }
  if (threads <= 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
  threads = int(std::min<size_t>(size_t(threads), std::max<size_t>(1, documents.size())));
  std::vector<std::vector<int32_t>> result(documents.size());
  // Longest documents first, so no thread is left alone with a big book at the end.
  std::vector<size_t> order(documents.size());
  for (size_t d = 0; d < order.size(); ++d) order[d] = d;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return documents[a].size() > documents[b].size(); });
  std::atomic<size_t> next_document{0};
  std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
  auto worker = [&](int t) {
    try {
      TokenEncoder encoder(*this);
      std::vector<int32_t> ids;  // filled here, not in result[d]: neighbouring vectors share cache lines
      for (size_t k; (k = next_document.fetch_add(1)) < documents.size();) {
        const size_t d = order[k];
        ids.clear();
        encoder.encode_valid(documents[d], ids);
        result[d].assign(ids.begin(), ids.end());
      }
    } catch (...) {
      errors[size_t(t)] = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker, t);
  worker(0);
  for (auto& thread : pool) thread.join();
  for (auto& error : errors)
    if (error) std::rethrow_exception(error);
  return result;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  for (int32_t id : ids) text += token_bytes(id);
  return text;
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
  HYLO_CHECK(id >= 0 && size_t(id) < impl_->bytes_of.size(), "token id {} out of range [0, {})", id,
             impl_->bytes_of.size());
  return impl_->bytes_of[size_t(id)];
}

int Tokenizer::vocab_size() const { return int(impl_->bytes_of.size()); }
int32_t Tokenizer::end_of_text_id() const { return impl_->end_of_text; }

}  // namespace hylo::data
