// ZeRO-1's owner assignment (train/zero.h): every parameter has one owner and the owners' loads
// are balanced.
#include <doctest/doctest.h>

#include <algorithm>

#include "nn/transformer.h"
#include "small_model.h"
#include "train/zero.h"

using namespace hylo;

TEST_CASE("ZeRO-1 owners: largest first to the least loaded rank") {
  ModelConfig c = test::small_hybrid(64);
  c.n_layers = 3;
  c.pattern = "LLG";
  Transformer model(c, 3);
  const ParamList& params = model.parameters();
  for (int ranks : {1, 2, 3, 5}) {
    CAPTURE(ranks);
    const std::vector<int> owner = assign_owners(params, ranks);
    REQUIRE(owner.size() == params.size());
    std::vector<int64_t> load(size_t(ranks), 0);
    int64_t largest = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      REQUIRE((owner[i] >= 0 && owner[i] < ranks));
      load[size_t(owner[i])] += params[i].var.value().numel();
      largest = std::max(largest, params[i].var.value().numel());
    }
    // Greedy by size keeps every rank within one parameter of the lightest.
    const auto [lightest, heaviest] = std::minmax_element(load.begin(), load.end());
    CHECK(*heaviest - *lightest <= largest);
    if (ranks > 1) CHECK(*lightest > 0);
  }
}

TEST_CASE("ZeRO-1 owners under expert parallelism: expert shards among their group's ranks, balanced apart") {
  ModelConfig c = test::small_hybrid(64);
  c.moe.experts = 4;
  Transformer model(c, 3);
  ParamList params = model.parameters();
  for (Parameter& p : params) p.expert_shard = p.name.find(".moe.w_") != std::string::npos;  // as shard_experts marks
  const std::vector<int> owner = assign_owners(params, 4, 2);
  std::vector<int64_t> load(4, 0), expert_load(2, 0);
  for (size_t i = 0; i < params.size(); ++i) {
    CAPTURE(params[i].name);
    REQUIRE((owner[i] >= 0 && owner[i] < (params[i].expert_shard ? 2 : 4)));
    (params[i].expert_shard ? expert_load : load)[size_t(owner[i])] += params[i].var.value().numel();
  }
  CHECK(std::count(load.begin(), load.end(), 0) == 0);
  CHECK((expert_load[0] > 0 && expert_load[1] > 0));  // 4 expert tensors over 2 owners
}
