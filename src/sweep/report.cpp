#include "sweep/report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <string_view>

#include "core/error.h"
#include "core/file.h"
#include "sweep/status.h"
#include "sweep/sweep.h"

namespace hylo {

namespace fs = std::filesystem;

namespace {

// "retrieval_acc@D": a run's retrieval accuracy at distance D, from its eval report.
constexpr std::string_view kDistancePrefix = "retrieval_acc@";

struct ReportRow {
  std::string name;
  fs::path run_dir;
  std::map<std::string, std::string> overrides;
  std::optional<fs::path> retrieval_report;  // the last eval*.json (by name) with retrieval by distance
  std::map<std::string, double> values;
  bool in_sweep = false;  // a point of a sweep.json (else a run found in a plain directory)
  RunReport run;          // where it stands (sweep/status.h): only finished runs enter the summaries
};

using nlohmann::json;

// A metric's value; null (how JSON writes NaN and infinities) reads as NaN.
double as_number(const json& value) { return value.is_number() ? value.get<double>() : std::nan(""); }

// Last value of each metric: a train metric from the last train row, val_* from the last eval row
// (the rows are separate, so "last row that has the key" is both).
void collect_metrics(ReportRow& row, const std::vector<std::string>& metrics) {
  const fs::path path = row.run_dir / "metrics.jsonl";
  std::ifstream in(path);
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (line.empty()) continue;
    json values;
    try {
      values = json::parse(line);
    } catch (const json::exception&) {
      fmt::print(stderr, "report: skipping line {} of {} (not a JSON object)\n", number, path.string());
      continue;
    }
    if (!values.is_object()) continue;
    for (const std::string& m : metrics)
      if (auto it = values.find(m); it != values.end()) row.values[m] = as_number(*it);
    if (values.contains("loss"))
      if (auto step = values.find("step"); step != values.end()) row.values["step"] = as_number(*step);
  }
  // `hylo eval --json eval*.json` reports next to the run: retrieval accuracy (exact V) and token
  // accuracy over all distances (the second moves long before the first), and the accuracy at each
  // distance D as "retrieval_acc@D", which the summary over seeds pairs up too; held-out bits per
  // byte (the ppl task) and last-word accuracy.
  std::vector<fs::path> evals;
  for (const auto& e : fs::directory_iterator(row.run_dir)) {
    const std::string f = e.path().filename().string();
    if (f.starts_with("eval") && f.ends_with(".json")) evals.push_back(e.path());
  }
  std::sort(evals.begin(), evals.end());
  for (const fs::path& p : evals) {
    try {
      const json report = json::parse(read_file(p).value_or(""));
      if (report.contains("lastword")) row.values["lastword_acc"] = as_number(report.at("lastword").at("accuracy"));
      if (const json ppl = report.value("results", json::object()).value("ppl", json::object()); ppl.contains("bits_per_byte,none"))
        row.values["heldout_bpb"] = as_number(ppl.at("bits_per_byte,none"));
      if (!report.contains("retrieval")) continue;
      const json& retrieval = report.at("retrieval");
      const json overall = retrieval.value("overall", json::object());
      if (overall.contains("accuracy")) row.values["retrieval_acc"] = as_number(overall.at("accuracy"));
      if (overall.contains("token_accuracy")) row.values["retrieval_tok_acc"] = as_number(overall.at("token_accuracy"));
      if (retrieval.contains("by_distance")) {
        row.retrieval_report = p;
        std::erase_if(row.values, [](const auto& kv) { return kv.first.starts_with(kDistancePrefix); });
        for (const json& d : retrieval.at("by_distance"))
          row.values[fmt::format("{}{}", kDistancePrefix, d.at("distance").get<int>())] =
              as_number(d.at("all").at("accuracy"));
      }
    } catch (const json::exception&) {
      fmt::print(stderr, "report: skipping {} (not a hylo eval report)\n", p.string());
    }
  }
}

std::string format_value(double x) {
  if (!std::isfinite(x)) return fmt::format("{}", x);
  return std::fabs(x) >= 1000 || x == std::floor(x) ? fmt::format("{:.0f}", x) : fmt::format("{:.4f}", x);
}

std::optional<fs::path> find_script(const std::string& name) {
  for (const fs::path& p : {self_binary().parent_path() / ".." / "scripts" / name, fs::path("scripts") / name})
    if (fs::exists(p)) return fs::canonical(p);
  return std::nullopt;
}

// Mean and sample standard deviation (0 for one value).
std::pair<double, double> mean_sd(const std::vector<double>& v) {
  double mean = 0, squares = 0;
  for (double x : v) mean += x / double(v.size());
  for (double x : v) squares += (x - mean) * (x - mean);
  return {mean, v.size() > 1 ? std::sqrt(squares / double(v.size() - 1)) : 0.0};
}

// The values a run sets, for a legend: "pbb, G".
std::string legend_name(const std::vector<std::string>& values) {
  std::vector<std::string> set;
  std::copy_if(values.begin(), values.end(), std::back_inserter(set), [](const std::string& v) { return !v.empty(); });
  return fmt::format("{}", fmt::join(set, ", "));
}

// The finished runs (whose values are final), grouped by their values of `group_keys` (a key a run
// does not set reads as ""), groups in first-seen order: what both summaries below compare.
struct RunGroup {
  std::vector<std::string> values;  // in group_keys order
  std::vector<const ReportRow*> runs;
  std::string cells() const {  // the group's table cells, " a | b |"
    std::string out;
    for (const std::string& v : values) out += " " + v + " |";
    return out;
  }
  std::string name() const { return legend_name(values); }
};
std::vector<RunGroup> group_finished_runs(const std::vector<ReportRow>& rows, const std::vector<std::string>& group_keys) {
  std::vector<RunGroup> groups;
  for (const ReportRow& row : rows) {
    if (row.values.empty() || row.run.status != RunStatus::finished) continue;
    std::vector<std::string> values;
    for (const std::string& k : group_keys) values.push_back(row.overrides.count(k) ? row.overrides.at(k) : "");
    auto it = std::find_if(groups.begin(), groups.end(), [&](const RunGroup& g) { return g.values == values; });
    if (it == groups.end()) it = groups.insert(groups.end(), RunGroup{std::move(values), {}});
    it->runs.push_back(&row);
  }
  return groups;
}

// `keys` without `left_out`.
std::vector<std::string> keys_except(const std::vector<std::string>& keys, std::initializer_list<std::string_view> left_out) {
  std::vector<std::string> kept;
  std::copy_if(keys.begin(), keys.end(), std::back_inserter(kept), [&](const std::string& k) {
    return std::find(left_out.begin(), left_out.end(), k) == left_out.end();
  });
  return kept;
}

// Runs that differ only in train.seed, grouped (keys in `keys` order, the seed left out), in two
// tables:
// - per group, how many seeds finished, and the mean and standard deviation of each of `columns`;
// - per group after the first, its differences from the first group, paired by seed, as mean and
//   standard error. The first is the first seen, or with `baseline` the one whose key values
//   contain that text. The seed sets the initialisation and the data order, the same for every group,
//   and it moves every group alike (experiments/results/hybrids_all.md), so the pairs resolve
//   differences that the spread over seeds hides.
// Empty when the sweep does not vary the seed. `paired_out` gets the second table as data (for
// paired.png): {"baseline": label, "groups": [{"label", "pairs", "columns": {c: {n, mean, se}}}]},
// left null when there is no second group.
std::string seed_summary(const std::vector<ReportRow>& rows, const std::vector<std::string>& keys,
                         const std::vector<std::string>& columns, const std::optional<std::string>& baseline,
                         nlohmann::ordered_json& paired_out) {
  const std::string seed = "train.seed";
  if (std::find(keys.begin(), keys.end(), seed) == keys.end()) {
    HYLO_CHECK(!baseline, "report: --baseline '{}' needs runs that differ in train.seed (nothing is paired)",
               *baseline);
    return "";
  }
  const std::vector<std::string> group_keys = keys_except(keys, {seed});
  std::vector<RunGroup> groups = group_finished_runs(rows, group_keys);
  if (baseline) {  // the group the others are paired against goes first
    std::vector<std::string> labels;
    auto chosen = groups.end();
    int matches = 0;
    for (auto g = groups.begin(); g != groups.end(); ++g) {
      labels.push_back(fmt::format("'{}'", g->cells()));
      if (g->cells().find(*baseline) != std::string::npos) chosen = g, ++matches;
    }
    HYLO_CHECK(matches == 1, "report: --baseline '{}' matches {} of the points ({}); it must name one", *baseline,
               matches, fmt::join(labels, ", "));
    std::rotate(groups.begin(), chosen, chosen + 1);
  }
  auto header = [&](const std::string& count, const std::string& suffix) {
    std::string table = "|", rule = "|";
    for (const std::string& k : group_keys) table += " " + k + " |", rule += "---|";
    table += " " + count + " |", rule += "---|";
    for (const std::string& c : columns) table += " " + c + suffix + " |", rule += "---|";
    return table + "\n" + rule + "\n";
  };
  auto value = [](const ReportRow& row, const std::string& c) -> std::optional<double> {
    auto it = row.values.find(c);
    return it == row.values.end() ? std::nullopt : std::optional<double>(it->second);
  };
  // A paired difference more than 2 standard errors from zero (experiments/PROTOCOL.md: within 2 SE is
  // "no difference resolved") is shown in bold, so that a reader need not divide. With few pairs a
  // t-test is stricter (6 pairs: 2.57 se at 5%); the data keep mean and se for it.
  struct Summary {
    size_t n;
    double mean, spread;  // spread: the standard deviation, or the standard error of the mean
    bool beyond_2se;      // standard error only: the mean more than 2 of it from zero (n > 1)
  };
  auto summarize = [](const std::vector<double>& v, bool standard_error) -> std::optional<Summary> {
    if (v.empty()) return std::nullopt;
    const auto [mean, sd] = mean_sd(v);
    const double spread = standard_error ? sd / std::sqrt(double(v.size())) : sd;
    return Summary{v.size(), mean, spread, standard_error && v.size() > 1 && std::fabs(mean) > 2 * spread};
  };
  auto cell = [](const std::optional<Summary>& s) {
    if (!s) return std::string(" - |");
    if (s->n == 1) return fmt::format(" {} |", format_value(s->mean));
    const char* bold = s->beyond_2se ? "**" : "";
    return fmt::format(" {}{} ± {}{} |", bold, format_value(s->mean), format_value(s->spread), bold);
  };

  std::string spread = header("seeds", " (mean ± sd)");
  for (const RunGroup& group : groups) {
    spread += fmt::format("|{} {} |", group.cells(), group.runs.size());
    for (const std::string& c : columns) {
      std::vector<double> v;
      for (const ReportRow* row : group.runs)
        if (auto x = value(*row, c)) v.push_back(*x);
      spread += cell(summarize(v, false));
    }
    spread += "\n";
  }
  std::string out = "\nOver seeds (runs that differ only in train.seed):\n\n" + spread;
  if (groups.size() < 2) return out;

  std::string paired = header("pairs", " − first (mean ± se)");
  const auto& first = groups.front().runs;
  paired_out = {{"baseline", groups.front().name()}, {"groups", nlohmann::ordered_json::array()}};
  for (size_t g = 1; g < groups.size(); ++g) {
    std::vector<std::pair<const ReportRow*, const ReportRow*>> pairs;  // (this group's, the first's), same seed
    for (const ReportRow* row : groups[g].runs)
      for (const ReportRow* base : first)
        if (base->overrides.count(seed) && row->overrides.count(seed) &&
            base->overrides.at(seed) == row->overrides.at(seed))
          pairs.emplace_back(row, base);
    paired += fmt::format("|{} {} |", groups[g].cells(), pairs.size());
    nlohmann::ordered_json group{{"label", groups[g].name()}, {"pairs", pairs.size()}, {"columns", nlohmann::ordered_json::object()}};
    for (const std::string& c : columns) {
      std::vector<double> d;
      for (const auto& [row, base] : pairs)
        if (auto x = value(*row, c), y = value(*base, c); x && y) d.push_back(*x - *y);
      const std::optional<Summary> difference = summarize(d, true);
      paired += cell(difference);
      if (difference)
        group["columns"][c] = {{"n", difference->n}, {"mean", difference->mean}, {"se", difference->spread},
                               {"beyond_2se", difference->beyond_2se}};
    }
    paired_out["groups"].push_back(group);
    paired += "\n";
  }
  return out +
         "\nPaired by seed (each group minus the first group above, over the seeds both finished; se: the "
         "standard error of the mean difference; in bold: more than 2 se from zero):\n\n" +
         paired;
}

// The value of `tune` that gives the lowest `by` in each group of finished runs that differ only in
// `tune` (and the seed: a value's score is its mean over the seeds that ran it), as a table and as
// data (`tuned_out`). A best value at either end of the values tried is flagged: the optimum may lie
// beyond the grid, which then needs widening before the value is used at another scale.
std::string tune_summary(const std::vector<ReportRow>& rows, const std::vector<std::string>& keys,
                         const std::string& tune, const std::string& by, nlohmann::ordered_json& tuned_out) {
  HYLO_CHECK(std::find(keys.begin(), keys.end(), tune) != keys.end(),
             "report: --tune '{}': the runs do not differ in it (they differ in: {})", tune, fmt::join(keys, ", "));
  // One value of `tune` in a group: as written in the sweep, and its mean `by` over the seeds with a
  // finite one (none: every run of it diverged; it was tried, but cannot be best).
  struct Tried {
    std::string written;
    std::optional<double> mean;
  };
  auto tried_values = [&](const RunGroup& group) {
    std::map<double, std::pair<std::string, std::vector<double>>> by_value;  // numeric order: the grid's ends
    for (const ReportRow* run : group.runs) {
      const auto set = run->overrides.find(tune);
      if (set == run->overrides.end()) continue;
      char* end = nullptr;
      const double x = std::strtod(set->second.c_str(), &end);
      HYLO_CHECK(end != set->second.c_str() && *end == '\0', "report: --tune '{}': value '{}' is not a number", tune,
                 set->second);
      auto& [written, scores] = by_value[x];
      written = set->second;
      if (auto v = run->values.find(by); v != run->values.end() && std::isfinite(v->second)) scores.push_back(v->second);
    }
    std::map<double, Tried> tried;
    for (const auto& [x, value] : by_value)
      tried[x] = {value.first, value.second.empty() ? std::nullopt : std::optional(mean_sd(value.second).first)};
    return tried;
  };
  const std::vector<std::string> group_keys = keys_except(keys, {tune, "train.seed"});
  std::vector<std::pair<RunGroup, std::map<double, Tried>>> groups;
  std::map<double, std::string> columns;  // every value any group tried
  for (RunGroup& group : group_finished_runs(rows, group_keys)) {
    std::map<double, Tried> tried = tried_values(group);
    for (const auto& [x, t] : tried) columns.emplace(x, t.written);
    if (!tried.empty()) groups.emplace_back(std::move(group), std::move(tried));
  }
  HYLO_CHECK(!groups.empty(), "report: --tune '{}': no finished run sets it", tune);
  std::string table = "|", rule = "|";
  for (const std::string& k : group_keys) table += " " + k + " |", rule += "---|";
  table += fmt::format(" best {} | {} |", tune, by), rule += "---|---|";
  for (const auto& [x, written] : columns) table += fmt::format(" {} = {} |", by, written), rule += "---|";
  table += "\n" + rule + "\n";
  tuned_out = {{"key", tune}, {"by", by}, {"groups", nlohmann::ordered_json::array()}};
  for (const auto& [group, tried] : groups) {
    auto best = tried.end();
    nlohmann::ordered_json scores = nlohmann::ordered_json::object();
    for (auto t = tried.begin(); t != tried.end(); ++t) {
      if (!t->second.mean) continue;
      scores[t->second.written] = *t->second.mean;
      if (best == tried.end() || *t->second.mean < *best->second.mean) best = t;
    }
    std::string line = fmt::format("|{}", group.cells());
    if (best == tried.end()) {
      line += " - | - |";
    } else {
      const bool edge = tried.size() > 1 && (best == tried.begin() || std::next(best) == tried.end());
      line += fmt::format(" {}{} | {} |", best->second.written, edge ? " (edge of the grid)" : "",
                          format_value(*best->second.mean));
      // What the group's runs set (a key it leaves unset is absent): `hylo sweep --tuned` matches points by it.
      nlohmann::ordered_json settings = nlohmann::ordered_json::object();
      for (size_t k = 0; k < group_keys.size(); ++k)
        if (!group.values[k].empty()) settings[group_keys[k]] = group.values[k];
      tuned_out["groups"].push_back({{"label", group.name()},
                                     {"set", settings},
                                     {"best", best->second.written},
                                     {by, *best->second.mean},
                                     {"edge", edge},
                                     {"scores", scores}});
    }
    for (const auto& [x, written] : columns) {
      const auto t = tried.find(x);
      line += t == tried.end() || !t->second.mean ? std::string(" - |") : fmt::format(" {} |", format_value(*t->second.mean));
    }
    table += line + "\n";
  }
  HYLO_CHECK(!tuned_out["groups"].empty(), "report: --by '{}': no finished run has a value of it", by);
  return fmt::format("\nTuned {0} (the lowest {1} of the values tried, per group of runs that differ only in {0}; "
                     "a value's {1} is its mean over seeds):\n\n{2}",
                     tune, by, table);
}

// The rows of one sweep directory: its sweep.json's points in order (their override keys appended
// to `keys`, its metrics to `metrics`), or else every subdirectory with a metrics.jsonl, by name.
// Row names are the point names, after `prefix`. Returns what the sweep's runs share apart from
// their seed (base config, `set` without train.seed; empty for a plain directory): directories
// combine into one report only when that is the same. The sweep's name is not part of it, so a
// later sweep that adds a point to an earlier one's settings (a new bridge width, say) pools with
// the earlier one's runs of the same seeds.
std::string load_sweep_rows(const fs::path& dir, const std::string& prefix, std::vector<std::string>& metrics,
                            std::vector<std::string>& keys, std::vector<ReportRow>& rows) {
  auto add_once = [](std::vector<std::string>& list, const std::string& x) {
    if (std::find(list.begin(), list.end(), x) == list.end()) list.push_back(x);
  };
  const fs::path sweep_json = dir / "sweep.json";
  if (!fs::exists(sweep_json)) {
    std::vector<ReportRow> found;
    for (const auto& e : fs::directory_iterator(dir))
      if (fs::exists(e.path() / "metrics.jsonl")) {
        ReportRow row;
        row.name = prefix + e.path().filename().string();
        row.run_dir = e.path();
        found.push_back(std::move(row));
      }
    std::sort(found.begin(), found.end(), [](const ReportRow& a, const ReportRow& b) { return a.name < b.name; });
    rows.insert(rows.end(), found.begin(), found.end());
    return "";
  }
  const json sweep = read_json_file(sweep_json, "report");
  try {
    std::string what = "on " + sweep.value("base", std::string());
    std::map<std::string, std::string> set;  // sorted: the same set reads the same
    const json sweep_set = sweep.value("set", json::object());  // named: items() does not keep it alive
    for (const auto& [key, value] : sweep_set.items())
      if (key != "train.seed") set[key] = value.get<std::string>();
    for (const auto& [k, v] : set) what += fmt::format(" {}={}", k, v);
    for (const json& m : sweep.value("metrics", json::array())) add_once(metrics, m.get<std::string>());
    const auto set_seed = sweep_set.find("train.seed");
    for (const json& p : sweep.at("points")) {
      // The sweep dir may have been moved or copied off the cluster: look next to sweep.json.
      ReportRow row;
      const std::string name = p.at("name").get<std::string>();
      row.name = prefix + name;
      row.run_dir = dir / name;
      row.in_sweep = true;
      const json overrides = p.value("overrides", json::object());
      for (const auto& [key, value] : overrides.items()) {
        add_once(keys, key);
        row.overrides[key] = value.get<std::string>();
      }
      // A point not started yet has no config.yaml to read its seed from: the sweep's is its own.
      if (set_seed != sweep_set.end() && !row.overrides.count("train.seed"))
        row.overrides["train.seed"] = set_seed->get<std::string>();
      rows.push_back(std::move(row));
    }
    return what;
  } catch (const json::exception& e) {
    HYLO_FAIL("{}: not a sweep.json written by hylo sweep: {}", sweep_json.string(), e.what());
  }
}

// A sweep point's seed that the point does not set (the sweep's `set`, `--set`, the base config) is
// read from its run's resolved config.yaml, and it becomes a key when the runs differ in it: the
// same sweep launched once per seed into several directories then pairs up by seed like a sweep
// over seeds. (Runs of a plain directory are left alone: what else they differ in is not known.)
void read_run_seeds(std::vector<ReportRow>& rows, std::vector<std::string>& keys) {
  const std::string seed = "train.seed";
  std::vector<std::string> seen;
  for (ReportRow& row : rows) {
    if (!row.in_sweep) continue;
    const fs::path config = row.run_dir / "config.yaml";
    if (!row.overrides.count(seed) && fs::exists(config)) {
      try {
        row.overrides[seed] = YAML::LoadFile(config.string())["train"]["seed"].as<std::string>();
      } catch (const YAML::Exception& e) {
        HYLO_FAIL("{}: no train.seed: {}", config.string(), e.msg);
      }
    }
    if (row.overrides.count(seed) && std::find(seen.begin(), seen.end(), row.overrides[seed]) == seen.end())
      seen.push_back(row.overrides[seed]);
  }
  if (seen.size() > 1 && std::find(keys.begin(), keys.end(), seed) == keys.end()) keys.push_back(seed);
}

// Directories of one sweep run in parts (`hylo sweep --only`, one device call each) list every point,
// most of them never started there: each point appears once, from the directory that ran it, and a
// point that none started once, as pending. A started point is never dropped (the same point and seed
// started twice is refused below). A point's seed is known when it ran, or it or its sweep set one;
// else it is the base config's, which every pooled directory shares (so it matches any).
void drop_unstarted_copies(std::vector<ReportRow>& rows) {
  const auto seed_of = [](const ReportRow& row) {
    const auto it = row.overrides.find("train.seed");
    return it == row.overrides.end() ? std::string() : it->second;
  };
  std::vector<bool> started;
  for (const ReportRow& row : rows) started.push_back(fs::exists(row.run_dir / "metrics.jsonl"));
  const auto same_point = [&](const ReportRow& a, const ReportRow& b) {
    return a.run_dir.filename() == b.run_dir.filename() &&
           (seed_of(a).empty() || seed_of(b).empty() || seed_of(a) == seed_of(b));
  };
  std::vector<ReportRow> kept;
  for (size_t i = 0; i < rows.size(); ++i) {
    bool shown_elsewhere = false;  // by a copy that started, or by an earlier one that did not either
    for (size_t j = 0; j < rows.size() && !started[i] && !shown_elsewhere; ++j)
      shown_elsewhere = j != i && same_point(rows[i], rows[j]) && (started[j] || j < i);
    if (!shown_elsewhere) kept.push_back(rows[i]);
  }
  rows = std::move(kept);
}

// --where KEY=VALUE: only the rows with that value of KEY, as the sweeps wrote it. KEY must be one
// the runs vary (a typo would otherwise keep nothing, or everything, without a word).
void keep_where(const std::string& condition, const std::vector<std::string>& keys, std::vector<ReportRow>& rows) {
  HYLO_CHECK(condition.find('=') != std::string::npos, "report: --where '{}': expected KEY=VALUE (e.g. train.lr=3.0e-3)",
             condition);
  const auto [key, value] = split_override(condition);
  HYLO_CHECK(std::find(keys.begin(), keys.end(), key) != keys.end(),
             "report: --where '{}': the runs do not vary {} (they vary {})", condition, key, fmt::join(keys, ", "));
  std::set<std::string> values;  // the values there are, for the message when none matches
  std::vector<ReportRow> kept;
  for (ReportRow& row : rows) {
    const auto it = row.overrides.find(key);
    if (it == row.overrides.end()) continue;
    values.insert(it->second);
    if (it->second == value) kept.push_back(std::move(row));
  }
  HYLO_CHECK(!kept.empty(), "report: --where '{}' keeps no run ({} is one of: {})", condition, key, fmt::join(values, ", "));
  rows = std::move(kept);
}

}  // namespace

int run_report(const ReportOptions& options) {
  std::vector<fs::path> dirs;
  for (std::string dir_text : options.dirs) {
    while (dir_text.size() > 1 && dir_text.back() == '/') dir_text.pop_back();  // "x/" names x, too
    HYLO_CHECK(fs::is_directory(dir_text), "report: no such directory '{}'", dir_text);
    dirs.push_back(dir_text);
  }
  const std::optional<std::string>& baseline = options.baseline;
  HYLO_CHECK(!dirs.empty(), "report: expected a sweep directory (e.g. runs/sweeps/pbb-vs-swa-tiny)");
  HYLO_CHECK(dirs.size() == 1 || !options.out.empty(),
             "report: {} sweep directories need --out DIR for the combined report", dirs.size());
  const fs::path dir = options.out.empty() ? dirs.front() : fs::path(options.out);

  std::vector<std::string> metrics, keys;
  std::vector<ReportRow> rows;
  std::vector<std::string> ran;  // per directory, what its sweep ran apart from the seed
  for (const fs::path& d : dirs)
    ran.push_back(load_sweep_rows(d, dirs.size() > 1 ? d.string() + "/" : "", metrics, keys, rows));
  for (size_t i = 0; i < dirs.size() && dirs.size() > 1; ++i) {
    HYLO_CHECK(!ran[i].empty(), "report: {} holds no sweep.json; only sweep directories combine", dirs[i].string());
    HYLO_CHECK(ran[i] == ran[0], "report: {} ran {}, but {} ran {}: only runs of the same base and settings combine",
               dirs[i].string(), ran[i], dirs[0].string(), ran[0]);
  }
  HYLO_CHECK(!rows.empty(), "report: {} holds no sweep.json and no run dirs with metrics.jsonl", dirs.front().string());
  if (metrics.empty()) metrics = {"loss", "val_loss", "val_ppl"};
  read_run_seeds(rows, keys);
  if (dirs.size() > 1) drop_unstarted_copies(rows);
  for (const std::string& condition : options.where) keep_where(condition, keys, rows);
  std::vector<std::string> run_dirs, retrieval_reports;  // the plots' inputs, NAME=path
  std::map<std::string, std::string> labelled;           // plot label -> the row that has it
  const std::vector<std::string> label_keys = keys_except(keys, {"train.seed"});
  for (ReportRow& row : rows) {
    row.run = point_report(row.run_dir);
    if (!fs::exists(row.run_dir / "metrics.jsonl")) continue;  // a point not run yet: an empty row
    collect_metrics(row, metrics);
    // Pooled directories name their rows by path; a plot's legend names the run by what it sets
    // apart from the seed, and its seed (read_run_seeds gave every pooled row one), so the plots
    // draw one band per group however its runs were named (a grid's point and the seeded sweep's).
    // Two rows with one label are one seed pooled twice: it would count twice over seeds and pair
    // with itself.
    const auto seed = row.overrides.find("train.seed");
    std::vector<std::string> values;
    for (const std::string& k : label_keys)
      values.push_back(row.overrides.count(k) ? row.overrides.at(k) : "");
    const std::string sets = legend_name(values);
    const std::string what = sets.empty() ? row.run_dir.filename().string() : sets;
    const std::string label = dirs.size() > 1 && seed != row.overrides.end()
                                  ? fmt::format("{} (seed {})", what, seed->second)
                                  : row.name;
    const auto [first, unique] = labelled.emplace(label, row.name);
    HYLO_CHECK(unique, "report: {} and {} are the same point with the same seed ({}): pool each seed once",
               first->second, row.name, seed == row.overrides.end() ? "unset" : seed->second);
    run_dirs.push_back(label + "=" + row.run_dir.string());
    if (row.retrieval_report) retrieval_reports.push_back(label + "=" + row.retrieval_report->string());
  }
  std::vector<std::string> columns{"point"};
  columns.insert(columns.end(), keys.begin(), keys.end());
  columns.push_back("step");
  columns.insert(columns.end(), metrics.begin(), metrics.end());
  // The eval reports' columns, where any run has them.
  for (const char* c : {"heldout_bpb", "lastword_acc", "retrieval_acc", "retrieval_tok_acc"})
    if (std::ranges::any_of(rows, [&](const ReportRow& row) { return row.values.count(c) > 0; }) &&
        std::find(columns.begin(), columns.end(), c) == columns.end())
      columns.push_back(c);
  std::string table = "|", rule = "|";
  for (const std::string& c : columns) table += " " + c + " |", rule += "---|";
  table += "\n" + rule + "\n";
  std::string unfinished;  // the note below the table
  for (const ReportRow& row : rows) {
    table += "| " + row.name + " |";
    for (const std::string& k : keys) table += " " + (row.overrides.count(k) ? row.overrides.at(k) : "") + " |";
    const bool finished = row.run.status == RunStatus::finished;
    for (size_t c = 1 + keys.size(); c < columns.size(); ++c) {
      auto it = row.values.find(columns[c]);
      std::string cell = it == row.values.end() ? std::string("-") : format_value(it->second);
      if (columns[c] == "step" && !finished) cell += fmt::format(" ({})", run_status_name(row.run.status));
      table += " " + cell + " |";
    }
    table += "\n";
    if (!finished)
      unfinished += fmt::format("{}{} ({}{})", unfinished.empty() ? "" : ", ", row.name, run_status_name(row.run.status),
                                row.run.final_step > 0 ? fmt::format(" at step {} of {}", row.run.step, row.run.final_step)
                                                       : "");
  }
  if (!unfinished.empty())
    table += "\nUnfinished, their values at the step shown and left out of any summary over seeds: " + unfinished + "\n";
  std::vector<std::string> metric_columns(columns.begin() + std::ptrdiff_t(1 + keys.size() + 1), columns.end());
  // Over seeds, retrieval by distance too (nearest first): where two masks differ, it is by distance.
  std::set<std::pair<int, std::string>> by_distance;
  for (const ReportRow& row : rows)
    for (const auto& [key, value] : row.values)
      if (key.starts_with(kDistancePrefix)) by_distance.emplace(std::stoi(key.substr(kDistancePrefix.size())), key);
  for (const auto& [distance, key] : by_distance) metric_columns.push_back(key);
  nlohmann::ordered_json paired;
  const std::string over_seeds = seed_summary(rows, keys, metric_columns, baseline, paired);
  nlohmann::ordered_json tuned;
  const std::string tuned_table = options.tune ? tune_summary(rows, keys, *options.tune, options.tune_by, tuned) : "";
  fmt::print("{}{}{}", table, over_seeds, tuned_table);
  fs::create_directories(dir);  // once every check has passed: a refused report leaves nothing

  // Each plot: scripts/<script> under /usr/bin/python3 with matplotlib into dir/<png>; the report's
  // image line, or nothing (said) when it cannot be drawn.
  const bool have_matplotlib = std::system("/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1") == 0;
  auto plot = [&](const std::string& script_name, const std::vector<std::string>& inputs, const std::string& png,
                  const std::string& caption) -> std::string {
    if (inputs.empty()) return "";
    const std::optional<fs::path> script = find_script(script_name);
    if (!script || !have_matplotlib) {
      fmt::print("report: no {} ({} not found)\n", png, script ? "/usr/bin/python3 with matplotlib" : "scripts/" + script_name);
      return "";
    }
    std::string command = fmt::format("/usr/bin/python3 {}", shell_quote(script->string()));
    for (const std::string& input : inputs) command += fmt::format(" {}", shell_quote(input));
    command += fmt::format(" --out {} >/dev/null", shell_quote((dir / png).string()));
    if (std::system(command.c_str()) == 0) return fmt::format("\n![{}]({})\n", caption, png);
    fmt::print(stderr, "report: {} failed; no {}\n", script_name, png);
    return "";
  };
  std::string title;
  for (const fs::path& d : dirs)
    title += (title.empty() ? "" : ", ") + (dirs.size() > 1 ? d.string() : d.filename().string());
  std::vector<std::string> paired_inputs;  // the differences paired by seed, as paired.json
  std::vector<std::string> tuned_inputs;  // the best value per group, as tuned.json
  if (!tuned.is_null()) {
    write_file_atomic((dir / "tuned.json").string(), tuned.dump(1) + "\n");
    tuned_inputs.push_back((dir / "tuned.json").string());
  }
  if (!paired.is_null()) {
    write_file_atomic((dir / "paired.json").string(), paired.dump(1) + "\n");
    paired_inputs.push_back((dir / "paired.json").string());
  }
  const std::string plots =
      plot("plot_loss.py", run_dirs, "loss.png", "loss curves") +
      plot("plot_retrieval.py", retrieval_reports, "retrieval.png", "retrieval by distance") +
      plot("plot_paired.py", paired_inputs, "paired.png", "differences from the first group, paired by seed") +
      plot("plot_tune.py", tuned_inputs, "tune.png", "the metric against the tuned key, per group");
  write_file_atomic((dir / "report.md").string(),
                    fmt::format("# Sweep {}\n\nLast value of each metric per run.\n\n{}{}{}{}", title, table, over_seeds,
                                tuned_table, plots));
  fmt::print("wrote {}\n", (dir / "report.md").string());
  return 0;
}

}  // namespace hylo
