// GPT-2 byte-level BPE (r50k_base), reproducing tiktoken's ids exactly (SPEC §4).
//
// Encoding = split the text with the GPT-2 pre-tokenizer regex (PCRE2), then byte-pair merge each
// pre-token. Two ways of loading the same tokenizer:
//   - from_tiktoken: a `.tiktoken` rank file (`<base64 bytes> <rank>` per line); merges are found
//     by looking up the rank of the concatenated bytes, as tiktoken does. This is the one hylo uses.
//   - from_gpt2_files: OpenAI's original encoder.json + vocab.bpe (merge list over the GPT-2
//     byte<->unicode mapping), encoded with the original merge-list algorithm. It exists so a test
//     can check the two routes agree id for id; it is slower and nothing else should use it.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hylo::data {

inline constexpr std::string_view kEndOfText = "<|endoftext|>";
inline constexpr int32_t kEndOfTextId = 50256;
inline constexpr int kR50kTokens = kEndOfTextId + 1;  // r50k_base's ids; a model's vocabulary pads above

class Tokenizer {
 public:
  static Tokenizer from_tiktoken(const std::string& rank_file);
  static Tokenizer from_gpt2_files(const std::string& encoder_json, const std::string& vocab_bpe);

  // `<|endoftext|>` in the text becomes id 50256 (tiktoken's allowed_special="all").
  std::vector<int32_t> encode(std::string_view text) const;
  // The special token's spelling is encoded as plain text (tiktoken's encode_ordinary); used for
  // corpus documents so that text can never inject a document boundary.
  std::vector<int32_t> encode_ordinary(std::string_view text) const;
  // encode_ordinary over many documents on `threads` threads (0 = hardware concurrency), each
  // with its own pre-token cache. The result does not depend on the thread count.
  std::vector<std::vector<int32_t>> encode_ordinary_batch(std::span<const std::string> documents,
                                                          int threads = 0) const;

  // Concatenated token bytes; may be invalid UTF-8 if the ids split a character.
  std::string decode(std::span<const int32_t> ids) const;
  const std::string& token_bytes(int32_t id) const;

  int vocab_size() const;  // ordinary tokens + special tokens (kR50kTokens for r50k_base)
  int32_t end_of_text_id() const;  // 50256 for r50k_base

  struct Impl;

 private:
  friend class TokenEncoder;
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;  // immutable after loading: copies and threads share it
};

// One thread's encoding state (PCRE2 match data and JIT stack, a memo of pre-tokens), reused across
// documents: what makes many small documents as fast as one big one. Not shareable between threads.
class TokenEncoder {
 public:
  explicit TokenEncoder(const Tokenizer& tokenizer);
  ~TokenEncoder();
  TokenEncoder(const TokenEncoder&) = delete;
  TokenEncoder& operator=(const TokenEncoder&) = delete;
  // Tokenizer::encode_ordinary(text), appended to `out`. Returns npos, or (when `text` is not
  // valid UTF-8, and then nothing is appended) the offset of its first invalid byte.
  size_t encode_ordinary(std::string_view text, std::vector<int32_t>& out);

 private:
  friend class Tokenizer;
  void encode_valid(std::string_view text, std::vector<int32_t>& out);  // text known to be UTF-8
  struct State;
  std::shared_ptr<const Tokenizer::Impl> impl_;
  std::unique_ptr<State> state_;
};

// GPT-2's bytes_to_unicode, the alphabet encoder.json and Hugging Face's vocab.json spell tokens in:
// '!'..'~', '¡'..'¬' and '®'..'ÿ' stand for themselves, the other 68 bytes, in byte order, take
// the code points from U+0100 on (so ' ' is 'Ġ'). Indexed by byte.
const std::array<uint32_t, 256>& gpt2_byte_codepoints();
// `bytes` over that mapping, as UTF-8 (each byte becomes one or two UTF-8 bytes).
std::string gpt2_token_text(std::string_view bytes);

// Byte offset of the first invalid UTF-8 sequence (overlong forms, surrogates and code points
// above U+10FFFF are invalid too), or npos if `text` is valid.
size_t first_invalid_utf8(std::string_view text);

}  // namespace hylo::data
