// `hylo train` on users' data (issue 34): a weighted mixture of two shard lists (ten files and
// three) resumes bit-exact, and bad data is refused at launch, before step 1, naming the file,
// with nothing written.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "run_command.h"
#include "training_workspace.h"

using namespace hylo;
namespace fs = std::filesystem;

namespace {

// `count` shards name_000000.bin, ... of `tokens` each in dir/sub.
std::string write_list(const test::TrainingWorkspace& ws, const std::string& sub, int count, int tokens,
                       uint64_t seed) {
  fs::create_directories(ws.dir / sub);
  for (int s = 0; s < count; ++s) ws.write_tokens(fmt::format("{}/part_{:06d}.bin", sub, s), tokens, seed + uint64_t(s));
  return (ws.dir / sub / "part_*.bin").string();
}

}  // namespace

TEST_CASE("a two-dataset mixture over ten shards and three resumes bit-exact through the CLI") {
  test::TrainingWorkspace ws("data_mix");
  const std::string web = write_list(ws, "web", 10, 1500, 10), books = write_list(ws, "books", 3, 2500, 50);
  // data.train= : the workspace's config names a training shard, which a mixture replaces.
  const std::string mix =
      fmt::format("--set data.train= --set 'data.mix=[{{path: {}, weight: 3}}, {{path: [{}], weight: 1}}]'", web, books);
  const auto straight = test::run_command(ws.train("straight", mix));
  REQUIRE_MESSAGE(straight.exit_code == 0, straight.output);
  // The launch says what the run will read of each dataset against its weight, files counted.
  const size_t said = straight.output.find("data.mix over the run's ");
  REQUIRE_MESSAGE(said != std::string::npos, straight.output);
  const std::string line = straight.output.substr(said, straight.output.find('\n', said) - said);
  CAPTURE(line);
  const size_t web_at = line.find(web + " "), books_at = line.find(books + " ");
  REQUIRE(web_at != std::string::npos);
  REQUIRE(books_at != std::string::npos);
  const double web_share = std::stod(line.substr(web_at + web.size() + 1)),
               books_share = std::stod(line.substr(books_at + books.size() + 1));
  CHECK(web_share + books_share == doctest::Approx(100).epsilon(1e-3));
  CHECK(std::abs(web_share - 75) < 1);
  CHECK(line.find("(weight 3: 75.00%; 10 files)") != std::string::npos);
  CHECK(line.find("(weight 1: 25.00%; 3 files)") != std::string::npos);
  const auto first = test::run_command(ws.train("split", mix + " --set train.checkpoint_every=20 --stop-at 20"));
  REQUIRE_MESSAGE(first.exit_code == 0, first.output);
  const auto second = test::run_command(ws.train("split", mix + " --set train.checkpoint_every=20 --resume auto"));
  REQUIRE_MESSAGE(second.exit_code == 0, second.output);
  const auto a = ws.loss_rows("straight"), b = ws.loss_rows("split");
  REQUIRE(a.size() == 40);
  CHECK(a == b);
  // The same run on another weighting is other data: its checkpoint is refused for it.
  const std::string reweighted =
      fmt::format("--set data.train= --set 'data.mix=[{{path: {}, weight: 1}}, {{path: {}, weight: 1}}]'", web, books);
  const auto other = test::run_command(ws.train("split", reweighted + " --set train.checkpoint_every=20 --resume auto"));
  CHECK(other.exit_code != 0);
  CHECK(other.output.find("other token files or weights") != std::string::npos);
}

TEST_CASE("bad training data is refused at launch naming the file, with no run directory written") {
  test::TrainingWorkspace ws("data_checks");
  ws.write_tokens("short_val.bin", 20, 3);  // fewer than one sequence of seq_len + 1 = 25
  std::vector<uint16_t> raw(3000, 11);  // nanoGPT's raw uint16 with one id beyond GPT-2's vocab
  raw[7] = 60000;
  std::ofstream(ws.dir / "raw.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(raw.data()), std::streamsize(raw.size() * 2));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--set data.val=" + (ws.dir / "short_val.bin").string(),
       "data.val: rank 0 of 1 gets 20 tokens of " + (ws.dir / "short_val.bin").string()},
      {"--set 'data.train=" + (ws.dir / "nothing_*.bin").string() + "'",
       "data.train: '" + (ws.dir / "nothing_*.bin").string() + "' matches no file"},
      {"--set data.train=" + (ws.dir / "raw.bin").string() + " --set data.format=nanogpt",
       (ws.dir / "raw.bin").string() + ": token id 60000 at position 7 is outside the shard's vocab [0, 50257)"},
  };
  for (const auto& [flags, expected] : cases) {
    CAPTURE(flags);
    const auto r = test::run_command(ws.train("refused", flags));
    CHECK(r.exit_code != 0);
    CHECK_MESSAGE(r.output.find(expected) != std::string::npos, r.output);
    CHECK(!fs::exists(ws.dir / "refused"));
  }
}
