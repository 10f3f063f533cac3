// recompute: activation recomputation. The forward runs without taping, keeping only the inputs
// and the output; the backward runs it again with taping and differentiates that copy.
#include "ops/ops.h"

namespace hylo {

Var recompute(const std::vector<Var>& inputs, const std::function<Var(const std::vector<Var>&)>& fn) {
  Tensor out;
  {
    NoGradGuard no_tape;
    out = fn(inputs).value();
  }
  return Var::from_op(out, inputs, [fn](const Tensor& g, std::vector<Var>& in) {
    // Fresh leaves over the same input values: the recomputed graph ends at them, and their
    // gradients are handed to the real inputs. Parameters used inside fn accumulate directly.
    std::vector<Var> leaves;
    for (const Var& v : in) leaves.emplace_back(v.value(), v.requires_grad(), v.name());
    fn(leaves).backward(g);
    for (size_t i = 0; i < in.size(); ++i)
      if (in[i].requires_grad() && leaves[i].has_grad()) in[i].accumulate_grad(leaves[i].grad());
  });
}

}  // namespace hylo
