#include "eval/retrieval.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "core/rng.h"
#include "data/tokenizer.h"

namespace hylo {

namespace {

constexpr int kFillerTries = 64;  // windows drawn before accepting one that crosses a document separator

nlohmann::ordered_json bucket_json(const RetrievalBucket& b) {
  return {{"n", b.n}, {"exact", b.exact}, {"accuracy", b.accuracy()}, {"token_accuracy", b.token_accuracy()},
          {"mean_logprob", b.mean_logprob()}};
}

std::string bucket_cells(const RetrievalBucket& b) {
  return b.n ? fmt::format("{:>5} {:>7.3f}", b.n, b.accuracy()) : fmt::format("{:>5} {:>7}", 0, "-");
}

}  // namespace

std::vector<int> default_retrieval_distances(int seq_len) {
  const int max_d = seq_len - 2 * data::kSpanTokens;
  std::vector<int> d;
  for (int x = 8; x <= max_d; x *= 4) d.push_back(x);
  if (max_d >= 1 && (d.empty() || d.back() != max_d)) d.push_back(max_d);
  return d;
}

std::vector<RetrievalItem> build_retrieval_set(const data::ShardReader& val, const RetrievalOptions& options) {
  const int L = options.seq_len;
  const std::vector<int> distances = options.distances.empty() ? default_retrieval_distances(L) : options.distances;
  HYLO_CHECK(!distances.empty(), "retrieval: seq_len {} is too short (needs >= {})", L, 2 * data::kSpanTokens + 1);
  HYLO_CHECK(val.size() > uint64_t(L), "retrieval: {} holds {} tokens, fewer than seq_len {}", val.path(), val.size(), L);
  const std::vector<int32_t> pool = data::common_token_pool(val);
  std::vector<RetrievalItem> items;
  for (int d : distances) {
    HYLO_CHECK(d >= 0 && d + 2 * data::kSpanTokens <= L, "retrieval: distance {} does not fit in seq_len {} (max {})", d, L,
               L - 2 * data::kSpanTokens);
    Rng rng{options.seed, uint64_t(d)};
    for (int i = 0; i < options.per_distance; ++i) {
      RetrievalItem item;
      item.distance = d;
      // Filler: a window of L held-out tokens, preferably inside one document.
      uint64_t start = 0;
      for (int t = 0; t < kFillerTries; ++t) {
        start = rng.below(val.size() - uint64_t(L) + 1);
        bool clean = true;
        for (uint64_t j = start; j < start + uint64_t(L) && clean; ++j) clean = val.token(j) != uint32_t(data::kEndOfTextId);
        if (clean) break;
      }
      item.ids.resize(size_t(L));
      val.copy_tokens(start, uint64_t(L), item.ids.data());
      item.source = data::draw_source_position(rng, L, d);
      item.query = item.source + data::kSpanTokens + d;
      const std::array<int32_t, data::kSpanTokens> span = data::draw_source_span(rng, pool);
      std::copy_n(span.begin(), data::kSpanKeyTokens, item.key.begin());
      std::copy_n(span.begin() + data::kSpanKeyTokens, data::kSpanValueTokens, item.value.begin());
      data::write_source_span(span, item.source, d, item.ids.data());
      items.push_back(std::move(item));
    }
  }
  return items;
}

void RetrievalBucket::add(const SpanScore& s) {
  ++n;
  exact += s.exact() ? 1 : 0;
  correct_tokens += s.correct;
  logprob += s.logprob;
}

RetrievalResult tally_retrieval(const std::vector<RetrievalItem>& items, const std::vector<SpanScore>& scores,
                                const RetrievalOptions& options, int block, int bridge) {
  HYLO_CHECK(items.size() == scores.size(), "tally_retrieval: {} items, {} scores", items.size(), scores.size());
  RetrievalResult r;
  r.seq_len = options.seq_len;
  r.per_distance = options.per_distance;
  r.seed = options.seed;
  r.block = block;
  r.bridge = bridge;
  for (size_t i = 0; i < items.size(); ++i) {
    const RetrievalItem& item = items[i];
    auto row = std::find_if(r.rows.begin(), r.rows.end(), [&](const RetrievalRow& x) { return x.distance == item.distance; });
    if (row == r.rows.end()) row = r.rows.insert(r.rows.end(), RetrievalRow{item.distance, {}, {}, {}});
    row->all.add(scores[i]);
    r.overall.add(scores[i]);
    if (block > 0) {
      const bool near = item.query % block < bridge;
      (near ? row->near : row->far).add(scores[i]);
      (near ? r.near : r.far).add(scores[i]);
    }
  }
  return r;
}

RetrievalTask::RetrievalTask(const Config& config, RetrievalOptions options) : options_(std::move(options)) {
  if (options_.seq_len == 0) options_.seq_len = config.train.seq_len;
  const data::ShardReader val = first_val_shard(config.data);
  items_ = build_retrieval_set(val, options_);
  vocab_valid_ = int(std::min<uint64_t>(val.vocab_size(), uint64_t(config.model.vocab_size)));
  const AttnKindConfig& local = config.model.local;
  if (local.kind == "pbb" && config.model.pattern.find('L') != std::string::npos) {
    block_ = local.block;
    bridge_ = local.bridge;
  }
}

RetrievalResult RetrievalTask::score(const Transformer& model, Device device) const {
  std::vector<ScoredSequence> sequences;
  sequences.reserve(items_.size());
  for (const RetrievalItem& item : items_)
    sequences.push_back({item.ids, item.query + data::kSpanKeyTokens, data::kSpanValueTokens});
  const std::vector<SpanScore> scores = score_sequences(model, sequences, vocab_valid_, device, options_.batch);
  return tally_retrieval(items_, scores, options_, block_, bridge_);
}

std::string RetrievalResult::table() const {
  std::string out = fmt::format(
      "retrieval: {} sequences/distance, L {}, seed {:#x}, K/V 4+4 common tokens; exact = greedy V matches\n", per_distance,
      seq_len, seed);
  const bool split = block > 0;
  out += fmt::format("{:>8} {:>5} {:>7} {:>9} {:>11}", "distance", "n", "exact", "tok_acc", "mean_logp");
  if (split)
    out += fmt::format("   {:>13} {:>13}", fmt::format("near r<{}", bridge), fmt::format("far r>={}", bridge));
  out += "\n";
  auto line = [&](const std::string& name, const RetrievalBucket& all, const RetrievalBucket* near_b,
                  const RetrievalBucket* far_b) {
    out += fmt::format("{:>8} {:>5} {:>7.3f} {:>9.3f} {:>11.3f}", name, all.n, all.accuracy(), all.token_accuracy(),
                       all.mean_logprob());
    if (near_b) out += fmt::format("   {} {}", bucket_cells(*near_b), bucket_cells(*far_b));
    out += "\n";
  };
  for (const RetrievalRow& row : rows)
    line(std::to_string(row.distance), row.all, split ? &row.near : nullptr, split ? &row.far : nullptr);
  line("all", overall, split ? &near : nullptr, split ? &far : nullptr);
  if (split) out += fmt::format("(r = query position mod block {}; near/far columns: n, exact)\n", block);
  return out;
}

nlohmann::ordered_json RetrievalResult::json() const {
  nlohmann::ordered_json by_distance = nlohmann::ordered_json::array();
  for (const RetrievalRow& row : rows) {
    nlohmann::ordered_json r = {{"distance", row.distance}, {"all", bucket_json(row.all)}};
    if (block > 0) r["near"] = bucket_json(row.near), r["far"] = bucket_json(row.far);
    by_distance.push_back(std::move(r));
  }
  nlohmann::ordered_json out = {{"seq_len", seq_len}, {"per_distance", per_distance}, {"seed", seed},
                                {"key_tokens", data::kSpanKeyTokens}, {"value_tokens", data::kSpanValueTokens},
                                {"block", block}, {"bridge", bridge}, {"by_distance", std::move(by_distance)},
                                {"overall", bucket_json(overall)}};
  if (block > 0) out["near"] = bucket_json(near), out["far"] = bucket_json(far);
  return out;
}

}  // namespace hylo
