// Sweeps (SPEC §7): expanding a sweep file into points, one-line errors for bad sweep files,
// `hylo sweep --dry-run | --local | --slurm` and `hylo report` on a tiny config.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file.h"
#include "error_of.h"
#include "run_command.h"
#include "tiny_workspace.h"
#include "checkpoint/run_dir.h"
#include "sweep/sweep.h"

using namespace hylo;
using hylo::test::error_of;
namespace fs = std::filesystem;

namespace {

// Sweeps over a 2-layer d16 hybrid: 5 steps, eval at the end.
struct SweepWorkspace : test::TinyWorkspace {
  explicit SweepWorkspace(const std::string& name)
      : TinyWorkspace("sweep_" + name,
                      "model:\n  vocab_size: 256\n  d_model: 16\n  n_layers: 2\n  n_heads: 2\n  ffn_hidden: 32\n"
                      "  pattern: LG\n  local: {kind: pbb, block: 8, bridge: 3}\n"
                      "train:\n  steps: 5\n  batch_size: 2\n  seq_len: 16\n  lr: 0.003\n  warmup_steps: 1\n"
                      "  eval_every: 5\n  eval_batches: 1\n  log_every: 5\n",
                      4000, 2000) {}

  // Writes a sweep file whose base is the tiny config; returns its path.
  std::string sweep(const std::string& file, const std::string& body) const {
    std::ofstream(dir / file) << "base: " << (dir / "tiny.yaml").string() << "\n" << body;
    return (dir / file).string();
  }

  test::CommandResult run(const std::string& args) const {
    return test::run_command("cd " + dir.string() + " && " + hylo + " " + args);
  }
  // run(), which must succeed (its output is the failure message).
  test::CommandResult succeeds(const std::string& args) const {
    test::CommandResult r = run(args);
    REQUIRE_MESSAGE(r.exit_code == 0, r.output);
    return r;
  }
};

// The last value of `key` in a run's metrics.jsonl, as the report prints it.
std::vector<nlohmann::json> metrics_rows(const fs::path& run_dir) {
  std::vector<nlohmann::json> rows;
  std::istringstream lines(read_file(run_dir / "metrics.jsonl").value());
  for (std::string line; std::getline(lines, line);) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

std::string last_metric(const fs::path& run_dir, const std::string& key) {
  std::string value;
  for (const nlohmann::json& row : metrics_rows(run_dir))
    if (row.contains(key)) value = fmt::format("{:.4f}", row[key].get<double>());
  return value;
}

// Every key of every row of a run's metrics.jsonl.
std::vector<std::string> metrics_keys(const fs::path& run_dir) {
  std::vector<std::string> keys;
  for (const nlohmann::json& row : metrics_rows(run_dir))
    for (const auto& [key, value] : row.items()) keys.push_back(key);
  return keys;
}

}  // namespace

TEST_CASE("sweep grid expands in file order, last key fastest, with deterministic names") {
  SweepWorkspace ws("grid");
  const std::string path = ws.sweep("g.yaml", "name: g\ngrid:\n  model.local.kind: [pbb, swa]\n  train.lr: [0.001, 3e-3]\n");
  const SweepSpec a = load_sweep(path), b = load_sweep(path);
  REQUIRE(a.points.size() == 4);
  const std::vector<std::string> names{"00_kind-pbb_lr-0.001", "01_kind-pbb_lr-3e-3", "02_kind-swa_lr-0.001",
                                       "03_kind-swa_lr-3e-3"};
  for (size_t i = 0; i < 4; ++i) {
    CHECK(a.points[i].name == names[i]);
    CHECK(b.points[i].name == a.points[i].name);
    CHECK(b.points[i].overrides == a.points[i].overrides);
  }
  CHECK(a.points[1].overrides == std::vector<std::string>{"model.local.kind=pbb", "train.lr=3e-3"});
  CHECK(a.metrics == std::vector<std::string>{"loss", "val_loss", "val_ppl"});
  CHECK(point_slug({{"model.local", "{kind: swa, window: 8}"}}) == "local-kind-swa-window-8");
  CHECK(shell_quote("a'b c") == "'a'\\''b c'");
}

TEST_CASE("sweep points cross the grid and take the set overrides first") {
  SweepWorkspace ws("points");
  const std::string path = ws.sweep("p.yaml",
                                    "name: p\nset: {train.steps: 3, train.lr: 0.01}\n"
                                    "points:\n  - {model.local.kind: swa, model.local.window: 8}\n"
                                    "  - {model.local.kind: pbb, train.lr: 0.02}\n"
                                    "grid: {train.seed: [1, 2]}\nmetrics: [loss, tokens_per_s]\n");
  const SweepSpec s = load_sweep(path);
  REQUIRE(s.points.size() == 4);
  CHECK(s.points[0].name == "00_kind-swa_window-8_seed-1");
  CHECK(s.points[3].name == "03_kind-pbb_lr-0.02_seed-2");
  CHECK(s.points[3].overrides == std::vector<std::string>{"train.steps=3", "train.lr=0.01", "model.local.kind=pbb",
                                                          "train.lr=0.02", "train.seed=2"});
  CHECK(s.metrics == std::vector<std::string>{"loss", "tokens_per_s"});
  CHECK_NOTHROW(check_sweep_configs(s));
}

TEST_CASE("bad sweep files give one-line errors naming the file and the key") {
  SweepWorkspace ws("bad");
  struct Case {
    std::string body, expected;
  };
  const std::vector<Case> cases{
      {"gird: {train.lr: [1]}\n", "unknown key 'gird' (did you mean 'grid'?)"},
      {"grid: {train.lr: 0.1}\n", "grid.train.lr: expected a non-empty list of values"},
      {"points: [{model.local.kind: swa}]\ngrid: {model.local.kind: [pbb]}\n", "in both points[0] and grid"},
      {"metrics: loss\npoints: [{train.lr: 1}]\n", "metrics: expected a list"},
      {"metrics: [loss, val_los]\npoints: [{train.lr: 1}]\n", "unknown metric 'val_los' (did you mean 'val_loss'?"},
      {"metrics: [moe.1.load]\npoints: [{train.lr: 1}]\n", "unknown metric 'moe.1.load' ("},
      {"metrics: [moe.x.load_max]\npoints: [{train.lr: 1}]\n", "unknown metric 'moe.x.load_max' ("},
      {"name: a/b\npoints: [{train.lr: 1}]\n", "name 'a/b'"},
      {"set: {train.lr: 1}\n", "nothing to sweep"},
      {"points: [{train.lr: [1, 2}]\n", "invalid YAML"},
      {"ranks: 0\npoints: [{train.lr: 1}]\n", "ranks=0 must be >= 1"},
      {"ranks: two\npoints: [{train.lr: 1}]\n", "ranks: 'two' is not a whole number"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path = ws.sweep("bad" + std::to_string(i) + ".yaml", cases[i].body);
    const std::string error = error_of([&] { load_sweep(path); });
    CAPTURE(error);
    CHECK(error.find(path) == 0);
    CHECK(error.find(cases[i].expected) != std::string::npos);
    CHECK(error.find('\n') == std::string::npos);
  }
  // Override keys are checked against the config before any point runs, through the CLI too.
  const std::string path = ws.sweep("badkey.yaml", "points: [{train.lr: 0.001}, {train.lr_typo: 1}]\n");
  const auto r = ws.run("sweep " + path + " --local --out " + (ws.dir / "out").string());
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("hylo: error: " + path + ": point 01_lr_typo-1:") == 0);
  CHECK(r.output.find("lr_typo") != std::string::npos);
  CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  CHECK(!fs::exists(ws.dir / "out"));
}

TEST_CASE("sweep --dry-run lists the points and runs nothing") {
  SweepWorkspace ws("dry");
  const std::string path = ws.sweep("d.yaml", "name: d\ngrid: {train.lr: [0.001, 0.002, 0.003]}\n");
  const auto r = ws.succeeds("sweep " + path + " --local --dry-run --out out");
  CHECK(r.output.find("3 points") != std::string::npos);
  CHECK(r.output.find("02_lr-0.003") != std::string::npos);
  CHECK(!fs::exists(ws.dir / "out"));
}

TEST_CASE("sweep --only runs just the named points, and a later call the others") {
  SweepWorkspace ws("only");
  const std::string path = ws.sweep("o.yaml", "name: o\ngrid: {train.lr: [0.001, 0.002, 0.003]}\n");
  const auto first = ws.succeeds("sweep " + path + " --local --only 0,2 --out out");
  CHECK(first.output.find("01_lr-0.002") != std::string::npos);
  CHECK(first.output.find("(not in --only)") != std::string::npos);
  CHECK(fs::exists(ws.dir / "out/o/00_lr-0.001/checkpoints/step_5.h5"));
  CHECK(!fs::exists(ws.dir / "out/o/01_lr-0.002"));
  CHECK(fs::exists(ws.dir / "out/o/02_lr-0.003/checkpoints/step_5.h5"));
  const auto second = ws.succeeds("sweep " + path + " --local --only=1 --out out");
  CHECK(second.output.find("sweep: running 01_lr-0.002") != std::string::npos);
  CHECK(second.output.find("sweep: running 00_") == std::string::npos);
  CHECK(fs::exists(ws.dir / "out/o/01_lr-0.002/checkpoints/step_5.h5"));

  const auto bad = ws.run("sweep " + path + " --local --only 3 --out out");
  CHECK(bad.exit_code == 1);
  CHECK(bad.output.find("--only 3: " + path + " has points 0 to 2") != std::string::npos);
}

TEST_CASE("sweep --local runs each point once, skips finished ones, and report tabulates them") {
  SweepWorkspace ws("local");
  const std::string path = ws.sweep("l.yaml", "name: l\ngrid: {model.local.kind: [pbb, swa]}\nset: {model.local.window: 8}\n");
  ws.succeeds("sweep " + path + " --local --out out");
  const fs::path sweep_dir = ws.dir / "out/l";
  for (const char* point : {"00_kind-pbb", "01_kind-swa"})
    CHECK(fs::exists(sweep_dir / point / "checkpoints/step_5.h5"));
  // Every key the trainer wrote is one a sweep may name in `metrics` (is_metrics_key).
  const std::vector<std::string> keys = metrics_keys(sweep_dir / "00_kind-pbb");
  CHECK(std::find(keys.begin(), keys.end(), "val_loss") != keys.end());
  for (const std::string& key : keys) {
    CAPTURE(key);
    CHECK(is_metrics_key(key));
  }
  const nlohmann::json sweep_json = nlohmann::json::parse(read_file(sweep_dir / "sweep.json").value());
  CHECK(sweep_json["points"][1]["overrides"] == nlohmann::json{{"model.local.kind", "swa"}});
  CHECK(sweep_json["points"][1]["status"] == "done");

  const auto second = ws.succeeds("sweep " + path + " --local --out out");
  CHECK(second.output.find("00_kind-pbb already finished, skipping") != std::string::npos);
  CHECK(second.output.find("01_kind-swa already finished, skipping") != std::string::npos);
  CHECK(second.output.find("sweep: running") == std::string::npos);

  // A sweep file edited under an existing run dir is refused rather than mixed into it.
  ws.sweep("l.yaml", "name: l\ngrid: {model.local.kind: [pbb, swa]}\nset: {model.local.window: 8, train.lr: 0.1}\n");
  const auto edited = ws.run("sweep " + path + " --local --out out");
  CHECK(edited.exit_code == 1);
  CHECK(edited.output.find("holds a different config") != std::string::npos);

  // `hylo eval --json` output next to a run adds retrieval columns (other eval files are ignored).
  std::ofstream(sweep_dir / "01_kind-swa/eval_retrieval.json")
      << R"({"step": 5, "retrieval": {"overall": {"accuracy": 0.25, "token_accuracy": 0.375}, "by_distance": [)"
      << R"({"distance": 8, "all": {"accuracy": 0.5, "token_accuracy": 0.5}}, )"
      << R"({"distance": 32, "all": {"accuracy": 0.25, "token_accuracy": 0.375}}]}})";
  const auto report = ws.succeeds("report out/l/");
  const std::string md = read_file(sweep_dir / "report.md").value();
  CHECK(md.find("| point | model.local.kind | step | loss | val_loss | val_ppl |") != std::string::npos);
  for (const char* point : {"00_kind-pbb", "01_kind-swa"}) {
    const std::string val_loss = last_metric(sweep_dir / point, "val_loss");
    CAPTURE(val_loss);
    REQUIRE(!val_loss.empty());
    CHECK(md.find(std::string("| ") + point + " | " + std::string(point).substr(8) + " | 5 | ") != std::string::npos);
    CHECK(md.find(" | " + val_loss + " | ") != std::string::npos);
  }
  CHECK(report.output.find("| 01_kind-swa |") != std::string::npos);
  CHECK(md.find("| retrieval_acc | retrieval_tok_acc |") != std::string::npos);
  CHECK(md.find(" | 0.2500 | 0.3750 |\n") != std::string::npos);
  CHECK(md.find(" | - | - |\n") != std::string::npos);  // the pbb run has no eval file
  // The ppl and lastword tasks' figures become columns too, before retrieval's.
  std::ofstream(sweep_dir / "00_kind-pbb/eval.json")
      << R"({"lastword": {"accuracy": 0.125}, "results": {"ppl": {"bits_per_byte,none": 1.5}}})";
  ws.succeeds("report out/l/");
  const std::string with_text = read_file(sweep_dir / "report.md").value();
  CAPTURE(with_text);
  CHECK(with_text.find("| heldout_bpb | lastword_acc | retrieval_acc | retrieval_tok_acc |") != std::string::npos);
  CHECK(with_text.find(" | 1.5000 | 0.1250 | - | - |\n") != std::string::npos);
  CHECK(with_text.find(" | - | - | 0.2500 | 0.3750 |\n") != std::string::npos);
  if (std::system("/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1") == 0) {
    CHECK(fs::exists(sweep_dir / "loss.png"));
    CHECK(fs::exists(sweep_dir / "retrieval.png"));  // accuracy by distance, from the eval report
    CHECK(md.find("![retrieval by distance](retrieval.png)") != std::string::npos);
  }
}

TEST_CASE("an MoE run's per-layer metrics are keys a sweep may name") {
  SweepWorkspace ws("moe_metrics");
  ws.succeeds("train tiny.yaml --run-dir moe --set model.moe.experts=2 --set model.moe.top_k=1 "
              "--set model.moe.expert_hidden=16");
  int moe_keys = 0;
  for (const std::string& key : metrics_keys(ws.dir / "moe")) {
    CAPTURE(key);
    CHECK(is_metrics_key(key));
    moe_keys += key.starts_with("moe.");
  }
  CHECK(moe_keys > 0);
  const std::string path = ws.sweep("m.yaml", "metrics: [loss, moe.1.load_max]\npoints: [{train.lr: 0.001}]\n");
  CHECK(load_sweep(path).metrics == std::vector<std::string>{"loss", "moe.1.load_max"});
}

TEST_CASE("sweep --set applies to every point after the file's set, and refuses a key the sweep varies") {
  SweepWorkspace ws("cli_set");
  const std::string path = ws.sweep("c.yaml", "name: c\ngrid: {model.local.kind: [pbb, swa]}\n"
                                              "set: {model.local.window: 8, train.steps: 5}\n");
  const auto r = ws.succeeds("sweep " + path + " --local --out out --set train.steps=3 --set train.eval_every=3");
  CHECK(r.output.find("every point also: train.steps=3 train.eval_every=3") != std::string::npos);
  for (const char* point : {"00_kind-pbb", "01_kind-swa"}) {
    CAPTURE(point);
    CHECK(fs::exists(ws.dir / "out/c" / point / "checkpoints/step_3.h5"));
    CHECK(read_file(ws.dir / "out/c" / point / "config.yaml").value().find("steps: 3") != std::string::npos);
  }
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"model.local.kind=swa", "sweep: --set model.local.kind: " + path + " varies model.local.kind in its grid"},
      {"model.local={kind: swa}", "sweep: --set model.local: " + path + " varies model.local.kind in its grid"},
      {"train.steps", "--set train.steps: expected KEY=VALUE"},
      {" model.local.kind =swa", "sweep: --set model.local.kind: " + path + " varies model.local.kind in its grid"}};
  for (const auto& [value, message] : refused) {
    CAPTURE(value);
    const auto bad = ws.run("sweep " + path + " --local --out bad --set '" + value + "'");
    CHECK(bad.exit_code != 0);
    CHECK(bad.output.find(message) != std::string::npos);
    CHECK_FALSE(fs::exists(ws.dir / "bad"));
  }
}

TEST_CASE("report sums up runs that differ only in the seed: mean and standard deviation, and differences paired by seed") {
  SweepWorkspace ws("seeds");
  const std::string path = ws.sweep("s.yaml", "name: s\npoints: [{model.local.kind: pbb}, {model.local.kind: swa}]\n"
                                              "set: {model.local.window: 8}\ngrid: {train.seed: [1, 2]}\n");
  ws.succeeds("sweep " + path + " --local --out out");
  ws.succeeds("report out/s");
  const fs::path dir = ws.dir / "out/s";
  const std::string md = read_file(dir / "report.md").value();
  CHECK(md.find("| model.local.kind | seeds | loss (mean ± sd) | val_loss (mean ± sd) |") != std::string::npos);
  for (const auto& [kind, first, second] : {std::tuple{"pbb", "00_kind-pbb_seed-1", "01_kind-pbb_seed-2"},
                                            std::tuple{"swa", "02_kind-swa_seed-1", "03_kind-swa_seed-2"}}) {
    CAPTURE(kind);
    const std::string a = last_metric(dir / first, "val_loss"), b = last_metric(dir / second, "val_loss");
    REQUIRE((!a.empty() && !b.empty()));
    const double mean = (std::stod(a) + std::stod(b)) / 2, sd = std::fabs(std::stod(a) - std::stod(b)) / std::sqrt(2.0);
    // The rows' values are printed to 4 decimals; the summary works from the unrounded ones.
    const size_t at = md.find(fmt::format("| {} | 2 | ", kind), md.find("Over seeds"));
    REQUIRE(at != std::string::npos);
    const std::string line = md.substr(at, md.find('\n', at) - at);
    CAPTURE(line);
    const size_t val = line.find(" | ", line.find(" ± ")) + 3;  // the column after loss
    CHECK(std::stod(line.substr(val)) == doctest::Approx(mean).epsilon(1e-3));
    CHECK(std::stod(line.substr(line.find(" ± ", val) + 4)) == doctest::Approx(sd).epsilon(0.05));
  }
  // Paired by seed: swa minus pbb seed by seed, then the mean and standard error of the two.
  auto val_loss = [&](const char* run) { return std::stod(last_metric(dir / run, "val_loss")); };
  const double d1 = val_loss("02_kind-swa_seed-1") - val_loss("00_kind-pbb_seed-1"),
               d2 = val_loss("03_kind-swa_seed-2") - val_loss("01_kind-pbb_seed-2");
  const size_t paired = md.find("Paired by seed");
  REQUIRE(paired != std::string::npos);
  CHECK(md.find("| model.local.kind | pairs | loss − first (mean ± se) | val_loss − first (mean ± se) |", paired) !=
        std::string::npos);
  CHECK(md.find("| pbb |", paired) == std::string::npos);  // the first group is what the others are measured from
  const size_t at = md.find("| swa | 2 | ", paired);
  REQUIRE(at != std::string::npos);
  std::string line = md.substr(at, md.find('\n', at) - at);
  CAPTURE(line);
  const bool val_loss_bold = line.substr(line.find(" | ", line.find(" ± ")) + 3).starts_with("**");
  std::erase(line, '*');  // a difference beyond 2 se is in bold
  const size_t val = line.find(" | ", line.find(" ± ")) + 3;  // the column after loss
  CHECK(std::fabs(std::stod(line.substr(val)) - (d1 + d2) / 2) < 1e-4);  // printed to 4 decimals
  CHECK(std::fabs(std::stod(line.substr(line.find(" ± ", val) + 4)) - std::fabs(d1 - d2) / 2) < 1e-4);
  // The same differences as data, and drawn (paired.png) where matplotlib is.
  const nlohmann::json data = nlohmann::json::parse(read_file(dir / "paired.json").value());
  CHECK(data["baseline"] == "pbb");
  REQUIRE(data["groups"].size() == 1);
  CHECK(data["groups"][0]["label"] == "swa");
  CHECK(data["groups"][0]["pairs"] == 2);
  const nlohmann::json& v = data["groups"][0]["columns"]["val_loss"];
  CHECK(v["n"] == 2);
  CHECK(std::fabs(v["mean"].get<double>() - (d1 + d2) / 2) < 1e-4);
  CHECK(std::fabs(v["se"].get<double>() - std::fabs(d1 - d2) / 2) < 1e-4);
  // In bold, and flagged in the data, when more than 2 se from zero: here |d1 + d2| / 2 > |d1 - d2|.
  CHECK(v["beyond_2se"] == (std::fabs(d1 + d2) / 2 > std::fabs(d1 - d2)));
  CHECK(val_loss_bold == v["beyond_2se"].get<bool>());
  if (std::system("/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1") == 0) {
    CHECK(fs::exists(dir / "paired.png"));
    CHECK(md.find("![differences from the first group, paired by seed](paired.png)") != std::string::npos);
  }
}

TEST_CASE("plot_loss.py draws one group's seeds as their mean over the steps all logged, in a min-max band") {
  if (std::system("/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1") != 0) return;
  // A stand-in axis records what draw() asks for; seed 2 logged one step more, which is left out.
  const std::string script =
      "import sys; sys.path.insert(0, sys.argv[1]); import plot_loss\n"
      "class Ax:\n"
      "  def plot(self, x, y, **k): print('line', list(x), list(y))\n"
      "  def fill_between(self, x, lo, hi, **k): print('band', list(x), list(lo), list(hi))\n"
      "plot_loss.draw(Ax(), [[(1, 2.0), (2, 4.0)], [(1, 4.0), (2, 3.0), (3, 9.0)]], 'C0', 'g', False)\n"
      "plot_loss.draw(Ax(), [[(1, 5.0)]], 'C1', 'alone', False)\n";
  const test::CommandResult r =
      test::run_command(fmt::format("/usr/bin/python3 -c \"{}\" {}/scripts", script, HYLO_SOURCE_DIR));
  CAPTURE(r.output);
  CHECK(r.exit_code == 0);
  CHECK(r.output == "line [1, 2] [3.0, 3.5]\nband [1, 2] [2.0, 3.0] [4.0, 4.0]\nline [1] [5.0]\n");
}

TEST_CASE("report --tune gives each group's best value of a key, by the mean over seeds, and flags the grid's edge") {
  SweepWorkspace ws("tune");
  // In 5 tiny steps lr 1e-4 barely moves the loss and lr 30 blows it up: 0.01 is best, inside the grid.
  const std::string sweep = "name: t\npoints: [{model.local.kind: pbb}, {model.local.kind: swa}]\n"
                            "set: {model.local.window: 8}\ngrid: {train.lr: [1.0e-4, 0.01, 30], train.seed: [1, 2]}\n";
  const std::string path = ws.sweep("t.yaml", sweep);
  ws.succeeds("sweep " + path + " --local --out out");
  const fs::path dir = ws.dir / "out/t";
  ws.succeeds("report out/t --tune train.lr");
  const std::string md = read_file(dir / "report.md").value();
  CHECK(md.find("| model.local.kind | best train.lr | val_loss | val_loss = 1.0e-4 | val_loss = 0.01 | val_loss = 30 |") !=
        std::string::npos);
  const nlohmann::json tuned = nlohmann::json::parse(read_file(dir / "tuned.json").value());
  CHECK(tuned["key"] == "train.lr");
  CHECK(tuned["by"] == "val_loss");
  REQUIRE(tuned["groups"].size() == 2);
  const std::vector<std::string> lrs{"1.0e-4", "0.01", "30"};
  for (size_t g = 0; g < 2; ++g) {
    const std::string kind = g == 0 ? "pbb" : "swa";
    CAPTURE(kind);
    // Points run kind-major, then lr, then seed: 6 per kind.
    std::vector<double> means;
    for (size_t l = 0; l < lrs.size(); ++l) {
      double mean = 0;
      for (size_t s = 0; s < 2; ++s) {
        const std::string run = fmt::format("{:02d}_kind-{}_lr-{}_seed-{}", g * 6 + l * 2 + s, kind, lrs[l], s + 1);
        const std::string v = last_metric(dir / run, "val_loss");
        REQUIRE_MESSAGE(!v.empty(), run);
        mean += std::stod(v) / 2;
      }
      CHECK(tuned["groups"][g]["scores"][lrs[l]].get<double>() == doctest::Approx(mean).epsilon(1e-3));
      means.push_back(mean);
    }
    REQUIRE((means[1] < means[0] && means[1] < means[2]));  // the premise above
    CHECK(tuned["groups"][g]["label"] == kind);
    CHECK(tuned["groups"][g]["set"] == nlohmann::json{{"model.local.kind", kind}});
    CHECK(tuned["groups"][g]["best"] == "0.01");
    CHECK(tuned["groups"][g]["edge"] == false);
    CHECK(md.find(fmt::format("| {} | 0.01 | ", kind)) != std::string::npos);
  }
  // Without lr 30 the same best lies at the grid's edge, and is flagged.
  const std::string narrow = ws.sweep("n.yaml", "name: n\npoints: [{model.local.kind: pbb}]\nset: {model.local.window: 8}\n"
                                                "grid: {train.lr: [1.0e-4, 0.01]}\n");
  ws.succeeds("sweep " + narrow + " --local --out out");
  ws.succeeds("report out/n --tune train.lr");
  CHECK(nlohmann::json::parse(read_file(ws.dir / "out/n/tuned.json").value())["groups"][0]["edge"] == true);
  CHECK(read_file(ws.dir / "out/n/report.md").value().find("| pbb | 0.01 (edge of the grid) |") != std::string::npos);
  // A later sweep takes each point's rate from tuned.json, by the group with the point's settings
  // (in its own order), and refuses a point that matches no group, sets the key itself, or whose
  // group's best lies at the edge of its grid.
  const std::string seeds = ws.sweep("s.yaml", "name: s\npoints: [{model.local.kind: swa}, {model.local.kind: pbb}]\n"
                                               "set: {model.local.window: 8}\n");
  const std::string tuned_flag = " --tuned " + (dir / "tuned.json").string();
  const auto planned = ws.succeeds("sweep " + seeds + " --local --out out --dry-run" + tuned_flag);
  CAPTURE(planned.output);
  CHECK(planned.output.find("00_kind-swa_lr-0.01") != std::string::npos);
  CHECK(planned.output.find("01_kind-pbb_lr-0.01") != std::string::npos);
  CHECK(planned.output.find("model.local.kind=pbb train.lr=0.01") != std::string::npos);
  for (const auto& [body, message] :
       {std::pair{"name: x\npoints: [{model.local.kind: swa}, {model.pattern: G}]\n",
                  "point 01_pattern-G (model.local.kind=(unset)) matches 0 of its groups, not one"},
        std::pair{"name: x\npoints: [{model.local.kind: swa}]\ngrid: {train.lr: [0.1]}\n",
                  "point 00_kind-swa_lr-0.1 sets train.lr itself"}}) {
    const auto bad = ws.run("sweep " + ws.sweep("x.yaml", body) + " --local --out out --dry-run" + tuned_flag);
    CHECK(bad.exit_code == 1);
    CHECK(bad.output.find(message) != std::string::npos);
  }
  // Two groups of the same settings (a tuned.json edited by hand) leave the point's rate ambiguous.
  std::ofstream(ws.dir / "twice.json") << R"({"key": "train.lr", "groups": [)"
                                          R"({"label": "swa", "set": {"model.local.kind": "swa"}, "best": "0.01"},)"
                                          R"({"label": "swa", "set": {"model.local.kind": "swa"}, "best": "0.1"}]})";
  const auto ambiguous = ws.run("sweep " + seeds + " --local --out out --dry-run --tuned twice.json");
  CHECK(ambiguous.exit_code == 1);
  CHECK(ambiguous.output.find("point 00_kind-swa (model.local.kind=swa) matches 2 of its groups, not one") !=
        std::string::npos);
  // A tuned.json of an older report (no group settings): one line naming the file, as for any bad file.
  std::ofstream(ws.dir / "old.json") << R"({"key": "train.lr", "groups": [{"label": "pbb", "best": "0.01"}]})";
  const auto old = ws.run("sweep " + seeds + " --local --out out --dry-run --tuned old.json");
  CHECK(old.exit_code == 1);
  CHECK(old.output.find("sweep: --tuned old.json: a group without 'set' and 'best'") != std::string::npos);
  const std::string pbb = ws.sweep("p.yaml", "name: p\npoints: [{model.local.kind: pbb}]\nset: {model.local.window: 8}\n");
  const auto edge = ws.run("sweep " + pbb + " --local --out out --dry-run --tuned " + (ws.dir / "out/n/tuned.json").string());
  CAPTURE(edge.output);
  CHECK(edge.exit_code == 1);
  CHECK(edge.output.find("train.lr's best (0.01) for model.local.kind=pbb is at the edge of the values tried: widen "
                         "that grid first") != std::string::npos);
  if (std::system("/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1") == 0) {
    CHECK(fs::exists(dir / "tune.png"));
    CHECK(md.find("![the metric against the tuned key, per group](tune.png)") != std::string::npos);
  }
  // --where keeps one value's runs: the tuned rate's, to pool with seeded runs at that rate.
  ws.succeeds("report out/t --where train.lr=0.01 --out at_best");
  const std::string at_best = read_file(ws.dir / "at_best/report.md").value();
  CAPTURE(at_best);
  CHECK(at_best.find("| 02_kind-pbb_lr-0.01_seed-1 |") != std::string::npos);
  CHECK(at_best.find("| 09_kind-swa_lr-0.01_seed-2 |") != std::string::npos);
  CHECK(at_best.find("_lr-30_") == std::string::npos);
  CHECK(at_best.find("_lr-1.0e-4_") == std::string::npos);
  CHECK(at_best.find("| swa | 0.01 | 2 | ") != std::string::npos);  // paired over both seeds
  // Given twice, --where keeps the runs that meet both.
  ws.succeeds("report out/t --where train.lr=0.01 --where model.local.kind=swa --out swa_at_best");
  const std::string swa_at_best = read_file(ws.dir / "swa_at_best/report.md").value();
  CAPTURE(swa_at_best);
  CHECK(swa_at_best.find("| 08_kind-swa_lr-0.01_seed-1 |") != std::string::npos);
  CHECK(swa_at_best.find("| 09_kind-swa_lr-0.01_seed-2 |") != std::string::npos);
  CHECK(swa_at_best.find("_kind-pbb_") == std::string::npos);
  CHECK(swa_at_best.find("_lr-30_") == std::string::npos);
  for (const auto& [args, message] :
       {std::pair{"--where train.lr", "report: --where 'train.lr': expected KEY=VALUE (e.g. train.lr=3.0e-3)"},
        std::pair{"--where train.warmup_steps=5",
                  "report: --where 'train.warmup_steps=5': the runs do not vary train.warmup_steps (they vary "
                  "model.local.kind, train.lr, train.seed)"},
        std::pair{"--where train.lr=0.02", "report: --where 'train.lr=0.02' keeps no run (train.lr is one of: 0.01, "
                                           "1.0e-4, 30)"}}) {
    const auto bad = ws.run(std::string("report out/t --out bad_where ") + args);
    CAPTURE(bad.output);
    CHECK(bad.exit_code == 1);
    CHECK(bad.output.find(message) != std::string::npos);
    CHECK_FALSE(fs::exists(ws.dir / "bad_where"));
  }
  // A key the runs do not vary, or a metric none has: one line naming it, and no report written over.
  for (const auto& [args, message] :
       {std::pair{"--tune train.warmup_steps", "report: --tune 'train.warmup_steps': the runs do not differ in it"},
        std::pair{"--tune train.lr --by retrieval_acc", "report: --by 'retrieval_acc': no finished run has a value of it"}}) {
    const auto bad = ws.run(std::string("report out/t ") + args);
    CHECK(bad.exit_code == 1);
    CHECK(bad.output.find(message) != std::string::npos);
    CHECK(read_file(dir / "report.md").value() == md);
  }
}

TEST_CASE("report combines one sweep run once per seed into several directories, seeds read from the runs") {
  SweepWorkspace ws("per_seed");
  const std::string path = ws.sweep("p.yaml", "name: p\npoints: [{model.local.kind: pbb}, {model.local.kind: swa}]\n"
                                              "set: {model.local.window: 8}\n");
  for (const char* seed : {"1", "2"})
    ws.succeeds(fmt::format("sweep {} --local --out s{} --set train.seed={}", path, seed, seed));
  // One directory alone: its runs share one seed, so no summary over seeds.
  ws.succeeds("report s1/p");
  const std::string alone = read_file(ws.dir / "s1/p/report.md").value();
  CHECK(alone.find("Over seeds") == std::string::npos);

  // Eval reports by distance: the summary over seeds pairs each distance's accuracy too.
  auto eval_report = [&](const char* run, double overall, double at8) {
    std::ofstream(ws.dir / run / "eval.json") << fmt::format(
        R"({{"retrieval": {{"overall": {{"accuracy": {0}, "token_accuracy": {0}}}, )"
        R"("by_distance": [{{"distance": 8, "all": {{"accuracy": {1}, "token_accuracy": {1}}}}}]}}}})",
        overall, at8);
  };
  eval_report("s1/p/00_kind-pbb", 0.5, 0.5);
  eval_report("s1/p/01_kind-swa", 0.25, 0.25);
  eval_report("s2/p/00_kind-pbb", 0.5, 0.75);
  eval_report("s2/p/01_kind-swa", 1.0, 0.25);
  const auto r = ws.succeeds("report s1/p s2/p/ --out pooled");
  const std::string md = read_file(ws.dir / "pooled/report.md").value();
  CAPTURE(md);
  CHECK(md.starts_with("# Sweep s1/p, s2/p\n"));
  CHECK(md.find("| point | model.local.kind | train.seed | step |") != std::string::npos);
  CHECK(md.find("| s2/p/01_kind-swa | swa | 2 |") != std::string::npos);
  // The combined report goes to --out only.
  CHECK(read_file(ws.dir / "s1/p/report.md").value() == alone);
  CHECK_FALSE(fs::exists(ws.dir / "s2/p/report.md"));
  auto val_loss = [&](const char* run) { return std::stod(last_metric(ws.dir / run, "val_loss")); };
  const double d1 = val_loss("s1/p/01_kind-swa") - val_loss("s1/p/00_kind-pbb"),
               d2 = val_loss("s2/p/01_kind-swa") - val_loss("s2/p/00_kind-pbb");
  REQUIRE(d1 != d2);  // the seeds changed the runs
  const size_t at = md.find("| swa | 2 | ", md.find("Paired by seed"));
  REQUIRE(at != std::string::npos);
  const std::string line = md.substr(at, md.find('\n', at) - at);
  CAPTURE(line);
  std::string plain = line;
  std::erase(plain, '*');  // a difference beyond 2 se is in bold
  const size_t val = plain.find(" | ", plain.find(" ± ")) + 3;  // the column after loss
  CHECK(std::fabs(std::stod(plain.substr(val)) - (d1 + d2) / 2) < 1e-4);  // printed to 4 decimals
  // swa − pbb at distance 8: −0.25 and −0.5, so −0.375 ± 0.125, the last column, 3 se from zero:
  // in bold. Overall: −0.25 and +0.5, so 0.125 ± 0.375, within 2 se: plain.
  CHECK(md.find("| retrieval_acc@8 − first (mean ± se) |") != std::string::npos);
  CHECK(line.ends_with(" | **-0.3750 ± 0.1250** |"));
  CHECK(line.find(" | 0.1250 ± 0.3750 | ") != std::string::npos);
  // --baseline pairs against another point: pbb − swa is the negation.
  ws.succeeds("report s1/p s2/p --out against_swa --baseline swa");
  const std::string against = read_file(ws.dir / "against_swa/report.md").value();
  const size_t at_pbb = against.find("| pbb | 2 | ", against.find("Paired by seed"));
  REQUIRE(at_pbb != std::string::npos);
  CHECK(against.substr(at_pbb, against.find('\n', at_pbb) - at_pbb).ends_with(" | **0.3750 ± 0.1250** |"));
  const auto no_match = ws.run("report s1/p s2/p --out bad --baseline full");
  CHECK(no_match.exit_code != 0);
  CHECK(no_match.output.find("report: --baseline 'full' matches 0 of the points (' pbb |', ' swa |'); it must name one") !=
        std::string::npos);
  const auto unpaired = ws.run("report s1/p --baseline swa");
  CHECK(unpaired.exit_code != 0);
  CHECK(unpaired.output.find("report: --baseline 'swa' needs runs that differ in train.seed") != std::string::npos);

  // A sweep of another name on the same base and settings pools with these (a point added later);
  // one with other settings does not, and several directories need --out.
  const std::string added = ws.sweep("p2.yaml", "name: p2\npoints: [{model.local.kind: full}]\nset: {model.local.window: 8}\n");
  ws.succeeds("sweep " + added + " --local --out s1 --set train.seed=1");
  ws.succeeds("report s1/p s2/p s1/p2 --out with_added");
  CHECK(read_file(ws.dir / "with_added/report.md").value().find("| s1/p2/00_kind-full | full | 1 |") != std::string::npos);
  const std::string other = ws.sweep("q.yaml", "name: q\npoints: [{model.local.kind: pbb}]\nset: {model.local.window: 4}\n");
  ws.succeeds("sweep " + other + " --local --out s3");
  const auto mixed = ws.run("report s1/p s3/q --out bad");
  CHECK(mixed.exit_code != 0);
  CHECK(mixed.output.find("report: s3/q ran on ") != std::string::npos);
  CHECK(mixed.output.find("model.local.window=4, but s1/p ran on ") != std::string::npos);
  CHECK(mixed.output.find("only runs of the same base and settings combine") != std::string::npos);
  const auto no_out = ws.run("report s1/p s2/p");
  CHECK(no_out.exit_code != 0);
  CHECK(no_out.output.find("report: 2 sweep directories need --out DIR for the combined report") != std::string::npos);
  CHECK_FALSE(fs::exists(ws.dir / "bad"));

  // The same seed's runs twice (a copy) would count twice: refused, naming both.
  fs::copy(ws.dir / "s1", ws.dir / "s1copy", fs::copy_options::recursive);
  const auto twice = ws.run("report s1/p s2/p s1copy/p --out dup");
  CHECK(twice.exit_code != 0);
  CHECK(twice.output.find("report: s1/p/00_kind-pbb and s1copy/p/00_kind-pbb are the same point with the same "
                          "seed (1): pool each seed once") != std::string::npos);
  CHECK_FALSE(fs::exists(ws.dir / "dup"));
  // So does the same settings' run of the same seed under another name (another sweep's order).
  const std::string reordered = ws.sweep("r.yaml", "name: r\npoints: [{model.local.kind: swa}, {model.local.kind: pbb}]\n"
                                                   "set: {model.local.window: 8}\n");
  ws.succeeds("sweep " + reordered + " --local --out s1 --set train.seed=1");
  const auto renamed = ws.run("report s1/p s2/p s1/r --out dup");
  CHECK(renamed.exit_code != 0);
  CHECK(renamed.output.find("report: s1/p/01_kind-swa and s1/r/00_kind-swa are the same point with the same seed (1)") !=
        std::string::npos);
  CHECK_FALSE(fs::exists(ws.dir / "dup"));
}

TEST_CASE("report pools one sweep run in parts, one directory a call: each point once, from where it ran") {
  SweepWorkspace ws("parts");
  const std::string path = ws.sweep("l.yaml", "name: l\ngrid: {train.lr: [0.001, 0.003, 0.01]}\n");
  ws.succeeds("sweep " + path + " --local --only 0 --out a");
  ws.succeeds("sweep " + path + " --local --only 1 --out b");
  REQUIRE_FALSE(fs::exists(ws.dir / "a/l/01_lr-0.003"));
  REQUIRE_FALSE(fs::exists(ws.dir / "b/l/00_lr-0.001"));
  ws.succeeds("report a/l b/l --out pooled --tune train.lr");
  const std::string md = read_file(ws.dir / "pooled/report.md").value();
  CAPTURE(md);
  // Each directory lists all three points; the pooled table has each once: 00 from a, 01 from b,
  // and 02, which neither ran, once (from the first directory) as pending.
  for (const char* row : {"| a/l/00_lr-0.001 | 0.001 | 5 |", "| b/l/01_lr-0.003 | 0.003 | 5 |",
                          "| a/l/02_lr-0.01 | 0.01 | - (pending) |"})
    CHECK(md.find(row) != std::string::npos);
  for (const char* row : {"| b/l/00_lr-0.001 |", "| a/l/01_lr-0.003 |", "| b/l/02_lr-0.01 |"})
    CHECK(md.find(row) == std::string::npos);
  CHECK(md.find("left out of any summary over seeds: a/l/02_lr-0.01 (pending)\n") != std::string::npos);
  // The two values tried, each from its own directory's run.
  const nlohmann::json tuned = nlohmann::json::parse(read_file(ws.dir / "pooled/tuned.json").value());
  CAPTURE(tuned.dump());
  REQUIRE(tuned.at("groups").size() == 1);
  const nlohmann::json& scores = tuned.at("groups").at(0).at("scores");
  REQUIRE(scores.size() == 2);
  CHECK(fmt::format("{:.4f}", scores.at("0.001").get<double>()) == last_metric(ws.dir / "a/l/00_lr-0.001", "val_loss"));
  CHECK(fmt::format("{:.4f}", scores.at("0.003").get<double>()) == last_metric(ws.dir / "b/l/01_lr-0.003", "val_loss"));
}

TEST_CASE("sweep --slurm writes an array job of the unfinished points, its resources from the resolved config, and runs nothing") {
  SweepWorkspace ws("slurm");
  const std::string path = ws.sweep("s.yaml", "name: s\npoints: [{model.local: {kind: swa, window: 8}}]\n"
                                              "grid: {train.lr: [0.001, 0.002, 0.003]}\n"
                                              "slurm: {partition: p1, time: \"01:00:00\", mem: 4G}\n");
  const fs::path dir = ws.dir / "out/s";
  // --dry-run shows the script and writes nothing.
  const auto dry = ws.succeeds("sweep " + path + " --slurm --dry-run --out out");
  CHECK(dry.output.find("#SBATCH --array=0-2\n") != std::string::npos);
  CHECK(dry.output.find("(not written: --dry-run)") != std::string::npos);
  CHECK_FALSE(fs::exists(dir));

  const auto r = ws.succeeds("sweep " + path + " --slurm --out out --partition p2 --qos high");
  CHECK(r.output.find("sbatch " + fs::canonical(dir).string() + "/submit.sbatch") != std::string::npos);
  const std::string script = read_file(dir / "submit.sbatch").value();
  for (const char* line : {"#SBATCH --array=0-2\n", "#SBATCH --ntasks=1\n", "#SBATCH --cpus-per-task=1\n",
                           "#SBATCH --mem=4G\n", "#SBATCH --time=01:00:00\n", "#SBATCH --partition=p2\n",
                           "#SBATCH --qos=high\n", "#SBATCH --requeue\n", "#SBATCH --signal=B:USR1@120\n",
                           "#SBATCH --open-mode=append\n", "srun --mpi=none --ntasks=1 --cpus-per-task=1 \"$HYLO\" train",
                           "if [ \"$status\" -eq 75 ]; then", "scontrol requeue \"$SLURM_JOB_ID\""})
    CHECK_MESSAGE(script.find(line) != std::string::npos, line);
  CHECK(script.find("gpus") == std::string::npos);  // a CPU config asks for no GPU
  CHECK(script.find("--account") == std::string::npos);
  CHECK(script.find("SLURM_ARRAY_TASK_ID + 1") != std::string::npos);
  const std::string points = read_file(dir / "points.txt").value();
  CHECK(std::count(points.begin(), points.end(), '\n') == 3);
  CHECK(points.find("--set 'model.local={kind: swa, window: 8}' --set 'train.lr=0.002'") != std::string::npos);
  CHECK(!fs::exists(dir / "00_local-kind-swa-window-8_lr-0.001"));
  const auto json = nlohmann::json::parse(read_file(dir / "sweep.json").value());
  CHECK_FALSE(json["points"][0].contains("status"));  // where a point stands is read from its run directory
  CHECK(json["points"][0]["steps"] == 5);
  // The script's own lines parse as shell, and each points.txt line evals back to its arguments.
  CHECK(test::run_command("bash -n " + (dir / "submit.sbatch").string()).exit_code == 0);
  const auto args = test::run_command("line=$(sed -n 2p " + (dir / "points.txt").string() +
                                      "); eval \"set -- $line\"; echo $#; echo \"$3\"");
  CHECK(args.output == "5\nmodel.local={kind: swa, window: 8}\n");

  // Point 1 run to the end (as its task would): regenerated, the array leaves it out.
  const auto one = test::run_command("cd " + ws.dir.string() + " && line=$(sed -n 2p out/s/points.txt); eval \"set -- "
                                     "$line\"; run_dir=$1; shift; " + ws.hylo + " train " + (ws.dir / "tiny.yaml").string() +
                                     " --run-dir \"$run_dir\" \"$@\"");
  REQUIRE_MESSAGE(one.exit_code == 0, one.output);
  const auto status = ws.succeeds("sweep status out/s");
  CHECK_MESSAGE(status.output.find("3 points: 1 finished, 2 pending") != std::string::npos, status.output);
  ws.succeeds("sweep " + path + " --slurm --out out");
  CHECK(read_file(dir / "submit.sbatch").value().find("#SBATCH --array=0,2\n") != std::string::npos);

  // On cuda: a GPU per process, 8 CPUs each by default; --cpus-per-task and --signal-seconds override.
  const auto cuda = ws.succeeds("sweep " + path + " --slurm --dry-run --out out2 --set device=cuda --signal-seconds 300");
  CHECK(cuda.output.find("#SBATCH --gpus-per-task=1\n#SBATCH --mem=4G") != std::string::npos);
  CHECK(cuda.output.find("#SBATCH --cpus-per-task=8\n") != std::string::npos);
  CHECK(cuda.output.find("#SBATCH --signal=B:USR1@300\n") != std::string::npos);

  // Bad input: one line each, nothing written.
  const auto spaced = ws.run("sweep " + path + " --slurm --out out3 --mem '4 G'");
  CHECK(spaced.exit_code != 0);
  CHECK(spaced.output.find("--mem '4 G' is not one word") != std::string::npos);
  const auto unknown = ws.run("sweep " + ws.sweep("u.yaml", "grid: {train.lr: [0.001]}\nslurm: {partion: x}\n") +
                              " --slurm --out out3");
  CHECK(unknown.output.find("slurm: unknown key 'partion' (did you mean 'partition'?)") != std::string::npos);
  const auto no_slurm = ws.run("sweep " + path + " --submit --out out3");
  CHECK(no_slurm.exit_code != 0);
  CHECK_FALSE(fs::exists(ws.dir / "out3"));
  const auto no_dir = ws.run("sweep status out/nope");
  CHECK(no_dir.output.find("sweep status: out/nope has no sweep.json") != std::string::npos);
}

TEST_CASE("the sweep files under experiments/ expand, and every point's config loads") {
  const fs::path source = HYLO_SOURCE_DIR, before = fs::current_path();
  fs::current_path(source);  // a sweep's base is relative to where hylo runs: the checkout
  int files = 0;
  for (const auto& entry : fs::directory_iterator(source / "experiments")) {
    if (entry.path().extension() != ".yaml") continue;
    CAPTURE(entry.path().string());
    const SweepSpec spec = load_sweep(entry.path().string());
    CHECK(!spec.points.empty());  // one point pools with another sweep's (hybrids-205m-retrieval-bridge)
    CHECK(check_sweep_configs(spec).size() == spec.points.size());
    ++files;
  }
  fs::current_path(before);
  CHECK(files >= 2);
}
