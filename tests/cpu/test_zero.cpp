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
