#include "checkpoint/model_checkpoint.h"

#include <filesystem>
#include <set>

#include "checkpoint/buffers.h"

namespace hylo {

std::vector<Tensor> checkpoint_tensors(const std::vector<NamedTensor>& saved, const ParamList& params,
                                       const std::string& path, const char* group) {
  if (saved.size() != params.size()) {
    // Name what is missing (or extra): a count alone sends the user comparing two lists by hand.
    std::set<std::string> names;
    for (const NamedTensor& t : saved) names.insert(t.name);
    for (const Parameter& p : params)
      HYLO_CHECK(names.count(p.name), "{}: {}/{} is missing (the checkpoint holds {} tensors there, the model has {} "
                 "parameters)", path, group, p.name, saved.size(), params.size());
    std::set<std::string> wanted;
    for (const Parameter& p : params) wanted.insert(p.name);
    for (const NamedTensor& t : saved)
      HYLO_CHECK(wanted.count(t.name), "{}: {}/{} is not a parameter of this model (the checkpoint holds {} tensors "
                 "there, the model has {} parameters)", path, group, t.name, saved.size(), params.size());
    HYLO_FAIL("{}: {} holds {} tensors, the model has {} parameters", path, group, saved.size(), params.size());
  }
  std::vector<Tensor> values;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& value = saved[i].value;
    HYLO_CHECK(saved[i].name == params[i].name && value.shape() == params[i].var.shape() && value.dtype() == DType::f32,
               "{}: {} tensor {} is {} {} {}, the model expects {} {} f32", path, group, i, saved[i].name,
               shape_str(value.shape()), dtype_name(value.dtype()), params[i].name, shape_str(params[i].var.shape()));
    values.push_back(value);
  }
  return values;
}

LoadedModel load_model_checkpoint(const std::string& run_dir_or_file, const std::vector<std::string>& overrides,
                                  std::optional<Device> device) {
  LoadedModel loaded;
  loaded.path = run_dir_or_file;
  if (std::filesystem::is_directory(loaded.path)) {
    auto latest = latest_valid_checkpoint(loaded.path);
    HYLO_CHECK(latest.has_value(), "{}: no valid checkpoint under {}/checkpoints", loaded.path, loaded.path);
    loaded.path = *latest;
  }
  const CheckpointState state = load_checkpoint(loaded.path, /*moments=*/false);
  loaded.step = state.step;
  loaded.config = config_from_yaml_text(state.config_yaml, loaded.path + ":/config", overrides);
  loaded.model = std::make_unique<Transformer>(loaded.config.model, loaded.config.train.seed);
  ParamList& params = loaded.model->parameters();
  // No optimizer: evaluation, generation and export need the compute copies only.
  const Device place = device ? *device : training_device(loaded.config);  // not value_or: it would always check
  const std::vector<Tensor> values = checkpoint_tensors(state.model, params, loaded.path, "/model");
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].var.mutable_value().copy_from(values[i]);
    place_parameter(params[i], place);
  }
  restore_buffers(*loaded.model, state, loaded.path);  // MoE router biases steer selection
  return loaded;
}

}  // namespace hylo
