#include "eval/python_text.h"

namespace hylo::pytext {

namespace {

// The code point at s[i] and its length in bytes. The texts are valid UTF-8 (JSON parsing and the
// text reader check it); a stray byte would count as one character of its own.
std::pair<char32_t, size_t> decode(std::string_view s, size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  const size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 1;
  if (n == 1 || i + n > s.size()) return {b, 1};
  char32_t c = b & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return {c, n};
}

// Bytes of the whitespace character that ends at s[end - 1], or 0.
size_t space_before(std::string_view s, size_t end) {
  for (size_t n = 1; n <= 3 && n <= end; ++n) {
    const auto b = static_cast<unsigned char>(s[end - n]);
    if ((b & 0xC0) == 0x80) continue;  // a continuation byte: the character starts further back
    const auto [c, len] = decode(s, end - n);
    return len == n && is_space(c) ? n : 0;
  }
  return 0;
}

}  // namespace

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string_view rstrip(std::string_view s) {
  size_t end = s.size();
  while (const size_t n = space_before(s, end)) end -= n;
  return s.substr(0, end);
}

std::string_view strip(std::string_view s) {
  size_t begin = 0;
  while (begin < s.size()) {
    const auto [c, n] = decode(s, begin);
    if (!is_space(c)) break;
    begin += n;
  }
  return rstrip(s.substr(begin));
}

int64_t length(std::string_view s) {
  int64_t n = 0;
  for (size_t i = 0; i < s.size(); i += decode(s, i).second) ++n;
  return n;
}

int64_t split_whitespace_count(std::string_view s) {
  int64_t pieces = 1;
  bool in_space = false;
  for (size_t i = 0; i < s.size();) {
    const auto [c, n] = decode(s, i);
    const bool space = is_space(c);
    if (space && !in_space) ++pieces;
    in_space = space;
    i += n;
  }
  return pieces;
}

std::string capitalize(std::string_view s) {
  std::string out(s);
  for (size_t i = 0; i < out.size(); ++i) {
    const char c = out[i];
    if (i == 0 && c >= 'a' && c <= 'z') out[i] = char(c - 'a' + 'A');
    if (i > 0 && c >= 'A' && c <= 'Z') out[i] = char(c - 'A' + 'a');
  }
  return out;
}

std::string replace(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  size_t at = 0;
  for (size_t hit; !from.empty() && (hit = s.find(from, at)) != std::string_view::npos; at = hit + from.size())
    out.append(s.substr(at, hit - at)).append(to);
  return out.append(s.substr(at));
}

}  // namespace hylo::pytext
