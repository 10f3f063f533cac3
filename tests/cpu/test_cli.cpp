// The command line itself (cli/options.h, cli/main.cpp): every command answers --help, hylo
// --version names the version and the revision, --flag=value reads as --flag value, an unknown
// command or flag gets a did-you-mean, and the exit code tells a usage error (2) from a runtime
// error (1).
#include <doctest/doctest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "core/revision.h"
#include "run_command.h"

namespace {

const std::string kHylo = std::string(HYLO_BINARY_DIR) + "/hylo";
const std::string kTiny = std::string(HYLO_SOURCE_DIR) + "/configs/tiny.yaml";

hylo::test::CommandResult hylo_run(const std::string& args) { return hylo::test::run_command(kHylo + " " + args); }

// The names under "Subcommands:" in a --help text.
std::vector<std::string> subcommands(const std::string& help) {
  std::vector<std::string> names;
  std::istringstream lines(help);
  bool listed = false;
  for (std::string line; std::getline(lines, line);) {
    if (line == "Subcommands:") listed = true;
    else if (listed && line.starts_with("  ") && line[2] != ' ') names.push_back(line.substr(2, line.find(' ', 2) - 2));
    else if (listed && line.empty()) listed = false;
  }
  return names;
}

bool one_line(const std::string& output) { return std::count(output.begin(), output.end(), '\n') == 1; }

}  // namespace

// cuBLAS is opened at the first CUDA GEMM, not linked (core/cuda/cublas_library.h): linking it cost
// every command ~0.35 s and ~200 MB before main. The executable must not name it.
TEST_CASE("hylo starts without cuBLAS: the executable does not link it") {
  const auto libraries = hylo::test::run_command("ldd " + kHylo);
  REQUIRE_MESSAGE(libraries.exit_code == 0, libraries.output);
  CHECK(libraries.output.find("libc.so") != std::string::npos);  // ldd did list the libraries
  CHECK_MESSAGE(libraries.output.find("libcublas") == std::string::npos, libraries.output);
}

TEST_CASE("every command and subcommand answers --help and -h with its usage, exit 0") {
  std::vector<std::string> commands = {""};
  for (size_t i = 0; i < commands.size(); ++i) {  // grows as the help texts name subcommands
    const std::string command = commands[i];  // a copy: the list grows below
    CAPTURE(command);
    const auto help = hylo_run(command + " --help");
    CHECK(help.exit_code == 0);
    CHECK(help.output.find("Usage: hylo" + (command.empty() ? "" : " " + command)) != std::string::npos);
    CHECK(hylo_run(command + " -h").output == help.output);
    for (const std::string& sub : subcommands(help.output)) commands.push_back(command.empty() ? sub : command + " " + sub);
  }
  for (const char* command : {"train", "eval", "params", "generate", "export", "data prepare", "data encode",
                              "data decode", "data inspect", "data bench", "sweep", "report", "bench attention",
                              "bench decode", "bench train", "bench moe"})
    CHECK_MESSAGE(std::find(commands.begin(), commands.end(), command) != commands.end(), command);
  // Defaults are part of the usage.
  const std::string bench_train = hylo_run("bench train --help").output;
  for (const char* flag : {"--steps INT=10", "--warmup INT=3", "--set KEY=VALUE", "--json TEXT", "--expert-gemm TEXT"})
    CHECK_MESSAGE(bench_train.find(flag) != std::string::npos, flag << " in " << bench_train);
  CHECK(hylo_run("bench decode --help").output.find("--batch INT=[16,64]") != std::string::npos);
  CHECK(hylo_run("data prepare --help").output.find("--out TEXT=data/tokens") != std::string::npos);
}

TEST_CASE("hylo --version prints the project version and the git revision") {
  const auto r = hylo_run("--version");
  CHECK(r.exit_code == 0);
  // The revision is the build's (`git describe`): hylo and this test may be built a commit apart.
  const std::string prefix = std::string("hylo ") + hylo::hylo_version() + " (git ";
  CHECK(r.output.starts_with(prefix));
  CHECK(r.output.ends_with(")\n"));
  CHECK(r.output.size() > prefix.size() + 2);
  CHECK(std::string(hylo::hylo_version()).find('.') != std::string::npos);
}

TEST_CASE("--flag=value reads as --flag value, and --set repeats") {
  const auto spaced = hylo_run("params " + kTiny + " --ranks 2 --set train.expert_parallel=1 --set train.zero1=true");
  const auto joined = hylo_run("params " + kTiny + " --ranks=2 --set=train.expert_parallel=1 --set=train.zero1=true");
  REQUIRE_MESSAGE(spaced.exit_code == 0, spaced.output);
  CHECK(joined.exit_code == 0);
  CHECK(joined.output == spaced.output);
  CHECK(spaced.output.find("per rank (2 ranks under ZeRO-1)") != std::string::npos);
  // A config path after a --set is still the config, not a second value of it.
  CHECK(hylo_run("params --set train.zero1=true " + kTiny).exit_code == 0);
  const auto bad = hylo_run("params " + kTiny + " --ranks=many");
  CHECK(bad.exit_code == 2);
  CHECK(bad.output == "hylo: error: params: --ranks needs a number, got 'many'\n");
}

TEST_CASE("an unknown command or flag is a usage error (exit 2) with a did-you-mean") {
  const auto command = hylo_run("trian " + kTiny);
  CHECK(command.exit_code == 2);
  CHECK(command.output == "hylo: error: unknown command 'trian' (did you mean 'train'?)\n");
  const auto flag = hylo_run("train " + kTiny + " --overwrit");
  CHECK(flag.exit_code == 2);
  CHECK(flag.output == "hylo: error: train: unknown flag '--overwrit' (did you mean '--overwrite'?)\n");
  const auto joined = hylo_run("bench decode --batches=16");
  CHECK(joined.exit_code == 2);
  CHECK(joined.output == "hylo: error: bench decode: unknown flag '--batches' (did you mean '--batch'?)\n");
  const auto nested = hylo_run("data prepar");
  CHECK(nested.exit_code == 2);
  CHECK(nested.output == "hylo: error: data: unknown command 'prepar' (did you mean 'prepare'?)\n");
  const auto far = hylo_run("frobnicate");
  CHECK(far.exit_code == 2);
  CHECK(one_line(far.output));
  CHECK(far.output.find("unknown command 'frobnicate' (commands: train, eval,") != std::string::npos);
  const auto extra = hylo_run("params " + kTiny + " more");
  CHECK(extra.exit_code == 2);
  CHECK(extra.output == "hylo: error: params: unexpected argument 'more'\n");
  const auto missing = hylo_run("params");
  CHECK(missing.exit_code == 2);
  CHECK(missing.output == "hylo: error: params: CONFIG is required\n");
}

TEST_CASE("no command, or a group without its subcommand, prints the usage on stderr and exits 2") {
  const auto none = hylo::test::run_command("(" + kHylo + " 2>/dev/null)");
  CHECK(none.exit_code == 2);
  CHECK(none.output.empty());
  const auto usage = hylo_run("");
  CHECK(usage.output.find("Usage: hylo [OPTIONS] [SUBCOMMAND]") != std::string::npos);
  for (const char* group : {"data", "bench"}) {
    CAPTURE(group);
    const auto r = hylo_run(group);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find(std::string("Usage: hylo ") + group) != std::string::npos);
  }
}

TEST_CASE("a runtime error exits 1 with one line naming what failed") {
  const auto r = hylo_run("train /nonexistent/hylo.yaml --run-dir /nonexistent/run");
  CHECK(r.exit_code == 1);
  CHECK(one_line(r.output));
  CHECK(r.output.starts_with("hylo: error: /nonexistent/hylo.yaml: "));
}
