// What every `hylo bench` prints and writes: a table on stdout, one line per measured setting as
// it is measured, and with --json the same rows in one layout for all benches:
//   {"bench": NAME, "date": UTC date, "commit": the build's git revision, "device": ...,
//    [extra fields,] "settings": {...}, "rows": [
//     {...},        <- one row per line
//   ]}
// A column is one field of a row: its JSON key, its table header (none: JSON only) and its
// decimals, the same in both (a JSON number is rounded to them, so the file keeps what the
// measurement resolves and no noise digits). Non-finite numbers are null in the JSON. The file is
// written to a temporary and renamed into place: an earlier result is never left half overwritten.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace hylo::bench {

struct Column {
  std::string key;     // the field of the row
  std::string header;  // in the table; empty: the column is in the JSON only
  int width = 0;       // in the table (at least the header's)
  int decimals = -1;   // of a number, in the table and the JSON; -1: as it is (integers, text)
  bool json = true;    // false: in the table only (a derived figure, such as a percentage)
  bool left = false;   // left-aligned in the table (names)
  bool rule = false;   // a '|' before it in the table
};

class Table {
 public:
  explicit Table(std::vector<Column> columns);

  void print_header() const;
  // Prints the row's line (flushed: a long bench shows its progress) and keeps its JSON fields.
  // A column missing from `row` prints "-" and is left out of its JSON.
  void add(const nlohmann::json& row);
  const std::vector<nlohmann::ordered_json>& rows() const { return rows_; }

  // "bench", "date", "commit", "device", `extra`'s fields, "settings", "rows".
  void write_json(const std::string& path, const std::string& bench, const std::string& device,
                  const nlohmann::ordered_json& settings,
                  const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;

 private:
  std::vector<Column> columns_;
  std::vector<nlohmann::ordered_json> rows_;
};

}  // namespace hylo::bench
