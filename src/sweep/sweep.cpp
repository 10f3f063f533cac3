// Sweep file format (YAML):
//
//   name: pbb-vs-swa-tiny          # optional; default the file's stem. Names OUT/<name>/
//   base: configs/tiny.yaml        # the config every point starts from (relative to the cwd,
//                                  # like `hylo train CONFIG`)
//   set:                           # optional: overrides applied to every point
//     train.steps: 200
//   points:                        # optional: a list of maps of overrides, one map per point
//     - {model.local.kind: pbb, model.local.block: 64}
//     - {model.local.kind: swa, model.local.window: 64}
//   grid:                          # optional: key -> list of values; the cartesian product
//     train.lr: [1.0e-3, 3.0e-3]
//   metrics: [loss, val_loss, val_ppl, tokens_per_s]   # optional; these three by default
//   ranks: 8                       # optional, default 1: processes (GPUs) per point, data or
//                                  # expert parallel: --slurm asks each array task for that many
//                                  # tasks (and a GPU each on cuda), --local starts each point
//                                  # under mpirun -np
//   slurm:                         # optional: the --slurm array job's resources; the flags of the
//     partition: gpu               # same names (--partition, --account, --qos, --time, --mem,
//     account: proj42              # --cpus-per-task, --signal-seconds) override them
//     qos: normal
//     time: "04:00:00"
//     mem: 64G
//     cpus_per_task: 8             # default 8 per GPU on cuda, 1 on cpu
//     signal_seconds: 120          # USR1 this long before the time limit: checkpoint and requeue
//
// At least one of `points` / `grid` is required. With both, every point is crossed with every
// grid combination (points vary slowest); with several grid keys the last one varies fastest, as
// nested loops written in file order would. A point's overrides are `set` then its own, so a
// point may replace a `set` value; a key in both a point and the grid is an error (which would
// win is not obvious). A value may be a mapping (`model.local: {kind: swa, window: 64}`), which
// sets a whole section as `--set` does.
#include "sweep/sweep.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <string_view>

#include "core/error.h"
#include "core/file.h"
#include "core/suggest.h"
#include "config/config.h"
#include "checkpoint/run_dir.h"

namespace hylo {

namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kTopLevelKeys = {"name", "base", "set", "points", "grid", "metrics", "ranks", "slurm"};
const std::vector<std::string> kSlurmKeys = {"partition", "account", "qos", "time", "mem", "cpus_per_task",
                                             "signal_seconds"};

int positive_int(const YAML::Node& node, const std::string& where) {
  int value = 0;
  try {
    value = node.as<int>();
  } catch (const YAML::Exception&) {
    HYLO_FAIL("{}: '{}' is not a whole number", where, node.IsScalar() ? node.Scalar() : "(not a scalar)");
  }
  HYLO_CHECK(value >= 1, "{}={} must be >= 1", where, value);
  return value;
}

SlurmSettings slurm_settings(const YAML::Node& node, const std::string& path) {
  HYLO_CHECK(node.IsMap(), "{}: slurm: expected a map of {}", path, fmt::join(kSlurmKeys, ", "));
  SlurmSettings s;
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>(), where = path + ": slurm." + key;
    if (key == "cpus_per_task" || key == "signal_seconds") {
      (key == "cpus_per_task" ? s.cpus_per_task : s.signal_seconds) = positive_int(kv.second, where);
      continue;
    }
    std::string* field = key == "partition" ? &s.partition : key == "account" ? &s.account : key == "qos" ? &s.qos
                         : key == "time"    ? &s.time      : key == "mem"     ? &s.mem     : nullptr;
    if (!field) {
      const std::string near = nearest_choice(key, kSlurmKeys, 2);
      HYLO_FAIL("{}: slurm: unknown key '{}' ({})", path, key,
                near.empty() ? "known: " + fmt::format("{}", fmt::join(kSlurmKeys, ", ")) : "did you mean '" + near + "'?");
    }
    HYLO_CHECK(kv.second.IsScalar(), "{}: expected one value", where);
    check_slurm_value(path + ": slurm", key, kv.second.Scalar());
    *field = kv.second.Scalar();
  }
  return s;
}

std::string suggestion(const std::string& key) {
  const std::string near = nearest_choice(key, kTopLevelKeys, 2);  // further is a guess, not a typo
  return near.empty() ? fmt::format(" (known: {})", fmt::join(kTopLevelKeys, ", "))
                      : fmt::format(" (did you mean '{}'?)", near);
}

// The override value as `--set` text: scalars verbatim (so "1.0e-3" stays as written), mappings
// and lists as one-line flow YAML.
std::string value_text(const YAML::Node& value, const std::string& where) {
  HYLO_CHECK(value.IsDefined() && !value.IsNull(), "{}: no value", where);
  if (value.IsScalar()) return value.Scalar();
  YAML::Emitter out;
  out << YAML::Flow << value;
  return out.c_str();
}

std::vector<Override> override_map(const YAML::Node& node, const std::string& where) {
  HYLO_CHECK(node.IsMap(), "{}: expected a map of key: value overrides", where);
  std::vector<Override> result;
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    HYLO_CHECK(!key.empty(), "{}: empty key", where);
    result.emplace_back(key, value_text(kv.second, where + "." + key));
  }
  return result;
}

bool is_safe_name(const std::string& s) {
  return !s.empty() && s != "." && s != ".." &&
         std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum((unsigned char)c) || c == '-' || c == '_' || c == '.'; });
}

}  // namespace

std::string point_slug(const std::vector<Override>& varied) {
  std::string slug;
  for (const auto& [key, value] : varied) {
    const std::string leaf = key.substr(key.rfind('.') == std::string::npos ? 0 : key.rfind('.') + 1);
    if (!slug.empty()) slug += '_';
    std::string part = leaf + "-" + value;
    // Anything outside the safe set (spaces, braces, '/', ':' of mapping values) becomes '-', and
    // runs of '-' collapse, so "{kind: swa, window: 8}" reads "kind-swa-window-8".
    for (char c : part) {
      const bool safe = std::isalnum((unsigned char)c) || c == '.' || c == '_';
      if (safe) slug += c;
      else if (!slug.empty() && slug.back() != '-' && slug.back() != '_') slug += '-';
    }
    while (!slug.empty() && slug.back() == '-') slug.pop_back();
  }
  if (slug.size() > 48) slug.resize(48);
  return slug.empty() ? "base" : slug;
}

namespace {

// "07_kind-pbb_lr-0.001": the point's index, zero-padded to the width of the sweep's last index (at
// least 2, so that names sort in order), then the slug of what it varies.
std::string point_name(size_t index, size_t points, const std::vector<Override>& varied) {
  const int width = std::max<int>(2, int(std::to_string(points - 1).size()));
  return fmt::format("{:0{}}_{}", index, width, point_slug(varied));
}

}  // namespace

std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') out += "'\\''";  // close the quote, an escaped quote, reopen
    else out += c;
  }
  return out + "'";
}

void check_slurm_value(const std::string& where, const std::string& key, const std::string& value) {
  const bool word = !value.empty() && std::all_of(value.begin(), value.end(), [](char c) {
    return std::isalnum((unsigned char)c) || std::string_view(":._,+-").find(c) != std::string_view::npos;
  });
  HYLO_CHECK(word, "{}: {} '{}' is not one word of [A-Za-z0-9:._,+-] (it goes into an #SBATCH line)", where, key, value);
}

std::filesystem::path self_binary() { return std::filesystem::canonical("/proc/self/exe"); }

SweepSpec load_sweep(const std::string& path, const std::vector<std::string>& cli_set) {
  SweepSpec spec;
  spec.path = path;
  HYLO_CHECK(fs::is_regular_file(path), "{}: no such sweep file", path);
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    HYLO_FAIL("{}: invalid YAML at line {}: {}", path, e.mark.line + 1, e.msg);
  }
  HYLO_CHECK(root.IsMap(), "{}: expected a map with keys base, grid and/or points, set, metrics", path);
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    const bool known = std::find(kTopLevelKeys.begin(), kTopLevelKeys.end(), key) != kTopLevelKeys.end();
    HYLO_CHECK(known, "{}: unknown key '{}'{}", path, key, suggestion(key));
  }

  try {
    spec.name = root["name"] ? root["name"].as<std::string>() : fs::path(path).stem().string();
    HYLO_CHECK(is_safe_name(spec.name), "{}: name '{}' must be a directory name of [A-Za-z0-9._-]", path, spec.name);
    HYLO_CHECK(root["base"] && root["base"].IsScalar(), "{}: missing key 'base' (the config every point starts from)", path);
    spec.base = root["base"].as<std::string>();
    if (root["set"]) spec.set = override_map(root["set"], path + ": set");
    if (const YAML::Node r = root["ranks"]) {
      HYLO_CHECK(r.IsScalar(), "{}: ranks: expected a number of processes per point", path);
      int ranks = 0;
      try {
        ranks = r.as<int>();
      } catch (const YAML::Exception&) {
        HYLO_FAIL("{}: ranks: '{}' is not a whole number", path, r.Scalar());
      }
      HYLO_CHECK(ranks >= 1, "{}: ranks={} must be >= 1", path, ranks);
      spec.ranks = ranks;
    }
    if (const YAML::Node slurm = root["slurm"]) spec.slurm = slurm_settings(slurm, path);

    spec.metrics = {"loss", "val_loss", "val_ppl"};
    if (const YAML::Node m = root["metrics"]) {
      HYLO_CHECK(m.IsSequence() && m.size() > 0, "{}: metrics: expected a list of metric names, e.g. [loss, val_loss]", path);
      spec.metrics.clear();
      for (const auto& x : m) {
        HYLO_CHECK(x.IsScalar(), "{}: metrics: expected names, got a {}", path, x.IsMap() ? "map" : "list");
        const std::string& name = x.Scalar();
        if (!is_metrics_key(name)) {
          const std::string near = nearest_choice(name, kMetricsKeys, 3);
          HYLO_FAIL("{}: metrics: unknown metric '{}' ({}the trainer writes {}, and moe.<layer>.{{{}}})", path, name,
                    near.empty() ? "" : "did you mean '" + near + "'? ", fmt::join(kMetricsKeys, ", "),
                    fmt::join(kMoeMetricsSuffixes, ","));
        }
        spec.metrics.push_back(name);
      }
    }

    // Points first (varying slowest), then the grid's product in file order, last key fastest.
    std::vector<std::vector<Override>> listed;
    if (const YAML::Node p = root["points"]) {
      HYLO_CHECK(p.IsSequence() && p.size() > 0, "{}: points: expected a non-empty list of maps of overrides", path);
      for (size_t i = 0; i < p.size(); ++i) listed.push_back(override_map(p[i], fmt::format("{}: points[{}]", path, i)));
    }
    std::vector<std::pair<std::string, std::vector<std::string>>> axes;
    if (const YAML::Node g = root["grid"]) {
      HYLO_CHECK(g.IsMap() && g.size() > 0, "{}: grid: expected a map of key: [values]", path);
      for (const auto& kv : g) {
        const std::string key = kv.first.as<std::string>();
        const std::string where = fmt::format("{}: grid.{}", path, key);
        HYLO_CHECK(kv.second.IsSequence() && kv.second.size() > 0, "{}: expected a non-empty list of values", where);
        std::vector<std::string> values;
        for (const auto& v : kv.second) values.push_back(value_text(v, where));
        axes.emplace_back(key, std::move(values));
      }
    }
    HYLO_CHECK(!listed.empty() || !axes.empty(), "{}: nothing to sweep: add 'grid' and/or 'points'", path);
    // --set: after the file's set; never a key the points or the grid vary (nor a section of one).
    const auto overlaps = [](const std::string& a, const std::string& b) {
      return a == b || b.starts_with(a + ".") || a.starts_with(b + ".");
    };
    for (const std::string& text : cli_set) {
      const auto [key, value] = split_override(text);
      for (const auto& [axis, values] : axes)
        HYLO_CHECK(!overlaps(key, axis), "sweep: --set {}: {} varies {} in its grid", key, path, axis);
      for (const auto& point : listed)
        for (const auto& [k, v] : point)
          HYLO_CHECK(!overlaps(key, k), "sweep: --set {}: {} varies {} in its points", key, path, k);
      spec.set.emplace_back(key, value);
    }
    if (listed.empty()) listed.emplace_back();
    for (size_t i = 0; i < listed.size(); ++i)
      for (const auto& [key, values] : axes)
        for (const auto& [k, v] : listed[i])
          HYLO_CHECK(k != key, "{}: key '{}' is in both points[{}] and grid", path, key, i);

    size_t combos = 1;
    for (const auto& axis : axes) combos *= axis.second.size();
    const size_t total = listed.size() * combos;
    HYLO_CHECK(total <= 10000, "{}: {} points; more than 10000 is probably a mistake", path, total);
    for (const auto& base_point : listed) {
      for (size_t c = 0; c < combos; ++c) {
        SweepPoint point;
        point.varied = base_point;
        size_t rest = c;  // mixed-radix digits of c, last axis least significant
        std::vector<size_t> digit(axes.size());
        for (size_t a = axes.size(); a-- > 0;) digit[a] = rest % axes[a].second.size(), rest /= axes[a].second.size();
        for (size_t a = 0; a < axes.size(); ++a) point.varied.emplace_back(axes[a].first, axes[a].second[digit[a]]);
        point.name = point_name(spec.points.size(), total, point.varied);
        for (const auto& [k, v] : spec.set) point.overrides.push_back(k + "=" + v);
        for (const auto& [k, v] : point.varied) point.overrides.push_back(k + "=" + v);
        spec.points.push_back(std::move(point));
      }
    }
  } catch (const YAML::Exception& e) {
    HYLO_FAIL("{}: line {}: {}", path, e.mark.line + 1, e.msg);
  }
  return spec;
}

nlohmann::json read_json_file(const fs::path& path, const std::string& who) {
  const std::optional<std::string> text = read_file(path);
  HYLO_CHECK(text, "{}: cannot read {}", who, path.string());
  try {
    return nlohmann::json::parse(*text);
  } catch (const nlohmann::json::exception& e) {
    HYLO_FAIL("{}: {}: not JSON: {}", who, path.string(), e.what());
  }
}

void apply_tuned(SweepSpec& spec, const std::string& tuned_path) {
  const nlohmann::json tuned = read_json_file(tuned_path, "sweep: --tuned");
  HYLO_CHECK(tuned.is_object() && tuned.value("key", nlohmann::json()).is_string() && tuned.contains("groups") &&
                 tuned["groups"].is_array(),
             "sweep: --tuned {}: expected the tuned.json of `hylo report --tune` (key, groups)", tuned_path);
  const std::string key = tuned["key"];
  std::vector<std::string> group_keys;  // every key some group sets
  for (const auto& group : tuned["groups"]) {
    HYLO_CHECK(group.is_object() && group.contains("set") && group["set"].is_object() &&
                   group.value("best", nlohmann::json()).is_string(),
               "sweep: --tuned {}: a group without 'set' and 'best' (written by an older hylo report? run it again)",
               tuned_path);
    for (const auto& [k, v] : group["set"].items())
      if (std::ranges::find(group_keys, k) == group_keys.end()) group_keys.push_back(k);
  }
  for (size_t index = 0; index < spec.points.size(); ++index) {
    SweepPoint& point = spec.points[index];
    std::map<std::string, std::string> settings;  // the point's overrides in order: the later wins
    for (const std::string& text : point.overrides) {
      const auto [k, v] = split_override(text);
      settings[k] = v;
    }
    HYLO_CHECK(!settings.count(key), "sweep: --tuned {}: {} point {} sets {} itself", tuned_path, spec.path, point.name,
               key);
    std::vector<const nlohmann::json*> matches;
    for (const auto& group : tuned["groups"]) {
      const bool same = std::ranges::all_of(group_keys, [&](const std::string& k) {
        const auto mine = settings.find(k);
        const bool set_here = mine != settings.end(), set_there = group["set"].contains(k);
        return set_here == set_there && (!set_here || group["set"][k] == mine->second);
      });
      if (same) matches.push_back(&group);
    }
    std::vector<std::string> described;  // the point's values of the group keys, for the errors
    for (const std::string& k : group_keys)
      described.push_back(k + "=" + (settings.count(k) ? settings.at(k) : std::string("(unset)")));
    HYLO_CHECK(matches.size() == 1, "sweep: --tuned {}: {} point {} ({}) matches {} of its groups, not one", tuned_path,
               spec.path, point.name, fmt::join(described, " "), matches.size());
    const nlohmann::json& group = *matches.front();
    const std::string best = group["best"];
    HYLO_CHECK(!group.value("edge", false),
               "sweep: --tuned {}: {}'s best ({}) for {} is at the edge of the values tried: widen that grid first",
               tuned_path, key, best, fmt::join(described, " "));
    point.varied.emplace_back(key, best);
    point.overrides.push_back(key + "=" + best);
    point.name = point_name(index, spec.points.size(), point.varied);
  }
}

std::vector<Config> check_sweep_configs(const SweepSpec& spec) {
  HYLO_CHECK(fs::is_regular_file(spec.base), "{}: base: no such config file '{}'", spec.path, spec.base);
  std::vector<Config> configs;
  for (const SweepPoint& point : spec.points) {
    try {
      configs.push_back(load_config(spec.base, point.overrides));
    } catch (const Error& e) {
      HYLO_FAIL("{}: point {}: {}", spec.path, point.name, e.what());
    }
    // What the trainer would refuse at each point's launch, refused before the first one runs.
    const TrainConfig& t = configs.back().train;
    HYLO_CHECK(t.batch_size % spec.ranks == 0, "{}: point {}: train.batch_size={} is not divisible by ranks={}",
               spec.path, point.name, t.batch_size, spec.ranks);
    HYLO_CHECK(spec.ranks % t.expert_parallel == 0, "{}: point {}: train.expert_parallel={} does not divide ranks={}",
               spec.path, point.name, t.expert_parallel, spec.ranks);
  }
  return configs;
}

}  // namespace hylo
