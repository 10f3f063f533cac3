#include "data/source_span.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "data/tokenizer.h"

namespace hylo::data {

namespace {
constexpr int kPoolSkip = 100, kPoolSize = 2000;
constexpr int kPlacementTries = 8;
}  // namespace

std::vector<int32_t> common_token_pool(const ShardReader& shard) {
  std::vector<uint64_t> count(size_t(shard.vocab_size()), 0);
  for (uint64_t i = 0; i < shard.size(); ++i) ++count[shard.token(i)];
  std::vector<int32_t> ids;
  for (size_t id = 0; id < count.size(); ++id)
    if (count[id] > 0 && int32_t(id) != kEndOfTextId) ids.push_back(int32_t(id));
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return count[size_t(a)] > count[size_t(b)]; });
  // Small test shards have few distinct ids: skip a quarter of them at most.
  const size_t skip = std::min<size_t>(kPoolSkip, ids.size() / 4);
  const size_t take = std::min<size_t>(kPoolSize, ids.size() - skip);
  HYLO_CHECK(take >= size_t(kSpanTokens), "{}: only {} distinct token ids, too few for source-span keys and values",
             shard.path(), ids.size());
  return std::vector<int32_t>(ids.begin() + int64_t(skip), ids.begin() + int64_t(skip + take));
}

std::array<int32_t, kSpanTokens> draw_source_span(Rng& rng, const std::vector<int32_t>& pool) {
  std::array<int32_t, kSpanTokens> span{};
  for (int k = 0; k < kSpanTokens; ++k) {
    int32_t id;
    do id = pool[rng.below(pool.size())];
    while (std::find(span.begin(), span.begin() + k, id) != span.begin() + k);
    span[size_t(k)] = id;
  }
  return span;
}

int draw_source_position(Rng& rng, int length, int distance) {
  HYLO_CHECK(distance >= 0 && distance + 2 * kSpanTokens <= length,
             "source span: distance {} does not fit in {} tokens (max {})", distance, length, length - 2 * kSpanTokens);
  return int(rng.below(uint64_t(length - 2 * kSpanTokens - distance + 1)));
}

std::vector<SpanPlacement> plan_source_spans(Rng& rng, int length, double mix, const std::vector<int32_t>& pool) {
  const int max_distance = length - 2 * kSpanTokens;
  HYLO_CHECK(max_distance >= 0, "source spans: a row of {} tokens cannot hold a span and its repeat", length);
  const double expected = mix * length / (2 * kSpanTokens);
  const int count = int(expected) + (rng.uniform() < expected - std::floor(expected) ? 1 : 0);
  std::vector<char> taken(size_t(length), 0);
  const auto is_free = [&](int at) {
    return std::find(taken.begin() + at, taken.begin() + at + kSpanTokens, 1) == taken.begin() + at + kSpanTokens;
  };
  std::vector<SpanPlacement> spans;
  for (int i = 0; i < count; ++i) {
    for (int attempt = 0; attempt < kPlacementTries; ++attempt) {
      SpanPlacement p;
      p.distance = std::min(max_distance, int(std::exp(rng.uniform() * std::log(max_distance + 1.0))) - 1);
      p.source = draw_source_position(rng, length, p.distance);
      const int repeat = p.source + kSpanTokens + p.distance;
      if (!is_free(p.source) || !is_free(repeat)) continue;
      std::fill_n(&taken[size_t(p.source)], kSpanTokens, 1);
      std::fill_n(&taken[size_t(repeat)], kSpanTokens, 1);
      p.span = draw_source_span(rng, pool);
      spans.push_back(p);
      break;
    }
  }
  return spans;
}

void write_source_span(const std::array<int32_t, kSpanTokens>& span, int source, int distance, int32_t* ids) {
  for (int at : {source, source + kSpanTokens + distance}) std::copy(span.begin(), span.end(), ids + at);
}

}  // namespace hylo::data
