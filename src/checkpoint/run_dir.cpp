#include "checkpoint/run_dir.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "core/error.h"
#include "core/file.h"

namespace fs = std::filesystem;

namespace hylo {
namespace {

std::FILE* open_append(const fs::path& path) {
  std::FILE* f = std::fopen(path.c_str(), "a");
  HYLO_CHECK(f, "{}: cannot open for appending: {}", path.string(), std::strerror(errno));
  return f;
}

void write_line(std::FILE* f, std::string_view line, const std::string& what) {
  bool ok = std::fwrite(line.data(), 1, line.size(), f) == line.size() && std::fputc('\n', f) != EOF &&
            std::fflush(f) == 0;
  HYLO_CHECK(ok, "{}: write failed: {}", what, std::strerror(errno));
}

// Whether a line of metrics.jsonl stays when the run resumes from `step`: rows of later steps go,
// and so does a line that is not JSON (torn by a kill); rows without an integer step stay.
bool kept_on_resume(const std::string& line, int64_t step) {
  const nlohmann::json row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (row.is_discarded()) return false;
  if (!row.is_object() || !row.contains("step") || !row["step"].is_number_integer()) return true;
  return row["step"].get<int64_t>() <= step;
}

}  // namespace

bool is_metrics_key(const std::string& key) {
  if (std::find(kMetricsKeys.begin(), kMetricsKeys.end(), key) != kMetricsKeys.end()) return true;
  const size_t dot = key.find('.', 4);
  if (!key.starts_with("moe.") || dot == std::string::npos || dot == 4) return false;
  const std::string layer = key.substr(4, dot - 4), suffix = key.substr(dot + 1);
  return std::all_of(layer.begin(), layer.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
         std::find(kMoeMetricsSuffixes.begin(), kMoeMetricsSuffixes.end(), suffix) != kMoeMetricsSuffixes.end();
}

// What a run left in `root`: "12 metrics rows, checkpoints up to step_20.h5", or "" when nothing.
static std::string run_history(const fs::path& root) {
  std::vector<std::string> parts;
  if (std::optional<std::string> rows = read_file(root / "metrics.jsonl"); rows && !rows->empty())
    parts.push_back(fmt::format("{} metrics rows", std::count(rows->begin(), rows->end(), '\n')));
  int64_t newest = -1;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root / "checkpoints", ec))
    if (auto step = checkpoint_step(entry.path().string())) newest = std::max(newest, *step);
  if (newest >= 0) parts.push_back(fmt::format("checkpoints up to step_{}.h5", newest));
  return parts.empty() ? "" : parts.size() == 1 ? parts[0] : parts[0] + ", " + parts[1];
}

void prepare_run_dir(const std::string& dir, const std::string& resolved_config_yaml, RunDirMode mode) {
  const fs::path root(dir), config = root / "config.yaml";
  std::error_code ec;
  HYLO_CHECK(!fs::exists(root, ec) || fs::is_directory(root, ec), "{}: exists and is not a directory", dir);

  std::optional<std::string> old = read_file(config);
  if (old && *old != resolved_config_yaml && mode == RunDirMode::fresh)
    HYLO_FAIL("{} already holds a different config (use --resume auto or --overwrite)", dir);
  if (mode == RunDirMode::fresh) {
    const std::string history = run_history(root);
    HYLO_CHECK(history.empty(), "{} already holds a run ({}): use --resume auto to continue it or --overwrite to start "
               "over", dir, history);
  }
  if (mode == RunDirMode::overwrite) {
    std::vector<fs::path> doomed = {root / "checkpoints", root / "metrics.jsonl", root / "log.txt"};
    if (fs::is_directory(root, ec))
      for (const fs::directory_entry& e : fs::directory_iterator(root, ec))
        if (e.path().filename().string().starts_with("events.out.tfevents.")) doomed.push_back(e.path());
    for (const fs::path& path : doomed) {
      fs::remove_all(path, ec);
      HYLO_CHECK(!ec, "{}: cannot remove: {}", path.string(), ec.message());
    }
  } else if (old && *old != resolved_config_yaml) {
    // Resuming with a changed config (e.g. more steps): keep the old one so nothing is lost.
    fs::path kept;
    for (int n = 1; fs::exists(kept = root / fmt::format("config.{}.yaml", n), ec); ++n) {
    }
    write_file_atomic(kept.string(), *old);
  }
  fs::create_directories(root / "checkpoints", ec);
  HYLO_CHECK(!ec, "{}: cannot create directory: {}", (root / "checkpoints").string(), ec.message());
  if (!old || *old != resolved_config_yaml) write_file_atomic(config.string(), resolved_config_yaml);
}

// ---------------------------------------------------------------------------------------------

MetricsLog::MetricsLog(const std::string& dir) : dir_(dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  HYLO_CHECK(!ec, "{}: cannot create directory: {}", dir, ec.message());
  metrics_ = open_append(fs::path(dir) / "metrics.jsonl");
  log_ = open_append(fs::path(dir) / "log.txt");
}

MetricsLog::~MetricsLog() {
  if (metrics_) std::fclose(metrics_);
  if (log_) std::fclose(log_);
}

void MetricsLog::write(const nlohmann::ordered_json& row) {
  write_line(metrics_, row.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace),
             dir_ + "/metrics.jsonl");
}

void MetricsLog::print(std::string_view line) {
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  write_line(log_, line, dir_ + "/log.txt");
}

void MetricsLog::truncate_after(const std::string& dir, int64_t step) {
  const fs::path path = fs::path(dir) / "metrics.jsonl";
  std::optional<std::string> text = read_file(path);
  if (!text) return;
  std::string kept;
  std::istringstream lines(*text);
  for (std::string line; std::getline(lines, line);) {
    if (kept_on_resume(line, step)) kept += line + '\n';
  }
  if (kept != *text) write_file_atomic(path.string(), kept);
}

}  // namespace hylo
