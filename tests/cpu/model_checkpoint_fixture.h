// A checkpoint written straight from an untrained model and its config, for CLI tests of the
// commands that read checkpoints (eval, generate) without training first.
#pragma once
#include <string>

#include "nn/transformer.h"
#include "checkpoint/buffers.h"
#include "checkpoint/checkpoint.h"
#include "config/config.h"

namespace hylo::test {

inline void write_model_checkpoint(const std::string& run_dir, const Config& config, Transformer& model,
                                   int64_t step) {
  CheckpointState state;
  state.step = step;
  for (const Parameter& p : model.parameters()) state.model.push_back({p.name, p.var.value()});
  state.buffers = buffer_tensors(model);
  state.config_yaml = to_yaml(config);
  save_checkpoint(checkpoint_path(run_dir, step), state);
}

}  // namespace hylo::test
