// DataLoader: determinism, disjoint covering rank slices, bit-identical resume from a cursor,
// prefetch that never changes a batch, and the retrieval mix's source spans. The synthetic shard
// holds token i at position i, so a token tells where it was read from.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "data/loader.h"

namespace fs = std::filesystem;
using namespace hylo::data;

namespace {

// doctest's Contains takes its own string type; this builds one from a std::string.
doctest::Contains has(const std::string& text) { return doctest::Contains(text.c_str()); }

constexpr uint64_t kTokens = 100003;  // prime: slices of unequal length

// Written once per test binary; token i == i (uint32 shard, vocab kTokens).
const std::string& position_shard() {
  static const std::string path = [] {
    std::string p = (fs::temp_directory_path() / ("hylo_loader_" + std::to_string(::getpid()) + ".bin")).string();
    std::vector<int32_t> tokens(kTokens);
    for (uint64_t i = 0; i < kTokens; ++i) tokens[i] = int32_t(i);
    write_shard(p, tokens, kTokens, 1, "split=test\n");
    std::atexit([] { fs::remove((fs::temp_directory_path() / ("hylo_loader_" + std::to_string(::getpid()) + ".bin"))); });
    return p;
  }();
  return path;
}

std::vector<std::vector<int32_t>> take(DataLoader& loader, int n) {
  std::vector<std::vector<int32_t>> batches;
  for (int i = 0; i < n; ++i) batches.push_back(loader.next());
  return batches;
}

}  // namespace

TEST_CASE("loader: batches are (B, T+1) runs of consecutive tokens, same seed same batches") {
  DataLoader a(position_shard(), 4, 64, 0, 1, 42), b(position_shard(), 4, 64, 0, 1, 42), c(position_shard(), 4, 64, 0, 1, 43);
  CHECK(a.vocab_size() == kTokens);
  const auto batches_a = take(a, 20), batches_b = take(b, 20), batches_c = take(c, 20);
  CHECK(batches_a == batches_b);
  CHECK(batches_a != batches_c);
  for (const auto& batch : batches_a) {
    REQUIRE(batch.size() == 4 * 65);
    for (int row = 0; row < 4; ++row)
      for (int t = 0; t < 64; ++t) CHECK(batch[row * 65 + t + 1] == batch[row * 65 + t] + 1);
  }
}

TEST_CASE("loader: rank slices are disjoint, cover the shard, and each rank reads only its own") {
  for (int world : {1, 2, 3, 8}) {
    CAPTURE(world);
    uint64_t covered = 0;
    std::set<int32_t> seen_starts;
    for (int rank = 0; rank < world; ++rank) {
      DataLoader loader(position_shard(), 8, 31, rank, world, 7);
      CHECK(loader.slice_begin() == covered);  // contiguous, in rank order: disjoint and covering
      covered = loader.slice_end();
      for (int step = 0; step < 30; ++step) {
        const auto batch = loader.next();
        for (int32_t token : batch) {
          CHECK(uint64_t(token) >= loader.slice_begin());
          CHECK(uint64_t(token) < loader.slice_end());
        }
        for (int row = 0; row < 8; ++row) seen_starts.insert(batch[row * 32]);
      }
    }
    CHECK(covered == kTokens);
    CHECK(seen_starts.size() > size_t(world) * 200);  // sampling spreads, not repeating one start
  }
}

TEST_CASE("loader: restoring a cursor in a new loader gives the identical following batches") {
  for (bool prefetch : {true, false}) {
    CAPTURE(prefetch);
    // 2 ranks, small batches: an epoch is a handful of batches, so the resume crosses epochs.
    DataLoader first(position_shard(), 16, 255, 1, 2, 2024, prefetch);
    const uint64_t per_epoch = first.batches_per_epoch();
    REQUIRE(per_epoch == (kTokens - kTokens / 2) / (16 * 256));
    take(first, int(per_epoch) + 3);
    const auto cursor = first.cursor();
    CHECK(cursor[1] == 1);  // epoch
    CHECK(cursor[2] == 3);  // position in the epoch
    const auto expected = take(first, 2 * int(per_epoch));

    DataLoader resumed(position_shard(), 16, 255, 1, 2, 2024, !prefetch);
    resumed.next();  // state before restore must not matter
    resumed.restore(cursor);
    CHECK(resumed.cursor() == cursor);
    CHECK(take(resumed, 2 * int(per_epoch)) == expected);
  }
}

TEST_CASE("loader: prefetch on and off give identical batches, also after restore") {
  DataLoader with(position_shard(), 3, 100, 2, 3, 5, true), without(position_shard(), 3, 100, 2, 3, 5, false);
  CHECK(take(with, 25) == take(without, 25));
  const auto cursor = with.cursor();
  CHECK(cursor == without.cursor());
  take(with, 4);
  with.restore(cursor);  // rewinds past a batch the worker already prepared
  CHECK(take(with, 10) == take(without, 10));
}

TEST_CASE("loader: a retrieval mix writes its planned source spans over the text, and nothing else") {
  constexpr int B = 8, T = 255, kRow = T + 1;
  DataLoader plain(position_shard(), B, T, 1, 2, 7), mixed(position_shard(), B, T, 1, 2, 7, true, 0.1);
  int64_t tokens = 0, covered = 0;
  for (uint64_t batch = 0; batch < 50; ++batch) {
    auto want = plain.next();
    const auto got = mixed.next();
    for (int r = 0; r < B; ++r) {
      const auto spans = mixed.source_spans(batch, r);
      CHECK(plain.source_spans(batch, r).empty());
      for (const SpanPlacement& p : spans) write_source_span(p.span, p.source, p.distance, want.data() + r * kRow);
      covered += int64_t(spans.size()) * 2 * kSpanTokens;
      tokens += kRow;
    }
    CHECK(got == want);
  }
  // About a tenth of the tokens (a few spans find no room).
  CHECK(double(covered) / double(tokens) > 0.085);
  CHECK(double(covered) / double(tokens) < 0.105);
}

TEST_CASE("loader: mixed batches are a function of their index: prefetch and restore give the same") {
  DataLoader with(position_shard(), 3, 100, 0, 1, 5, true, 0.3), without(position_shard(), 3, 100, 0, 1, 5, false, 0.3);
  const auto first = take(with, 12);
  CHECK(first == take(without, 12));
  const auto cursor = without.cursor();
  const auto next = take(without, 6);
  DataLoader resumed(position_shard(), 3, 100, 0, 1, 5, true, 0.3);
  resumed.restore(cursor);
  CHECK(take(resumed, 6) == next);
}

TEST_CASE("loader: mismatched cursors and impossible shapes are refused") {
  DataLoader loader(position_shard(), 2, 16, 0, 2, 1);
  take(loader, 3);
  auto cursor = loader.cursor();
  DataLoader other_rank(position_shard(), 2, 16, 1, 2, 1);
  CHECK_THROWS_WITH_AS(other_rank.restore(cursor), has("saved by rank 0 of 2, this loader is rank 1 of 2"),
                       hylo::Error);
  DataLoader other_seed(position_shard(), 2, 16, 0, 2, 9);
  CHECK_THROWS_WITH_AS(other_seed.restore(cursor), has("seed 1"), hylo::Error);
  DataLoader other_shape(position_shard(), 4, 16, 0, 2, 1);
  CHECK_THROWS_WITH_AS(other_shape.restore(cursor), has("batches of 2x16"), hylo::Error);
  cursor[3] += 1;
  CHECK_THROWS_WITH_AS(loader.restore(cursor), has("inconsistent"), hylo::Error);
  CHECK_THROWS_AS(loader.restore({}), hylo::Error);

  CHECK_THROWS_WITH_AS(DataLoader(position_shard(), 1, int(kTokens), 0, 1, 1),
                       has("fewer than one sequence"), hylo::Error);
  CHECK_THROWS_WITH_AS(DataLoader(position_shard(), 1, 8, 2, 2, 1), has("rank 2 is not in"), hylo::Error);
  CHECK_THROWS_WITH_AS(DataLoader(position_shard(), 1, 8, 0, 1, 1, true, 0.5),
                       has("sequences of 9 tokens cannot hold a source span and its repeat"), hylo::Error);
  CHECK_THROWS_WITH_AS(DataLoader("/nonexistent/train.bin", 1, 8, 0, 1, 1),
                       has("/nonexistent/train.bin: cannot open"), hylo::Error);
}

TEST_CASE("loader: check_vocab accepts a padded model vocab and refuses a smaller one") {
  const auto dir = fs::temp_directory_path() / ("hylo_vocab_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "gpt2.bin").string();
  write_shard(path, std::vector<int32_t>{1, 2, 50256}, 50257, 1, "");
  CHECK_NOTHROW(check_vocab(path, 50304));
  CHECK_NOTHROW(check_vocab(path, 50257));
  CHECK_THROWS_WITH_AS(check_vocab(path, 50000),
                       has(path + ": shard vocab 50257 exceeds the model's vocab 50000"), hylo::Error);
  fs::remove_all(dir);
}
