#include "checkpoint/hf_tokenizer_files.h"

#include <nlohmann/json.hpp>

#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"

namespace hylo {

std::vector<std::string> bpe_merges(const data::Tokenizer& tokenizer) {
  const int32_t ordinary = tokenizer.end_of_text_id();  // the ranked tokens are the ids below it
  std::unordered_map<std::string, int32_t> rank_of;
  for (int32_t id = 0; id < ordinary; ++id) rank_of.emplace(tokenizer.token_bytes(id), id);
  std::vector<std::string> merges;
  for (int32_t rank = 0; rank < ordinary; ++rank) {
    const std::string& token = tokenizer.token_bytes(rank);
    if (token.size() < 2) continue;
    std::vector<std::string> parts;
    for (char c : token) parts.emplace_back(1, c);
    // tiktoken's merge loop on the token alone, with the ranks below its own.
    while (parts.size() > 2) {
      size_t best = parts.size();
      int32_t best_rank = std::numeric_limits<int32_t>::max();
      for (size_t i = 0; i + 1 < parts.size(); ++i) {
        auto it = rank_of.find(parts[i] + parts[i + 1]);
        if (it != rank_of.end() && it->second < rank && it->second < best_rank) best = i, best_rank = it->second;
      }
      if (best == parts.size()) break;
      parts[best] += parts[best + 1];
      parts.erase(parts.begin() + std::ptrdiff_t(best) + 1);
    }
    HYLO_CHECK(parts.size() == 2 && rank_of.count(parts[0]) && rank_of.count(parts[1]),
               "tokenizer: token {} ({} bytes) is not the merge of two lower-ranked tokens", rank, token.size());
    merges.push_back(data::gpt2_token_text(parts[0]) + " " + data::gpt2_token_text(parts[1]));
  }
  return merges;
}

HfTokenizerFiles hf_tokenizer_files(const data::Tokenizer& tokenizer, int model_max_length) {
  const int32_t eot = tokenizer.end_of_text_id();
  const std::string eot_text(data::kEndOfText);
  // vocab.json, token text -> id in id order, written a pair at a time: an ordered_json finds every
  // key by a linear search, so its 50,257 insertions took ~2 s of an export (14 s under ASan).
  std::unordered_set<std::string> spelled;
  std::string vocab = "{";
  auto add = [&](const std::string& text, int32_t id) {
    HYLO_CHECK(spelled.insert(text).second, "tokenizer: ids {} and an earlier one spell the same token {}", id,
               nlohmann::json(text).dump());
    if (id > 0) vocab += ',';
    vocab += nlohmann::json(text).dump() + ':' + std::to_string(id);
  };
  for (int32_t id = 0; id < eot; ++id) add(data::gpt2_token_text(tokenizer.token_bytes(id)), id);
  add(eot_text, eot);
  vocab += '}';

  std::string merges = "#version: 0.2\n";
  for (const std::string& m : bpe_merges(tokenizer)) merges += m + "\n";

  // <|endoftext|> stands for every special role, as in GPT-2; nothing is added around the text,
  // so that AutoTokenizer's ids are tiktoken's.
  const nlohmann::ordered_json special = {
      {"content", eot_text}, {"lstrip", false}, {"normalized", false}, {"rstrip", false},
      {"single_word", false}, {"special", true}};
  const nlohmann::ordered_json config = {
      {"tokenizer_class", "GPT2Tokenizer"},
      {"model_max_length", model_max_length},
      {"bos_token", eot_text},
      {"eos_token", eot_text},
      {"unk_token", eot_text},
      {"pad_token", eot_text},
      {"add_prefix_space", false},
      {"add_bos_token", false},
      {"add_eos_token", false},
      {"clean_up_tokenization_spaces", false},
      {"errors", "replace"},
      {"added_tokens_decoder", {{std::to_string(eot), special}}}};
  const nlohmann::ordered_json special_map = {
      {"bos_token", eot_text}, {"eos_token", eot_text}, {"unk_token", eot_text}, {"pad_token", eot_text}};
  return {vocab, merges, config.dump(2) + "\n", special_map.dump(2) + "\n"};
}

}  // namespace hylo
