#include "bench/bench_json.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <chrono>

#include "core/file.h"
#include "core/revision.h"
#include "core/json_text.h"

namespace hylo {

void write_bench_json(const std::string& path, const BenchJson& json) {
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::string text =
      fmt::format("{{\n  \"bench\": {},\n  \"date\": \"{:%Y-%m-%d}\",\n  \"commit\": {},\n  \"device\": {},\n",
                  json_string(json.bench), fmt::gmtime(now), json_string(git_revision()), json_string(json.device));
  if (!json.extra.empty()) text += "  " + json.extra + ",\n";
  text += "  \"settings\": " + json.settings + ",\n  \"rows\": [\n";
  for (size_t i = 0; i < json.rows.size(); ++i) text += "    " + json.rows[i] + (i + 1 < json.rows.size() ? ",\n" : "\n");
  text += "  ]\n}\n";
  write_file_atomic(path, text);
}

}  // namespace hylo
