#include "data/json_line.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <simdjson.h>

#include <vector>

#include "core/error.h"

namespace hylo::data {
namespace {

const char* type_name(simdjson::dom::element_type type) {
  using simdjson::dom::element_type;
  switch (type) {
    case element_type::ARRAY: return "an array";
    case element_type::OBJECT: return "an object";
    case element_type::STRING: return "a string";
    case element_type::BOOL: return "a boolean";
    case element_type::NULL_VALUE: return "null";
    default: return "a number";
  }
}

}  // namespace

struct JsonLineParser::Parser {
  simdjson::dom::parser dom;
};

JsonLineParser::JsonLineParser() : parser_(std::make_unique<Parser>()) {}
JsonLineParser::~JsonLineParser() = default;

std::string_view JsonLineParser::text(std::string_view line, const std::string& key) {
  // parse() copies the line into the parser's padded buffer (simdjson reads up to 64 bytes past
  // the end), reused from line to line.
  simdjson::dom::element root;
  if (const auto error = parser_->dom.parse(line.data(), line.size()).get(root)) {
    if (error == simdjson::UTF8_ERROR) HYLO_FAIL("not valid UTF-8; documents must be UTF-8");
    HYLO_FAIL("not valid JSON: {}", simdjson::error_message(error));
  }
  HYLO_CHECK(root.type() == simdjson::dom::element_type::OBJECT, "expected a JSON object, found {}",
             type_name(root.type()));
  const simdjson::dom::object object(root);
  simdjson::dom::element value;
  if (object[key].get(value) == simdjson::NO_SUCH_FIELD) {
    std::vector<std::string_view> keys;
    for (const auto field : object) {
      if (keys.size() == 8) break;
      keys.push_back(field.key);
    }
    HYLO_FAIL("no \"{}\" key (top-level keys: {}); name the text field with --text-key", key,
              keys.empty() ? "none" : fmt::format("{}", fmt::join(keys, ", ")));
  }
  HYLO_CHECK(value.type() == simdjson::dom::element_type::STRING, "\"{}\" holds {}, expected a string", key,
             type_name(value.type()));
  return std::string_view(value);
}

}  // namespace hylo::data
