// Whole-model gradient check shared by the dense and MoE tests: the model's analytic gradients
// (already computed by a backward pass) against fp64 central differences of `loss()`, at three
// random entries of every parameter. Returns the worst relative error seen.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "core/rng.h"
#include "nn/transformer.h"

namespace hylo::test {

inline double check_model_gradient(Transformer& model, const std::function<double()>& loss, Rng& rng,
                                   double bound = 1e-5) {
  double worst = 0;
  for (Parameter& p : model.parameters()) {
    CAPTURE(p.name);
    REQUIRE(p.var.has_grad());
    const std::vector<double> grad = p.var.grad().to_vector<double>();
    double* w = p.var.mutable_value().data<double>();
    for (int probe = 0; probe < 3; ++probe) {
      const auto i = size_t(rng.below(uint64_t(p.var.value().numel())));
      const double saved = w[i], h = 1e-5;
      w[i] = saved + h;
      const double up = loss();
      w[i] = saved - h;
      const double down = loss();
      w[i] = saved;
      const double numeric = (up - down) / (2 * h);
      const double err = std::abs(numeric - grad[i]) / std::max(1e-6, std::abs(numeric) + std::abs(grad[i]));
      worst = std::max(worst, err);
      CHECK(err < bound);
    }
  }
  return worst;
}

}  // namespace hylo::test
