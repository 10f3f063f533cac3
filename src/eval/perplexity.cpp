#include "eval/perplexity.h"

#include <cmath>
#include <fstream>
#include <numbers>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file.h"
#include "eval/loglikelihood.h"
#include "eval/python_text.h"

namespace hylo {

std::vector<TextDocument> read_text_documents(const std::vector<std::string>& paths) {
  std::vector<TextDocument> docs;
  for (const std::string& path : paths) {
    if (!path.ends_with(".jsonl")) {
      std::optional<std::string> text = read_file(path);
      HYLO_CHECK(text, "{}: cannot open the text file", path);
      const size_t bad = data::first_invalid_utf8(*text);
      HYLO_CHECK(bad == std::string_view::npos, "{}: not UTF-8 text (byte {})", path, bad);
      HYLO_CHECK(!text->empty(), "{}: empty text file", path);
      docs.push_back({path, std::move(*text)});
      continue;
    }
    std::ifstream in(path, std::ios::binary);
    HYLO_CHECK(in, "{}: cannot open the text file", path);
    std::string line;
    const size_t before = docs.size();
    for (int64_t number = 1; std::getline(in, line); ++number) {
      if (pytext::strip(line).empty()) continue;
      nlohmann::json doc;
      try {
        doc = nlohmann::json::parse(line);
      } catch (const nlohmann::json::parse_error& e) {
        const std::string why = e.what();
        HYLO_FAIL("{}:{}: not a JSON line ({})", path, number, why.substr(why.find(']') + 2));
      }
      const auto text = doc.is_object() ? doc.find("text") : doc.end();
      HYLO_CHECK(doc.is_object() && text != doc.end(), "{}:{}: missing key 'text'", path, number);
      HYLO_CHECK(text->is_string(), "{}:{}: 'text' must be a string, not {}", path, number, text->type_name());
      HYLO_CHECK(!text->get_ref<const std::string&>().empty(), "{}:{}: empty 'text'", path, number);
      docs.push_back({fmt::format("{}:{}", path, number), text->get<std::string>()});
    }
    HYLO_CHECK(docs.size() > before, "{}: no documents in the text file", path);
  }
  return docs;
}

DocumentScore PerplexityResult::total() const {
  DocumentScore t;
  for (const DocumentScore& d : documents) {
    t.logprob += d.logprob;
    t.tokens += d.tokens;
    t.words += d.words;
    t.bytes += d.bytes;
    t.windows += d.windows;
  }
  return t;
}

double PerplexityResult::word_perplexity() const {
  const DocumentScore t = total();
  return std::exp(-t.logprob / double(t.words));
}
double PerplexityResult::byte_perplexity() const {
  const DocumentScore t = total();
  return std::exp(-t.logprob / double(t.bytes));
}
double PerplexityResult::bits_per_byte() const {
  const DocumentScore t = total();
  return -t.logprob / double(t.bytes) / std::numbers::ln2;
}
double PerplexityResult::token_perplexity() const {
  const DocumentScore t = total();
  return std::exp(-t.logprob / double(t.tokens));
}

std::string PerplexityResult::table() const {
  const DocumentScore t = total();
  std::string out = fmt::format("ppl: {} documents, {} tokens in {} windows of at most {}\n", documents.size(), t.tokens,
                                t.windows, max_length);
  out += fmt::format("{:<40} {:>9} {:>10} {:>9} {:>10} {:>10}\n", "document", "tokens", "bytes", "bits/byte",
                     "token_ppl", "word_ppl");
  auto row = [&](const std::string& name, const DocumentScore& d) {
    out += fmt::format("{:<40} {:>9} {:>10} {:>9.4f} {:>10.2f} {:>10.2f}\n", name, d.tokens, d.bytes,
                       -d.logprob / double(d.bytes) / std::numbers::ln2, std::exp(-d.logprob / double(d.tokens)),
                       std::exp(-d.logprob / double(d.words)));
  };
  if (documents.size() <= 20)
    for (size_t i = 0; i < documents.size(); ++i) row(names[i], documents[i]);
  if (documents.size() != 1) row("all", t);
  return out;
}

PerplexityResult evaluate_perplexity(const Transformer& model, const data::Tokenizer& tokenizer,
                                     const std::vector<TextDocument>& documents, const PerplexityOptions& options,
                                     Device device) {
  HYLO_CHECK(options.max_length >= 1, "ppl: max_length {} must be at least 1", options.max_length);
  PerplexityResult r;
  r.max_length = options.max_length;
  std::vector<TokenRequest> windows;
  std::vector<size_t> owner;  // windows[i] belongs to documents[owner[i]]
  for (size_t d = 0; d < documents.size(); ++d) {
    const std::string& text = documents[d].text;
    const std::vector<int32_t> tokens = tokenizer.encode(text);
    std::vector<TokenRequest> w =
        rolling_windows(tokens, tokenizer.end_of_text_id(), options.max_length, options.context_len);
    r.names.push_back(documents[d].name);
    r.documents.push_back({0.0, int64_t(tokens.size()), pytext::split_whitespace_count(text), int64_t(text.size()),
                           int(w.size())});
    owner.insert(owner.end(), w.size(), d);
    windows.insert(windows.end(), std::make_move_iterator(w.begin()), std::make_move_iterator(w.end()));
  }
  const int vocab_valid = std::min(tokenizer.vocab_size(), int(model.config().vocab_size));
  const std::vector<SpanScore> scores =
      score_requests(model, windows, options.max_length, vocab_valid, device, options.batch);
  for (size_t i = 0; i < scores.size(); ++i) r.documents[owner[i]].logprob += scores[i].logprob;
  return r;
}

}  // namespace hylo
