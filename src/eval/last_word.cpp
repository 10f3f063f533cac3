#include "eval/last_word.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/rng.h"

namespace hylo {

namespace {

constexpr int kMaxWordTokens = 8;

bool lower_letters(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= 'a' && c <= 'z'; });
}

// The manifest's rows for `split`, in file order: (source, name, tokens).
struct ManifestRow {
  std::string source, name;
  uint64_t tokens = 0;
};

std::vector<ManifestRow> read_manifest(const std::string& path, const std::string& split) {
  std::vector<ManifestRow> rows;
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);  // header: split source file tokens
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string row_split, tokens;
    ManifestRow row;
    if (!std::getline(fields, row_split, '\t') || !std::getline(fields, row.source, '\t') ||
        !std::getline(fields, row.name, '\t') || !std::getline(fields, tokens))
      return {};  // not a manifest we understand: treat as absent (so is a tokens field that is no number)
    if (row_split != split) continue;
    const auto [end, ec] = std::from_chars(tokens.data(), tokens.data() + tokens.size(), row.tokens);
    if (ec != std::errc() || end != tokens.data() + tokens.size()) return {};
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace

std::vector<ShardDocument> shard_documents(const data::ShardReader& shard) {
  std::vector<ShardDocument> docs;
  for (uint64_t i = 0; i < shard.size(); ++i) {
    if (shard.token(i) == uint32_t(data::kEndOfTextId)) {
      if (!docs.empty()) docs.back().end = i;
      docs.push_back({i + 1, shard.size(), "", ""});
    } else if (docs.empty()) {
      docs.push_back({0, shard.size(), "", ""});  // a shard that does not start with a separator
    }
  }
  const std::string manifest = shard.metadata_value("manifest"), split = shard.metadata_value("split");
  if (manifest.empty() || split.empty()) return docs;
  const std::string path = (std::filesystem::path(shard.path()).parent_path() / manifest).string();
  const std::vector<ManifestRow> rows = read_manifest(path, split);
  if (rows.size() != docs.size()) return docs;
  for (size_t d = 0; d < docs.size(); ++d)
    if (rows[d].tokens != docs[d].end - docs[d].begin) return docs;
  for (size_t d = 0; d < docs.size(); ++d) docs[d].source = rows[d].source, docs[d].name = rows[d].name;
  return docs;
}

bool is_last_word(const data::Tokenizer& tokenizer, std::span<const int32_t> word, int32_t next) {
  if (word.empty() || int(word.size()) > kMaxWordTokens) return false;
  const int vocab = tokenizer.vocab_size();
  for (int32_t id : word)
    if (id < 0 || id >= vocab || id == tokenizer.end_of_text_id()) return false;
  if (next < 0 || next >= vocab || next == tokenizer.end_of_text_id()) return false;
  const std::string& first = tokenizer.token_bytes(word[0]);
  if (first.size() < 2 || first[0] != ' ' || !lower_letters(std::string_view(first).substr(1))) return false;
  for (size_t i = 1; i < word.size(); ++i)
    if (!lower_letters(tokenizer.token_bytes(word[i]))) return false;
  const std::string& after = tokenizer.token_bytes(next);
  return !after.empty() && (after[0] == '.' || after[0] == '!' || after[0] == '?');
}

LastWordSource last_word_source(const data::ShardReader& shard, const std::string& source) {
  LastWordSource out;
  out.docs = shard_documents(shard);
  const bool labelled = std::any_of(out.docs.begin(), out.docs.end(), [&](const ShardDocument& d) { return d.source == source; });
  if (labelled) {
    std::erase_if(out.docs, [&](const ShardDocument& d) { return d.source != source; });
    out.documents = fmt::format("{} {} documents of {} (manifest.tsv)", out.docs.size(), source, shard.path());
  } else {
    out.documents =
        fmt::format("all {} documents of {} (no matching manifest with {} rows)", out.docs.size(), shard.path(), source);
  }
  out.tokens.resize(size_t(shard.size()));
  shard.copy_tokens(0, shard.size(), out.tokens.data());
  return out;
}

LastWordSource last_word_source(const std::vector<TextDocument>& texts, const data::Tokenizer& tokenizer) {
  LastWordSource out;
  std::vector<std::string> names;
  for (const TextDocument& doc : texts) {
    const std::vector<int32_t> ids = tokenizer.encode_ordinary(doc.text);
    const uint64_t begin = out.tokens.size();
    out.tokens.insert(out.tokens.end(), ids.begin(), ids.end());
    out.docs.push_back({begin, out.tokens.size(), "", doc.name});
    names.push_back(doc.name);
  }
  out.documents = fmt::format("{} held-out documents ({})", texts.size(), fmt::join(names, ", "));
  return out;
}

LastWordSet build_last_word_set(const LastWordSource& source, const data::Tokenizer& tokenizer,
                                const LastWordOptions& options) {
  const int L = options.seq_len;
  HYLO_CHECK(L >= 2, "lastword: seq_len {} is too short", L);
  const std::vector<int32_t>& tokens = source.tokens;
  const auto known = [&](uint64_t i) { return uint32_t(tokens[i]) < uint32_t(tokenizer.vocab_size()); };
  LastWordSet set;
  set.documents = source.documents;
  // Candidates: (word_begin, word_end) of every target word with L tokens of its document up to its end.
  std::vector<std::pair<uint64_t, uint64_t>> candidates;
  for (const ShardDocument& doc : source.docs) {
    for (uint64_t j = doc.begin + uint64_t(L); j < doc.end; ++j) {  // j: the token after the word
      if (!known(j)) continue;
      const std::string& next = tokenizer.token_bytes(tokens[j]);
      if (next.empty() || (next[0] != '.' && next[0] != '!' && next[0] != '?')) continue;
      // Walk back over letter-only tokens to the one with the leading space.
      uint64_t k = j;
      while (k > doc.begin && j - k < uint64_t(kMaxWordTokens)) {
        --k;
        if (!known(k)) break;
        if (!tokenizer.token_bytes(tokens[k]).starts_with(' ')) continue;
        if (is_last_word(tokenizer, std::span<const int32_t>(tokens).subspan(k, j - k), tokens[j]))
          candidates.push_back({k, j});
        break;
      }
    }
  }
  set.candidates = int64_t(candidates.size());
  // A seeded sample without replacement (partial Fisher-Yates), back in document order.
  Rng rng{options.seed, 0};
  const size_t n = std::min(candidates.size(), size_t(std::max(0, options.passages)));
  for (size_t i = 0; i < n; ++i) std::swap(candidates[i], candidates[i + rng.below(candidates.size() - i)]);
  candidates.resize(n);
  std::sort(candidates.begin(), candidates.end());
  for (auto [begin, end] : candidates) {
    LastWordPassage p;
    p.word_begin = begin;
    p.word_end = end;
    p.word_tokens = int(end - begin);
    p.word_first = L - p.word_tokens;
    p.ids.assign(tokens.begin() + int64_t(end) - L, tokens.begin() + int64_t(end));
    const auto word = p.ids.begin() + p.word_first;
    p.in_context = std::search(p.ids.begin(), word, word, p.ids.end()) != word;
    set.passages.push_back(std::move(p));
  }
  return set;
}

double LastWordResult::perplexity() const { return word_tokens ? std::exp(-logprob / word_tokens) : 0.0; }
double LastWordResult::in_context_perplexity() const {
  return in_context_tokens ? std::exp(-in_context_logprob / in_context_tokens) : 0.0;
}

LastWordResult tally_last_word(const LastWordSet& set, const std::vector<SpanScore>& scores, int seq_len) {
  HYLO_CHECK(set.passages.size() == scores.size(), "tally_last_word: {} passages, {} scores", set.passages.size(),
             scores.size());
  LastWordResult r;
  r.documents = set.documents;
  r.candidates = set.candidates;
  r.seq_len = seq_len;
  for (size_t i = 0; i < scores.size(); ++i) {
    const SpanScore& s = scores[i];
    ++r.n;
    r.exact += s.exact() ? 1 : 0;
    r.word_tokens += s.tokens;
    r.logprob += s.logprob;
    if (set.passages[i].in_context) {
      ++r.in_context_n;
      r.in_context_exact += s.exact() ? 1 : 0;
      r.in_context_tokens += s.tokens;
      r.in_context_logprob += s.logprob;
    }
  }
  return r;
}

LastWordResult evaluate_last_word(const Transformer& model, const Config& config, Device device,
                                  const data::Tokenizer& tokenizer, LastWordOptions options,
                                  const std::vector<TextDocument>& texts) {
  if (options.seq_len == 0) options.seq_len = config.train.seq_len;
  int vocab_valid = int(std::min<uint64_t>(uint64_t(tokenizer.vocab_size()), uint64_t(config.model.vocab_size)));
  LastWordSource source;
  if (texts.empty()) {
    const data::ShardReader val = first_val_shard(config.data);
    source = last_word_source(val, options.source);
    vocab_valid = int(std::min<uint64_t>(val.vocab_size(), uint64_t(config.model.vocab_size)));
  } else {
    source = last_word_source(texts, tokenizer);
  }
  const LastWordSet set = build_last_word_set(source, tokenizer, options);
  std::vector<ScoredSequence> sequences;
  for (const LastWordPassage& p : set.passages) sequences.push_back({p.ids, p.word_first, p.word_tokens});
  return tally_last_word(set, score_sequences(model, sequences, vocab_valid, device, options.batch), options.seq_len);
}

std::string LastWordResult::table() const {
  std::string out = fmt::format("lastword: {} of {} candidate passages, L {}, from {}\n", n, candidates, seq_len, documents);
  out += fmt::format("{:>12} {:>5} {:>9} {:>10} {:>12}\n", "subset", "n", "accuracy", "word_ppl", "tokens/word");
  out += fmt::format("{:>12} {:>5} {:>9.3f} {:>10.2f} {:>12.2f}\n", "all", n, accuracy(), perplexity(),
                     n ? double(word_tokens) / n : 0.0);
  out += fmt::format("{:>12} {:>5} {:>9.3f} {:>10.2f} {:>12.2f}\n", "in context", in_context_n, in_context_accuracy(),
                     in_context_perplexity(), in_context_n ? double(in_context_tokens) / in_context_n : 0.0);
  return out;
}

nlohmann::ordered_json LastWordResult::json() const {
  return {{"documents", documents},
          {"candidates", candidates},
          {"seq_len", seq_len},
          {"n", n},
          {"exact", exact},
          {"accuracy", accuracy()},
          {"perplexity", perplexity()},
          {"word_tokens", word_tokens},
          {"in_context",
           {{"n", in_context_n}, {"exact", in_context_exact}, {"accuracy", in_context_accuracy()},
            {"perplexity", in_context_perplexity()}}}};
}

}  // namespace hylo
