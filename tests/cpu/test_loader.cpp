// DataLoader: determinism, disjoint covering rank slices, bit-identical resume from a cursor,
// prefetch that never changes a batch, the retrieval mix's source spans, lists, globs and weighted
// mixtures of shards, old cursors and foreign token files. The synthetic shard
// holds token i at position i, so a token tells where it was read from.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
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

namespace {

// Shards of consecutive ids: shard s holds ids [first + s*n, first + (s+1)*n), so a token says
// which dataset and which position it came from.
std::vector<std::string> numbered_shards(const fs::path& dir, const std::string& stem, int count, uint64_t n,
                                         int32_t first) {
  fs::create_directories(dir);
  std::vector<std::string> paths;
  for (int s = 0; s < count; ++s) {
    std::vector<int32_t> tokens(n);
    for (uint64_t i = 0; i < n; ++i) tokens[i] = first + int32_t(uint64_t(s) * n + i);
    paths.push_back((dir / fmt::format("{}_{:06d}.bin", stem, s)).string());
    write_shard(paths.back(), tokens, 1 << 20, 1, "");
  }
  return paths;
}

}  // namespace

TEST_CASE("loader: a list or a glob of shards reads as one stream, and rank slices cover it across files") {
  const auto dir = fs::temp_directory_path() / ("hylo_list_" + std::to_string(::getpid()));
  const auto paths = numbered_shards(dir, "train", 12, 5003, 0);
  const uint64_t total = 12 * 5003;
  DataLoader listed({DatasetSpec{paths}}, 4, 300, 0, 1, 3), globbed({DatasetSpec{{(dir / "train_*.bin").string()}}}, 4, 300, 0, 1, 3);
  CHECK(listed.dataset(0).size() == total);
  CHECK(listed.dataset(0).shards().size() == 12);
  CHECK(take(listed, 10) == take(globbed, 10));
  for (int world : {1, 3}) {
    uint64_t covered = 0;
    for (int rank = 0; rank < world; ++rank) {
      DataLoader loader({DatasetSpec{paths}}, 8, 700, rank, world, 11);
      CHECK(loader.slice_begin() == covered);
      covered = loader.slice_end();
      bool crossed = false;  // some row runs from one file into the next, seamlessly
      for (int step = 0; step < 40; ++step) {
        const auto batch = loader.next();
        for (int row = 0; row < 8; ++row) {
          const int32_t* r = batch.data() + row * 701;
          CHECK(uint64_t(r[0]) >= loader.slice_begin());
          CHECK(uint64_t(r[700]) < loader.slice_end());
          for (int t = 0; t < 700; ++t) CHECK(r[t + 1] == r[t] + 1);
          crossed |= r[0] / 5003 != r[700] / 5003;
        }
      }
      CHECK(crossed);
    }
    CHECK(covered == total);
  }
  CHECK_THROWS_WITH_AS(DataLoader({DatasetSpec{{(dir / "nothing_*.bin").string()}}}, 1, 8, 0, 1, 1, true, 0, "data.val"),
                       has("data.val: '" + (dir / "nothing_*.bin").string() + "' matches no file"), hylo::Error);
  fs::remove_all(dir);
}

TEST_CASE("loader: a two-dataset mixture over 10k sequences is within 1% of its weights, and resume is bit-exact") {
  const auto dir = fs::temp_directory_path() / ("hylo_mix_" + std::to_string(::getpid()));
  const auto web = numbered_shards(dir, "web", 10, 20011, 0);               // ids below 200110
  const auto books = numbered_shards(dir / "books", "books", 3, 9001, 500000);  // ids from 500000
  const std::vector<DatasetSpec> mix = {{web, 3}, {books, 1}};
  constexpr int B = 16, T = 63;
  for (int rank = 0; rank < 2; ++rank) {
    DataLoader loader(mix, B, T, rank, 2, 77, true, 0, "data.mix");
    uint64_t from_books = 0, rows = 0;
    for (int k = 0; k < 10000 / B + 1; ++k) {
      const auto batch = loader.next();
      for (int r = 0; r < B; ++r) {
        const bool book = batch[size_t(r) * (T + 1)] >= 500000;
        CHECK(book == (loader.dataset_of_row(uint64_t(k), r) == 1));
        const auto& ds = loader.dataset(book ? 1 : 0);
        const int64_t local = batch[size_t(r) * (T + 1)] - (book ? 500000 : 0);
        CHECK(uint64_t(local) >= loader.slice_begin(book ? 1 : 0));
        CHECK(uint64_t(local + T) < loader.slice_end(book ? 1 : 0));
        CHECK(ds.size() > 0);
        from_books += book;
        ++rows;
      }
    }
    CHECK(rows >= 10000);
    const double share = double(from_books) / double(rows);
    CHECK(share > 0.25 - 0.01);
    CHECK(share < 0.25 + 0.01);
  }
  // Bit-exact resume across the shard lists, with and without prefetch.
  DataLoader first(mix, B, T, 1, 2, 77, true, 0, "data.mix");
  take(first, 37);
  const auto cursor = first.cursor();
  CHECK(cursor.size() == 12);
  const auto expected = take(first, 50);
  DataLoader resumed(mix, B, T, 1, 2, 77, false, 0, "data.mix");
  resumed.restore(cursor);
  CHECK(take(resumed, 50) == expected);
  // Other weights, or the lists in another order, are other data: refused by the fingerprint.
  DataLoader reweighted({{web, 2}, {books, 1}}, B, T, 1, 2, 77, false, 0, "data.mix");
  CHECK_THROWS_WITH_AS(reweighted.restore(cursor), has("other token files or weights"), hylo::Error);
  DataLoader one({{web}}, B, T, 1, 2, 77, false);
  CHECK_THROWS_WITH_AS(one.restore(cursor), has("saved for 2 dataset(s)"), hylo::Error);
  fs::remove_all(dir);
}

TEST_CASE("loader: a version-1 cursor of the single-shard loader still restores, and on a list it is refused clearly") {
  DataLoader loader(position_shard(), 4, 64, 0, 1, 42, false);
  take(loader, 9);
  auto cursor = loader.cursor();
  const auto expected = take(loader, 5);
  // What the single-shard loader saved: version 1, no dataset count or fingerprint.
  std::vector<uint64_t> v1(cursor.begin(), cursor.begin() + 10);
  v1[0] = 1;
  DataLoader resumed(position_shard(), 4, 64, 0, 1, 42, true);
  resumed.restore(v1);
  CHECK(take(resumed, 5) == expected);
  DataLoader listed({DatasetSpec{{position_shard(), position_shard()}}}, 4, 64, 0, 1, 42, false);
  CHECK_THROWS_WITH_AS(listed.restore(v1), has("data cursor (version 1) was saved for one shard of 100003 tokens"),
                       hylo::Error);
}

TEST_CASE("loader: llm.c shards and nanoGPT's raw train.bin train directly") {
  const auto dir = fs::temp_directory_path() / ("hylo_foreign_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::vector<uint16_t> tokens(20000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = uint16_t(i % 50257);
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520, header[1] = 1, header[2] = int32_t(tokens.size());
  {
    std::ofstream out(dir / "fineweb_train_000001.bin", std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), 1024);
    out.write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * 2));
    std::ofstream raw(dir / "train.bin", std::ios::binary);
    raw.write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * 2));
  }
  DataLoader llmc({DatasetSpec{{(dir / "fineweb_train_*.bin").string()}}}, 2, 32, 0, 1, 5, false);
  DataLoader nanogpt({DatasetSpec{{(dir / "train.bin").string()}, 1, ShardFormat::nanogpt}}, 2, 32, 0, 1, 5, false);
  CHECK(llmc.vocab_size() == 50257);
  CHECK(take(llmc, 5) == take(nanogpt, 5));
  CHECK_NOTHROW(check_vocab(llmc, 50304));
  CHECK_THROWS_WITH_AS(check_vocab(llmc, 32000), has("fineweb_train_000001.bin: shard vocab 50257 exceeds the model's vocab 32000"),
                       hylo::Error);
  fs::remove_all(dir);
}
