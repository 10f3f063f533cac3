// Source spans (data/source_span.h): the training mix's plan of spans per row, and the pool they
// draw from.
#include <doctest/doctest.h>

#include <set>

#include "data/source_span.h"

using namespace hylo;
using namespace hylo::data;

TEST_CASE("source spans: a row's plan covers about the mix's share, in bounds, without overlaps") {
  std::vector<int32_t> pool;
  for (int32_t id = 100; id < 2100; ++id) pool.push_back(id);
  constexpr int kLength = 1025;
  for (double mix : {0.02, 0.1, 0.3}) {
    CAPTURE(mix);
    int64_t covered = 0;
    std::set<int> distances;
    constexpr int kRows = 200;
    for (int row = 0; row < kRows; ++row) {
      Rng rng{3, 9, uint64_t(row) << 20};
      const auto spans = plan_source_spans(rng, kLength, mix, pool);
      Rng again{3, 9, uint64_t(row) << 20};
      CHECK(plan_source_spans(again, kLength, mix, pool) == spans);  // a function of the stream's position
      std::vector<int> use(kLength, 0);
      for (const SpanPlacement& p : spans) {
        const int repeat = p.source + kSpanTokens + p.distance;
        REQUIRE(p.source >= 0);
        REQUIRE(repeat + kSpanTokens <= kLength);
        for (int k = 0; k < kSpanTokens; ++k) {
          ++use[size_t(p.source + k)];
          ++use[size_t(repeat + k)];
        }
        CHECK(std::set<int32_t>(p.span.begin(), p.span.end()).size() == size_t(kSpanTokens));
        for (int32_t id : p.span) CHECK((id >= 100 && id < 2100));
        distances.insert(p.distance);
        covered += 2 * kSpanTokens;
      }
      for (int u : use) CHECK(u <= 1);
    }
    const double share = double(covered) / (double(kRows) * kLength);
    CHECK(share > 0.9 * mix);
    CHECK(share < 1.1 * mix);
    // Log-uniform distances: short and long ones both.
    CHECK(*distances.begin() < 8);
    CHECK(*distances.rbegin() > kLength / 2);
  }
  Rng rng{1, 1, 0};
  CHECK(plan_source_spans(rng, kLength, 0.0, pool).empty());
  CHECK_THROWS(plan_source_spans(rng, 2 * kSpanTokens - 1, 0.1, pool));
}

TEST_CASE("source spans: written at the source and again after the distance") {
  std::vector<int32_t> ids(40, -1);
  std::array<int32_t, kSpanTokens> span{1, 2, 3, 4, 5, 6, 7, 8};
  write_source_span(span, 3, 5, ids.data());
  for (int k = 0; k < kSpanTokens; ++k) {
    CHECK(ids[size_t(3 + k)] == span[size_t(k)]);
    CHECK(ids[size_t(3 + kSpanTokens + 5 + k)] == span[size_t(k)]);
  }
  CHECK(ids[2] == -1);
  CHECK(ids[11] == -1);
  CHECK(ids[15] == -1);
  CHECK(ids[24] == -1);
}
