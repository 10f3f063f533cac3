// The text of one jsonl document: the string under a top-level key of the one JSON object on a
// line. simdjson's DOM parser checks the whole line (structure, numbers, UTF-8) at gigabytes a
// second; nlohmann's SAX lexer, which built every string a character at a time, took ~17% of a
// prepare worker's time (experiments/results/data/SUMMARY.md).
#pragma once
#include <memory>
#include <string>
#include <string_view>

namespace hylo::data {

class JsonLineParser {
 public:
  JsonLineParser();
  ~JsonLineParser();
  JsonLineParser(const JsonLineParser&) = delete;
  JsonLineParser& operator=(const JsonLineParser&) = delete;

  // The string under `key` of the object on `line`, valid until the next call. Throws a message
  // without a location (the caller adds file and line) when the line is not valid JSON or not one
  // object, lacks the key, or holds something other than a string there.
  std::string_view text(std::string_view line, const std::string& key);

 private:
  struct Parser;  // simdjson's, kept out of this header (1.2 MB of it)
  std::unique_ptr<Parser> parser_;
};

}  // namespace hylo::data
