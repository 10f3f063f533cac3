#include "checkpoint/buffers.h"

namespace hylo {

std::vector<NamedTensor> buffer_tensors(Transformer& model) {
  std::vector<NamedTensor> out;
  for (const NamedBufferRef& b : model.buffers()) out.push_back({b.name, b.value.to(Device::cpu)});
  return out;
}

void restore_buffers(Transformer& model, const CheckpointState& state, const std::string& path) {
  std::vector<NamedBufferRef> buffers = model.buffers();
  for (size_t i = 0; i < buffers.size(); ++i) {
    HYLO_CHECK(i < state.buffers.size(), "{}: buffer /buffers/{} is missing (the checkpoint holds {} buffers, the model {})",
               path, buffers[i].name, state.buffers.size(), buffers.size());
    const NamedTensor& saved = state.buffers[i];
    HYLO_CHECK(saved.name == buffers[i].name && saved.value.shape() == buffers[i].value.shape() &&
                   saved.value.dtype() == buffers[i].value.dtype(),
               "{}: buffer {} is /buffers/{} {} {}, the model expects {} {} {}", path, i, saved.name,
               dtype_name(saved.value.dtype()), shape_str(saved.value.shape()), buffers[i].name,
               dtype_name(buffers[i].value.dtype()), shape_str(buffers[i].value.shape()));
    buffers[i].value.copy_from(saved.value.to(buffers[i].value.device()));
  }
  HYLO_CHECK(state.buffers.size() == buffers.size(), "{}: holds {} buffers (first extra: /buffers/{}), the model has {}",
             path, state.buffers.size(), state.buffers.size() > buffers.size() ? state.buffers[buffers.size()].name : "",
             buffers.size());
}

}  // namespace hylo
