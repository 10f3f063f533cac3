// A model rebuilt from a checkpoint: the one way `hylo eval`, `hylo generate` and resuming
// training match a checkpoint's parameters to a config's model.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nn/transformer.h"
#include "checkpoint/checkpoint.h"
#include "config/config.h"

namespace hylo {

// One fp32 tensor per parameter from a checkpoint's group (`group`: "/model", "/optim/m" or
// "/optim/v"), in the order of `params`, after checking that names, shapes and dtype agree
// (errors name `path`, the group and the first mismatch).
std::vector<Tensor> checkpoint_tensors(const std::vector<NamedTensor>& saved, const ParamList& params,
                                       const std::string& path, const char* group);

struct LoadedModel {
  std::string path;  // the checkpoint file actually read
  int64_t step = 0;
  Config config;     // the checkpoint's /config with the overrides applied
  std::unique_ptr<Transformer> model;
};

// The newest valid checkpoint of a run directory, or the file itself, with its weights (and MoE
// router biases) on `device` (default: the device its config trains on).
LoadedModel load_model_checkpoint(const std::string& run_dir_or_file, const std::vector<std::string>& overrides,
                                  std::optional<Device> device = std::nullopt);

}  // namespace hylo
