// The few Python string operations lm-evaluation-harness's task definitions are written in, on
// UTF-8 text, so that hylo builds the very strings (and counts) lm-eval builds from a document.
// Whitespace is Python's str.isspace() / re's \s for str patterns: U+0009-000D, U+001C-001F,
// U+0020, U+0085, U+00A0, U+1680, U+2000-200A, U+2028, U+2029, U+202F, U+205F, U+3000.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace hylo::pytext {

bool is_space(char32_t c);

// str.strip() / str.rstrip(): leading and/or trailing whitespace removed.
std::string_view strip(std::string_view s);
std::string_view rstrip(std::string_view s);

// len(s): code points, not bytes.
int64_t length(std::string_view s);

// len(re.split(r"\s+", s)): one more than the runs of whitespace, counting a leading or trailing
// run (each leaves an empty piece), so "" counts 1 and " a b\n" counts 4.
int64_t split_whitespace_count(std::string_view s);

// str.capitalize() for ASCII letters: the first character upper-cased, every later one lower-cased;
// other characters are left as they are (Python would also change non-ASCII letters).
std::string capitalize(std::string_view s);

// s.replace(from, to): every non-overlapping occurrence, left to right.
std::string replace(std::string_view s, std::string_view from, std::string_view to);

}  // namespace hylo::pytext
