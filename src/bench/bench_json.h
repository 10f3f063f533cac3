// The --json file of every `hylo bench` command, one layout for all:
//   {"bench": NAME, "date": UTC date, "commit": the build's git revision, "device": ...,
//    [extra fields,] "settings": {...}, "rows": [
//     {...},        <- one row per line
//   ]}
// Rows and settings are JSON object texts the bench formats itself (fixed decimals per column).
// Written to a temporary file and renamed into place, so an earlier result is never left half
// overwritten.
#pragma once
#include <string>
#include <vector>

namespace hylo {

struct BenchJson {
  std::string bench, device;
  std::string extra;     // more top-level fields, `"key": value, ...` text, or empty
  std::string settings;  // a JSON object's text
  std::vector<std::string> rows;
};

void write_bench_json(const std::string& path, const BenchJson& json);

}  // namespace hylo
