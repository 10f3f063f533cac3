#include "eval/task_files.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "eval/python_text.h"

namespace hylo {

namespace {

using nlohmann::json;

// One document of a file: where it is, for the errors.
struct Line {
  const std::string& path;
  int64_t number = 0;
  const json& doc;

  const json& field(const char* key) const {
    const auto it = doc.find(key);
    HYLO_CHECK(it != doc.end(), "{}:{}: missing key '{}'", path, number, key);
    return *it;
  }
  std::string text(const json& value, const char* key) const {
    HYLO_CHECK(value.is_string(), "{}:{}: '{}' must be a string, not {}", path, number, key, value.type_name());
    return value.get<std::string>();
  }
  std::string text(const char* key) const { return text(field(key), key); }
  std::vector<std::string> texts(const json& value, const char* key) const {
    HYLO_CHECK(value.is_array() && !value.empty(), "{}:{}: '{}' must be a non-empty list of strings", path, number, key);
    std::vector<std::string> out;
    for (const json& v : value) out.push_back(text(v, key));
    return out;
  }
  // An index into n choices given as a number or a numeric string, minus `base`.
  int index(const json& value, const char* key, int n, int base = 0) const {
    std::optional<int64_t> i;
    if (value.is_number_integer()) i = value.get<int64_t>();
    if (value.is_string()) {
      const std::string s = value.get<std::string>();
      int64_t v = 0;
      const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
      if (ec == std::errc() && end == s.data() + s.size() && !s.empty()) i = v;
    }
    HYLO_CHECK(i && *i - base >= 0 && *i - base < n, "{}:{}: '{}' is {}, not a choice ({} to {})", path, number, key,
               value.dump(), base, base + n - 1);
    return int(*i - base);
  }
};

// A multiple-choice document whose choices all follow one context.
TaskDoc choice_doc(const std::string& context, const std::vector<std::string>& choices, int gold) {
  TaskDoc d;
  for (const std::string& c : choices) {
    d.requests.push_back({context, " " + c});
    d.choice_chars.push_back(pytext::length(c));
  }
  d.gold = gold;
  return d;
}

TaskDoc lambada_doc(const Line& line) {
  const std::string text = line.text("text");
  // text.split(' ')[:-1] joined by ' ', and ' ' + text.split(' ')[-1]
  const size_t space = text.rfind(' ');
  const std::string context = space == std::string::npos ? "" : text.substr(0, space);
  const std::string word = space == std::string::npos ? text : text.substr(space + 1);
  TaskDoc d;
  d.requests.push_back({context, " " + word});
  return d;
}

// utils.preprocess of lm-eval's hellaswag task.
std::string hellaswag_preprocess(std::string_view raw) {
  const std::string text = pytext::replace(pytext::strip(raw), " [title]", ". ");
  std::string out;  // re.sub("\\[.*?\\]", "", text): '.' matches anything but a newline
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '[') {
      const size_t close = text.find(']', i + 1);
      if (close != std::string::npos && text.find('\n', i + 1) > close) {
        i = close;
        continue;
      }
    }
    out += text[i];
  }
  return pytext::replace(out, "  ", " ");
}

TaskDoc hellaswag_doc(const Line& line) {
  const std::string ctx = line.doc.contains("ctx_a")
                              ? line.text("ctx_a") + " " + pytext::capitalize(line.text("ctx_b"))
                              : line.text("ctx");
  const std::string query = hellaswag_preprocess(line.text("activity_label") + ": " + ctx);
  std::vector<std::string> endings = line.texts(line.field("endings"), "endings");
  for (std::string& e : endings) e = hellaswag_preprocess(e);
  return choice_doc(query, endings, line.index(line.field("label"), "label", int(endings.size())));
}

TaskDoc piqa_doc(const Line& line, std::optional<int> label) {
  const int gold = line.doc.contains("label") || !label ? line.index(line.field("label"), "label", 2) : *label;
  return choice_doc("Question: " + line.text("goal") + "\nAnswer:", {line.text("sol1"), line.text("sol2")}, gold);
}

TaskDoc arc_doc(const Line& line) {
  const json& question = line.field("question");
  std::string stem;
  std::vector<std::string> texts, labels;
  if (question.is_object()) {  // AI2's release: {"question": {"stem", "choices": [{"text", "label"}]}}
    const Line inner{line.path, line.number, question};
    stem = inner.text("stem");
    const json& choices = inner.field("choices");
    HYLO_CHECK(choices.is_array() && !choices.empty(), "{}:{}: 'choices' must be a non-empty list", line.path,
               line.number);
    for (const json& c : choices) {
      HYLO_CHECK(c.is_object(), "{}:{}: each of 'choices' must be an object with text and label", line.path,
                 line.number);
      const Line choice{line.path, line.number, c};
      texts.push_back(choice.text("text"));
      labels.push_back(choice.text("label"));
    }
  } else {  // the Hugging Face dataset's: {"question", "choices": {"text": [...], "label": [...]}}
    stem = line.text(question, "question");
    const json& choices = line.field("choices");
    HYLO_CHECK(choices.is_object(), "{}:{}: 'choices' must be an object with text and label lists", line.path,
               line.number);
    const Line inner{line.path, line.number, choices};
    texts = inner.texts(inner.field("text"), "text");
    labels = inner.texts(inner.field("label"), "label");
    HYLO_CHECK(texts.size() == labels.size(), "{}:{}: {} choice texts but {} labels", line.path, line.number,
               texts.size(), labels.size());
  }
  const std::string key = line.text("answerKey");
  const auto it = std::find(labels.begin(), labels.end(), key);
  HYLO_CHECK(it != labels.end(), "{}:{}: answerKey '{}' is none of the choice labels", line.path, line.number, key);
  return choice_doc("Question: " + stem + "\nAnswer:", texts, int(it - labels.begin()));
}

TaskDoc winogrande_doc(const Line& line) {
  const std::string sentence = line.text("sentence");
  const size_t blank = sentence.find('_');
  HYLO_CHECK(blank != std::string::npos, "{}:{}: 'sentence' has no '_' to fill", line.path, line.number);
  const std::string rest = fmt::format(" {}", pytext::strip(std::string_view(sentence).substr(blank + 1)));
  TaskDoc d;
  for (const char* key : {"option1", "option2"}) {
    const std::string context = sentence.substr(0, blank) + line.text(key);
    d.requests.push_back({context, rest});
    d.choice_chars.push_back(pytext::length(context));
  }
  d.gold = line.index(line.field("answer"), "answer", 2, /*base=*/1);
  return d;
}

struct Format {
  const char* name;
  const char* format;
  TaskOutput output;
  bool acc_norm;
};

constexpr Format kFormats[] = {
    {"lambada", "lambada", TaskOutput::loglikelihood, false},
    {"lambada_openai", "lambada", TaskOutput::loglikelihood, false},
    {"lambada_standard", "lambada", TaskOutput::loglikelihood, false},
    {"hellaswag", "hellaswag", TaskOutput::multiple_choice, true},
    {"piqa", "piqa", TaskOutput::multiple_choice, true},
    {"arc_easy", "arc", TaskOutput::multiple_choice, true},
    {"arc_challenge", "arc", TaskOutput::multiple_choice, true},
    {"winogrande", "winogrande", TaskOutput::multiple_choice, false},
};

// PIQA's separate labels: valid.jsonl -> valid-labels.lst beside it, when that file exists.
std::vector<int> piqa_labels(const std::string& path) {
  const std::filesystem::path p(path);
  const std::string labels = (p.parent_path() / (p.stem().string() + "-labels.lst")).string();
  std::vector<int> out;
  std::ifstream in(labels);
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    const std::string_view v = pytext::strip(line);
    if (v.empty()) continue;
    HYLO_CHECK(v == "0" || v == "1", "{}:{}: a label must be 0 or 1, not '{}'", labels, n, v);
    out.push_back(v == "1");
  }
  return out;
}

}  // namespace

const std::vector<std::string>& standard_task_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const Format& f : kFormats) n.push_back(f.name);
    return n;
  }();
  return names;
}

bool is_standard_task(const std::string& name) {
  const std::vector<std::string>& names = standard_task_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

TaskData read_task(const std::string& name, const std::string& path, int64_t limit) {
  const auto format = std::find_if(std::begin(kFormats), std::end(kFormats), [&](const Format& f) { return name == f.name; });
  HYLO_CHECK(format != std::end(kFormats), "eval: '{}' is no standard task", name);
  TaskData task{name, path, format->format, format->output, format->acc_norm, 0, {}};
  std::ifstream in(path, std::ios::binary);
  HYLO_CHECK(in, "{}: cannot open the {} file", path, name);
  const std::vector<int> labels = task.format == "piqa" ? piqa_labels(path) : std::vector<int>{};
  std::string text;
  for (int64_t number = 1; std::getline(in, text); ++number) {
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (pytext::strip(text).empty()) continue;
    json doc;
    try {
      doc = json::parse(text);
    } catch (const json::parse_error& e) {
      const std::string why = e.what();
      HYLO_FAIL("{}:{}: not a JSON line ({})", path, number, why.substr(why.find(']') + 2));
    }
    HYLO_CHECK(doc.is_object(), "{}:{}: expected a JSON object, got {}", path, number, doc.type_name());
    const Line line{path, number, doc};
    const int64_t d = task.original++;
    std::optional<int> label;
    if (d < int64_t(labels.size())) label = labels[size_t(d)];
    TaskDoc parsed = task.format == "lambada"     ? lambada_doc(line)
                     : task.format == "hellaswag" ? hellaswag_doc(line)
                     : task.format == "piqa"      ? piqa_doc(line, label)
                     : task.format == "arc"       ? arc_doc(line)
                                                  : winogrande_doc(line);
    if (limit <= 0 || d < limit) task.docs.push_back(std::move(parsed));
  }
  HYLO_CHECK(task.original > 0, "{}: no documents in the {} file", path, name);
  HYLO_CHECK(labels.empty() || int64_t(labels.size()) == task.original, "{}: {} labels for {} questions", path,
             labels.size(), task.original);
  return task;
}

}  // namespace hylo
