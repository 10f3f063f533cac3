// Source spans: a key K and a value V of common tokens written over text, then written again
// further on, so that a model which copies from context can predict V the second time. This is
// the controlled retrieval task of SPEC §5 (train/retrieval.h builds its fixed evaluation set from
// the val shard), and the same spans can be mixed into training (data.retrieval_mix, loader.h):
// with a few tens of millions of tokens no model here learned to copy from natural text alone.
//
//   position:  0 ..  s     s+4       s+8 ....... q     q+4     q+8 .. L
//              text    | K (4) | V (4) | text (d) | K (4) | V (4) | text
//
// K and V are 8 distinct ids drawn uniformly from a pool of common tokens: the shard's ids ranked
// by count (ties to the lower id, 50256 excluded), skipping the 100 most frequent (punctuation,
// "the", newlines: tokens a model predicts from the text alone) and keeping the next 2000, so
// every trained model has learned embeddings for them and a 4-token K is in practice unique.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "data/shard.h"

namespace hylo::data {

inline constexpr int kSpanKeyTokens = 4, kSpanValueTokens = 4;
inline constexpr int kSpanTokens = kSpanKeyTokens + kSpanValueTokens;

// The pool K and V are drawn from (see above), in rank order.
std::vector<int32_t> common_token_pool(const ShardReader& shard);

// K then V: kSpanTokens distinct ids of `pool` (a key token equal to a value token would make the
// task ambiguous).
std::array<int32_t, kSpanTokens> draw_source_span(Rng& rng, const std::vector<int32_t>& pool);

// Where a span and its repeat `distance` tokens after it go in a sequence of `length` tokens: the
// source's first position, uniform over where both fit.
int draw_source_position(Rng& rng, int length, int distance);

// One span of a training row: K V at `source`, again at source + kSpanTokens + distance.
struct SpanPlacement {
  int source = 0, distance = 0;
  std::array<int32_t, kSpanTokens> span{};
  bool operator==(const SpanPlacement&) const = default;
};

// The spans of one training row of `length` tokens under a retrieval mix: enough spans that they
// and their repeats cover about `mix` of the tokens (length * mix / 16 on average, the fraction
// drawn), each at a distance log-uniform over what fits (short and long distances taught alike),
// placed where it overlaps no earlier span of the row (a span that finds no room in a few tries
// is left out), with K V drawn from `pool`.
std::vector<SpanPlacement> plan_source_spans(Rng& rng, int length, double mix, const std::vector<int32_t>& pool);

// Writes `span` at `source` and again at `source + kSpanTokens + distance` of `ids` (which must
// hold both).
void write_source_span(const std::array<int32_t, kSpanTokens>& span, int source, int distance, int32_t* ids);

}  // namespace hylo::data
