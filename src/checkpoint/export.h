// `hylo export` (SPEC §7): a checkpoint's model for use outside hylo, in a directory holding
//   model.safetensors  every parameter (the fp32 masters, or rounded to bf16) and each MoE
//                      layer's router bias (f32), under hylo's names (`blocks.3.attn.wq`) and
//                      shapes (linear weights (out, in); experts (E, out, in));
//   config.json        the checkpoint's model section, each layer's attention mask and FFN, the
//                      conventions a reimplementation must follow, and a probe: the next-token
//                      losses hylo's forward gives on fixed token ids with the weights as
//                      exported, to check one against (scripts/check_export.py does, in PyTorch).
// The model of `loaded` must be on the CPU; a bf16 export rounds its parameters in place.
// Each file is written to a temporary name and renamed into place.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "checkpoint/model_checkpoint.h"

namespace hylo {

struct ExportOptions {
  std::string out_dir;
  DType dtype = DType::f32;  // of the parameters: f32 or bf16
  bool overwrite = false;    // replace model.safetensors / config.json already in out_dir
};

void export_model(const LoadedModel& loaded, const ExportOptions& options);

// Tokens in an export's probe (both formats): long enough for every local mask to cross two of
// its spans (block or window), within the trained context.
int probe_length(const Config& config);

// `path` as the safetensors file of `tensors` (contiguous CPU f32 or bf16) with string metadata,
// written through a temporary file; the tensors' bytes are written from where they lie.
void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::vector<std::pair<std::string, std::string>>& metadata);

}  // namespace hylo
