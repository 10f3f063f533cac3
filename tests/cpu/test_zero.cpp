// ZeRO-1's flat layout (parallel/zero.h): over any number of ranks every element of every parameter
// has exactly one owner, the parts are equal and aligned, the flat vectors round-trip, and the
// gradients are views of them that backward accumulates into; and the per-rank memory that
// `hylo params --ranks N` reports.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>

#include "parallel/single_process.h"
#include "nn/transformer.h"
#include "pretend_ranks.h"
#include "small_model.h"
#include "config/config.h"
#include "nn/flops.h"
#include "parallel/gradient_sync.h"
#include "parallel/layout.h"
#include "parallel/zero.h"

using namespace hylo;

namespace {

using test::PretendRanks;

// Rank r of `ranks` in a layout of expert-parallel degree `ep`, as ParallelLayout splits them:
// expert group r / ep (rank r % ep in it), expert replicas r % ep (rank r / ep in them).
std::unique_ptr<ParallelLayout> pretend_layout(dist::Communicator& all, int ep) {
  const int r = all.rank(), ranks = all.size();
  if (ep == 1) return std::make_unique<ParallelLayout>(all, 1, "test");
  return std::make_unique<ParallelLayout>(all, std::make_unique<PretendRanks>(r % ep, ep),
                                          std::make_unique<PretendRanks>(r / ep, ranks / ep));
}

// Checks that ranks 0..ranks-1 (expert shards over expert groups of `ep`) own every element once.
void check_every_element_owned_once(const ParamList& params, size_t bucket_bytes, int ranks, int ep) {
  const std::vector<std::vector<size_t>> buckets = gradient_buckets(params, bucket_bytes);
  std::vector<std::vector<int>> owners(params.size());
  for (size_t i = 0; i < params.size(); ++i) owners[i].assign(size_t(params[i].var.value().numel()), 0);
  std::vector<int64_t> owned_per_rank(size_t(ranks), 0);
  for (int r = 0; r < ranks; ++r) {
    PretendRanks all(r, ranks);
    const std::unique_ptr<ParallelLayout> parallel = pretend_layout(all, ep);
    const ZeroLayout layout(params, buckets, *parallel);
    for (size_t b = 0; b < layout.buckets(); ++b)
      for (const ZeroLayout::Flat& f : layout.flats(b)) {
        CHECK(f.length % (layout.comm(f).size() * ZeroLayout::kAlign) == 0);
        for (int64_t offset : f.offset) CHECK(offset % ZeroLayout::kAlign == 0);
      }
    for (size_t i = 0; i < params.size(); ++i) {
      const ElementRange e = layout.owned()[i];
      if (e.size() == 0) continue;
      CHECK(e.begin % ZeroLayout::kAlign == 0);
      owned_per_rank[size_t(r)] += e.size();
      // An expert shard is owned once among the ranks that hold the same experts (equal r % ep):
      // count the ranks of one such set, those of r % ep == 0.
      if (!params[i].expert_shard || r % ep == 0)
        for (int64_t j = e.begin; j < e.end; ++j) ++owners[i][size_t(j)];
    }
  }
  for (size_t i = 0; i < params.size(); ++i) {
    CAPTURE(params[i].name);
    bool once = true;
    for (int n : owners[i]) once = once && n == 1;
    CHECK(once);
  }
  // Equal parts: the ranks' loads differ by at most the padding of each flat vector.
  const auto [lightest, heaviest] = std::minmax_element(owned_per_rank.begin(), owned_per_rank.end());
  CHECK(*heaviest - *lightest <= int64_t(buckets.size()) * 2 * ranks * ZeroLayout::kAlign);
}

}  // namespace

TEST_CASE("ZeRO-1 flat layout: every element has one owner, parts equal and aligned, parameters cut across parts") {
  ModelConfig c = test::small_hybrid(64);
  c.n_layers = 3;
  c.pattern = "LLG";
  Transformer model(c, 3);
  for (size_t bucket_bytes : {size_t(1) << 12, size_t(25) << 20})
    for (int ranks : {1, 2, 3, 5}) {
      CAPTURE(bucket_bytes);
      CAPTURE(ranks);
      check_every_element_owned_once(model.parameters(), bucket_bytes, ranks, 1);
    }
  // One bucket over 3 ranks: some parameter is split between two ranks.
  PretendRanks rank0(0, 3);
  const ParamList& params = model.parameters();
  const ParallelLayout three(rank0, 1, "test");
  const ZeroLayout layout(params, gradient_buckets(params), three);
  bool split = false;
  for (size_t i = 0; i < params.size(); ++i) {
    const ElementRange e = layout.owned()[i];
    split = split || (e.size() > 0 && e.size() < params[i].var.value().numel());
  }
  CHECK(split);
}

TEST_CASE("ZeRO-1 flat layout under expert parallelism: expert shards owned among the ranks that hold them") {
  ModelConfig c = test::small_hybrid(64);
  c.moe.experts = 4;
  Transformer model(c, 3);
  ParamList params = model.parameters();
  for (Parameter& p : params) p.expert_shard = p.name.find(".moe.w_") != std::string::npos;  // as shard_experts marks
  check_every_element_owned_once(params, size_t(1) << 12, 4, 2);
  check_every_element_owned_once(params, size_t(25) << 20, 4, 2);
}

TEST_CASE("ZeRO-1 flat vectors: pack, gather and view give back each parameter's elements") {
  ModelConfig c = test::small_hybrid(64);
  Transformer model(c, 3);
  const ParamList& params = model.parameters();
  dist::SingleProcess one;
  const ParallelLayout alone(one, 1, "test");
  const ZeroLayout layout(params, gradient_buckets(params, size_t(1) << 12), alone);
  for (size_t b = 0; b < layout.buckets(); ++b)
    for (const ZeroLayout::Flat& f : layout.flats(b)) {
      const Tensor flat = layout.pack(f, [&](size_t i) { return params[i].var.value(); }, DType::f32, Device::cpu);
      const Tensor gathered = layout.gather(f, [&](size_t i) { return element_range(params[i].var.value(), layout.owned()[i]); },
                                            DType::f32, Device::cpu);  // one rank: it owns all
      for (size_t k = 0; k < f.params.size(); ++k) {
        const Tensor& value = params[f.params[k]].var.value();
        CAPTURE(params[f.params[k]].name);
        CHECK(ZeroLayout::param_view(flat, f, k, value.shape()).to_vector<float>() == value.to_vector<float>());
        CHECK(ZeroLayout::param_view(gathered, f, k, value.shape()).to_vector<float>() == value.to_vector<float>());
      }
    }
}

TEST_CASE("ZeRO-1 gradients: zero views of the flat vectors that backward adds into, each step anew") {
  ModelConfig c = test::small_hybrid(64);
  c.tie_embeddings = true;  // one parameter read twice
  Transformer model(c, 3), plain(c, 3);
  ParamList& params = model.parameters();
  dist::SingleProcess one;
  const ParallelLayout alone(one, 1, "test");
  ZeroLayout layout(params, gradient_buckets(params, size_t(1) << 12), alone);
  std::vector<int32_t> ids(18), next(18);
  for (size_t t = 0; t < ids.size(); ++t) {
    ids[t] = int32_t(7 * t % 64);
    next[t] = int32_t((7 * t + 3) % 64);
  }
  const Tensor inputs = Tensor::from_vector(ids, {2, 9}), targets = Tensor::from_vector(next, {18});
  for (int step = 0; step < 2; ++step) {  // the second step's views start from zero again
    layout.zero_grads(params);
    for (const Parameter& p : params)
      for (float g : p.var.grad().to_vector<float>()) REQUIRE(g == 0.f);
    model.loss(inputs, targets, 64).backward();
  }
  plain.loss(inputs, targets, 64).backward();
  for (size_t b = 0; b < layout.buckets(); ++b)
    for (size_t k = 0; k < layout.flats(b).size(); ++k) {
      const ZeroLayout::Flat& f = layout.flats(b)[k];
      const Tensor& flat = layout.flat_grads(b, k, params);
      for (size_t j = 0; j < f.params.size(); ++j) {
        const size_t i = f.params[j];
        CAPTURE(params[i].name);
        CHECK(params[i].var.grad().same_storage(flat));
        CHECK(params[i].var.grad().to_vector<float>() == plain.parameters()[i].var.grad().to_vector<float>());
      }
    }
  // A gradient replaced instead of added to would leave zeros in the flat vector: refused.
  params[0].var.mutable_grad() = params[0].var.grad().clone();
  CHECK_THROWS_WITH_AS(layout.flat_grads(layout.buckets() - 1, 0, params),
                       doctest::Contains("replaced instead of accumulated"), Error);
}

TEST_CASE("training state per rank: what `hylo params --ranks` says a ZeRO-1 rank keeps is what its layout owns") {
  const ModelConfig c = test::small_hybrid(64);
  Transformer model(c, 3);
  const ParamList& params = model.parameters();
  int64_t total = 0;
  for (const Parameter& p : params) total += p.var.value().numel();
  for (int r = 0; r < 4; ++r) {
    CAPTURE(r);
    PretendRanks all(r, 4);
    const ParallelLayout four(all, 1, "test");
    const ZeroLayout layout(params, gradient_buckets(params), four);
    int64_t owned = 0, padding = 0;
    for (const ElementRange& e : layout.owned()) owned += e.size();
    for (size_t b = 0; b < layout.buckets(); ++b)
      for (const ZeroLayout::Flat& f : layout.flats(b)) padding += f.length;
    padding -= total;
    // bf16 weights and gradients of everything, fp32 master and moments of the owned elements.
    const double kept = 4.0 * double(total) + 12.0 * double(owned);
    CHECK(std::abs(kept - training_state_bytes_per_rank(c, 4, 1, true)) <= 12.0 * double(padding));
  }
}

TEST_CASE("training state per rank: 16 bytes a parameter without ZeRO-1, 4 + 12 / N with it, experts over their replicas") {
  const Config dense = load_config(std::string(HYLO_SOURCE_DIR) + "/configs/205m-pbb.yaml");
  const double stored = double(count_parameters(dense.model).back().stored);
  CHECK(training_state_bytes_per_rank(dense.model, 8, 1, false) == 16 * stored);
  CHECK(training_state_bytes_per_rank(dense.model, 8, 1, true) == doctest::Approx(4 * stored + 12 * stored / 8));
  const Config moe = load_config(std::string(HYLO_SOURCE_DIR) + "/configs/moe-8e-pbb.yaml");
  const std::vector<ParamCount> rows = count_parameters(moe.model);
  double experts = 0;
  for (const ParamCount& row : rows)
    if (row.component == "moe_experts") experts = double(row.stored);
  const double replicated = double(rows.back().stored) - experts;
  REQUIRE(experts > 0);
  // 4 ranks, experts over groups of 2: each holds half the experts, shared with one other rank.
  CHECK(training_state_bytes_per_rank(moe.model, 4, 2, false) == doctest::Approx(16 * (replicated + experts / 2)));
  CHECK(training_state_bytes_per_rank(moe.model, 4, 2, true) ==
        doctest::Approx(4 * (replicated + experts / 2) + 12 * (replicated / 4 + experts / 2 / 2)));
}
