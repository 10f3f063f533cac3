#include "bench/bench_table.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/file.h"
#include "core/revision.h"

namespace hylo::bench {

namespace {

using nlohmann::json;
using nlohmann::ordered_json;

// `value` as the JSON keeps it: numbers rounded to `decimals` (integers when 0), element by
// element in an array.
ordered_json rounded(const json& value, int decimals) {
  if (value.is_array()) {
    ordered_json out = ordered_json::array();
    for (const json& v : value) out.push_back(rounded(v, decimals));
    return out;
  }
  if (!value.is_number_float() || decimals < 0) return ordered_json(value);
  const double x = value.get<double>();
  if (!std::isfinite(x)) return nullptr;
  if (decimals == 0) return std::llround(x);
  const double scale = std::pow(10.0, decimals);
  return std::round(x * scale) / scale;
}

std::string cell(const json& value, const Column& c, int width) {
  std::string text;
  if (value.is_null()) text = "-";
  else if (value.is_string()) text = value.get<std::string>();
  else if (value.is_number_float() && c.decimals >= 0) text = fmt::format("{:.{}f}", value.get<double>(), c.decimals);
  else text = value.dump();
  return c.left ? fmt::format("{:<{}}", text, width) : fmt::format("{:>{}}", text, width);
}

}  // namespace

Table::Table(std::vector<Column> columns) : columns_(std::move(columns)) {
  for (Column& c : columns_) c.width = std::max<int>(c.width, int(c.header.size()));
}

void Table::print_header() const {
  std::string line;
  for (const Column& c : columns_) {
    if (c.header.empty()) continue;
    if (!line.empty()) line += c.rule ? " | " : " ";
    line += c.left ? fmt::format("{:<{}}", c.header, c.width) : fmt::format("{:>{}}", c.header, c.width);
  }
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

void Table::add(const json& row) {
  HYLO_CHECK(row.is_object(), "bench table: a row is a JSON object, got {}", row.dump());
  std::string line;
  ordered_json kept = ordered_json::object();
  for (const Column& c : columns_) {
    const auto it = row.find(c.key);
    const json value = it == row.end() ? json() : *it;
    if (c.json && it != row.end()) kept[c.key] = rounded(value, c.decimals);
    if (c.header.empty()) continue;
    if (!line.empty()) line += c.rule ? " | " : " ";
    line += cell(value, c, c.width);
  }
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
  rows_.push_back(std::move(kept));
}

void Table::write_json(const std::string& path, const std::string& bench, const std::string& device,
                       const ordered_json& settings, const ordered_json& extra) const {
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  ordered_json head = ordered_json::object();
  head["bench"] = bench;
  head["date"] = fmt::format("{:%Y-%m-%d}", fmt::gmtime(now));
  head["commit"] = git_revision();
  head["device"] = device;
  for (const auto& [key, value] : extra.items()) head[key] = value;
  head["settings"] = settings;
  // One field per line and one row per line: the file diffs well and reads as the table does.
  std::string text = "{\n";
  for (const auto& [key, value] : head.items()) text += fmt::format("  {}: {},\n", json(key).dump(), value.dump());
  text += "  \"rows\": [\n";
  for (size_t i = 0; i < rows_.size(); ++i) text += "    " + rows_[i].dump() + (i + 1 < rows_.size() ? ",\n" : "\n");
  text += "  ]\n}\n";
  write_file_atomic(path, text);
}

}  // namespace hylo::bench
