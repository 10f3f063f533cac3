// Non-trained model state in checkpoints (/buffers/<name>), e.g. the MoE router biases: what
// Transformer::buffers() exposes, saved and restored by name so that resume stays bit-exact.
#pragma once
#include <string>
#include <vector>

#include "nn/transformer.h"
#include "checkpoint/checkpoint.h"

namespace hylo {

// CPU copies of the model's buffers, in the model's order (empty for a dense model).
std::vector<NamedTensor> buffer_tensors(Transformer& model);

// Copies `state.buffers` into the model's buffers. Names, order and shapes must match exactly;
// otherwise one line naming `path` and the buffer (e.g. a MoE checkpoint without its biases).
void restore_buffers(Transformer& model, const CheckpointState& state, const std::string& path);

}  // namespace hylo
