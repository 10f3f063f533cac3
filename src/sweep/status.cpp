#include "sweep/status.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file.h"

namespace hylo {

namespace fs = std::filesystem;

RunReport point_report(const fs::path& run_dir, int64_t planned_steps) {
  int64_t steps = planned_steps;
  const fs::path config = run_dir / "config.yaml";
  if (fs::exists(config)) {
    try {
      steps = YAML::LoadFile(config.string())["train"]["steps"].as<int64_t>();
    } catch (const YAML::Exception& e) {
      HYLO_FAIL("{}: no train.steps: {}", config.string(), e.msg);
    }
  }
  return run_report(run_dir.string(), steps);
}

int run_sweep_status(const std::string& dir_text) {
  const fs::path dir(dir_text), sweep_json = dir / "sweep.json";
  HYLO_CHECK(fs::exists(sweep_json), "sweep status: {} has no sweep.json (not a directory of hylo sweep)", dir_text);
  const std::optional<std::string> text = read_file(sweep_json);
  const nlohmann::json sweep = nlohmann::json::parse(text.value_or(""), nullptr, /*allow_exceptions=*/false);
  HYLO_CHECK(sweep.is_object() && sweep.contains("points") && sweep["points"].is_array(),
             "sweep status: {}: not a sweep.json written by hylo sweep", sweep_json.string());
  std::map<std::string, int> counts;
  std::string lines;
  for (const nlohmann::json& p : sweep["points"]) {
    HYLO_CHECK(p.is_object() && p.contains("name") && p["name"].is_string(),
               "sweep status: {}: a point without a name", sweep_json.string());
    const std::string name = p["name"].get<std::string>();
    const int64_t planned = p.contains("steps") && p["steps"].is_number_integer() ? p["steps"].get<int64_t>() : 0;
    // Next to sweep.json: the directory may have been moved or copied off the cluster.
    const fs::path run_dir = dir / name;
    const RunReport r = point_report(run_dir, planned);
    const std::string steps = r.final_step > 0 ? fmt::format("step {}/{}", r.step, r.final_step) : "";
    ++counts[run_status_name(r.status)];
    lines += fmt::format("  {:<40} {:<10} {}{}\n", name, run_status_name(r.status), steps,
                         r.detail.empty() ? "" : " (" + r.detail + ")");
  }
  std::string summary;
  for (const RunStatus s : {RunStatus::finished, RunStatus::running, RunStatus::preempted, RunStatus::failed,
                            RunStatus::pending})
    if (counts.count(run_status_name(s)))
      summary += fmt::format("{}{} {}", summary.empty() ? "" : ", ", counts[run_status_name(s)], run_status_name(s));
  fmt::print("sweep {} ({}): {} points: {}\n{}", sweep.value("name", std::string("?")), dir_text,
             sweep["points"].size(), summary, lines);
  return 0;
}

}  // namespace hylo
