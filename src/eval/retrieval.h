// Controlled source retrieval (SPEC §5): can the model copy a value it saw d tokens ago?
//
// Each sequence is L tokens of held-out text (a window of the val shard without a document
// separator) with a source span K V written at s and again at the query q = s + 8 + d
// (data/source_span.h): d counts the text tokens between the source's last V token and the query.
// The model reads the whole sequence (teacher forcing); the logits at q+3 .. q+6 predict V. Score:
// exact match of all four argmaxes (= greedy decoding after the query reproduces V, see
// train/span_score.h), the per-token hit rate, and the mean log-prob of V's tokens. K and V come
// from the val shard's common-token pool. Everything depends only on (val shard, seed, L,
// distances, N): every model sees the same sequences, whatever its architecture.
//
// Reporting by the query's block offset r = q mod b: "near" r in [0, w) (the query sits in a PBB
// layer's bridge, where the previous block is visible in full), "far" r in [w, b). b, w come from
// the config's local layer when it is pbb; otherwise one bucket.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "data/shard.h"
#include "data/source_span.h"
#include "nn/transformer.h"
#include "config/config.h"
#include "eval/span_score.h"

namespace hylo {

struct RetrievalOptions {
  int seq_len = 0;         // L
  int per_distance = 64;   // N sequences per distance
  uint64_t seed = 0x5e7a;  // the set's seed; leave it alone to compare with earlier runs
  std::vector<int> distances;  // empty: default_retrieval_distances(L)
  int batch = 8;
};

// 8, 32, 128, 512, 2048, ... (x4) while d <= L - 16, then the largest distance that fits,
// L - 16, if it is not already there: with short L the ladder alone would stop well short of L.
std::vector<int> default_retrieval_distances(int seq_len);

struct RetrievalItem {
  int distance = 0;
  int source = 0;  // s: position of the source's first K token
  int query = 0;   // q = s + 8 + distance: position of the repeated K's first token
  std::array<int32_t, data::kSpanKeyTokens> key{};
  std::array<int32_t, data::kSpanValueTokens> value{};
  std::vector<int32_t> ids;  // (L)
};

// N items per distance, distance by distance. Item i of distance d comes from the Philox stream
// (seed, d), so asking for fewer items gives a prefix of the same set.
std::vector<RetrievalItem> build_retrieval_set(const data::ShardReader& val, const RetrievalOptions& options);

struct RetrievalBucket {
  int n = 0, exact = 0, correct_tokens = 0;
  double logprob = 0;  // summed over all value tokens
  void add(const SpanScore& s);
  double accuracy() const { return n ? double(exact) / n : 0.0; }
  double token_accuracy() const { return n ? double(correct_tokens) / (double(n) * data::kSpanValueTokens) : 0.0; }
  double mean_logprob() const { return n ? logprob / (double(n) * data::kSpanValueTokens) : 0.0; }
};

struct RetrievalRow {
  int distance = 0;
  RetrievalBucket all, near, far;  // near/far only filled when block > 0
};

struct RetrievalResult {
  int seq_len = 0, per_distance = 0;
  uint64_t seed = 0;
  int block = 0, bridge = 0;  // 0: the local layer is not pbb, one bucket
  std::vector<RetrievalRow> rows;
  RetrievalBucket overall, near, far;  // over all distances
  std::string table() const;
  nlohmann::ordered_json json() const;  // NaN (no items) as null
};

// Groups per-item scores (scores[i] belongs to items[i]) by distance and block offset.
RetrievalResult tally_retrieval(const std::vector<RetrievalItem>& items, const std::vector<SpanScore>& scores,
                                const RetrievalOptions& options, int block, int bridge);

// The task on config.data.val, built once (the shard read, its token pool counted, the items
// drawn) and scored as often as asked: `hylo eval` scores it once, the trainer at every in-loop
// evaluation. options.seq_len 0 means config.train.seq_len.
class RetrievalTask {
 public:
  RetrievalTask(const Config& config, RetrievalOptions options);
  RetrievalResult score(const Transformer& model, Device device) const;

 private:
  RetrievalOptions options_;
  std::vector<RetrievalItem> items_;
  int vocab_valid_ = 0;         // ids a prediction may take: the val shard's vocabulary, within the model's
  int block_ = 0, bridge_ = 0;  // the PBB layers' geometry for near/far, 0 without PBB layers
};

}  // namespace hylo
