// Reading safetensors files (8-byte little-endian header length, a JSON header of
// name -> {dtype, shape, data_offsets}, then the little-endian tensor bytes), as Hugging Face
// checkpoints hold their weights; `write_safetensors` (checkpoint/export.h) writes them.
#pragma once
#include <map>
#include <string>

#include "core/tensor.h"

namespace hylo {

struct SafetensorsContents {
  std::map<std::string, Tensor> tensors;  // CPU f32: F32 as stored, BF16 and F16 widened (exactly)
  std::map<std::string, std::string> metadata;
};

// Every tensor of the file; one-line errors name the file and, where there is one, the tensor.
SafetensorsContents read_safetensors(const std::string& path);

// A Hugging Face model directory's weights: model.safetensors, or the shards that
// model.safetensors.index.json names (each tensor in exactly one).
std::map<std::string, Tensor> read_hf_weights(const std::string& dir);

}  // namespace hylo
