// Named trainable tensors. Modules register their parameters in a ParamList so that optimizer,
// checkpoints and gradient communication see one flat, ordered list with stable names
// (`blocks.3.attn.wq`).
#pragma once
#include <string>
#include <vector>

#include "autograd/variable.h"

namespace hylo {

struct Parameter {
  std::string name;
  Var var;
  bool weight_decay = true;  // false for norms and embeddings
  double init_std = 0.0;     // 0: initialised to one (norm gains)
  // Expert parallelism: dim 0 holds this rank's experts only (MoeFeedForward::shard_experts);
  // checkpoints hold all of them.
  bool expert_shard = false;
};

using ParamList = std::vector<Parameter>;

// Creates an fp32 CPU parameter initialised from (seed, name): values do not depend on creation
// order, so adding a layer never changes the others' initial weights.
Var make_parameter(ParamList& params, const std::string& name, const Shape& shape, double init_std,
                   bool weight_decay, uint64_t seed);

// Moves a parameter's value to where the model computes: on the CPU it stays fp32; on CUDA it
// becomes a bf16 copy (the fp32 master, where training needs one, is the optimizer's).
void place_parameter(Parameter& p, Device device);

}  // namespace hylo
