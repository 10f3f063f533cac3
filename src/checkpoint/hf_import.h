// `hylo import HF_DIR --out RUN`: a Hugging Face model directory of one of the classes
// checkpoint/hf_format.h maps (llama, smollm3, qwen3, and hylo's own hylo / hylo_qk_norm) as a
// hylo run directory: config.yaml and checkpoints/step_<N>.h5, which `hylo eval`, `hylo generate`
// and `hylo train RUN/config.yaml --run-dir RUN --resume auto` take.
//
// The model comes from config.json's standard keys. A directory `hylo export --format hf` wrote
// also carries hylo's own config and step ("hylo" in config.json): when it describes the same
// model, the whole config (train and data included) and the step come back as they were, so that
// export -> import returns the checkpoint's weights and config exactly. Otherwise the train and
// data sections are hylo's defaults (train.seq_len from max_position_embeddings, at most 2048).
// The checkpoint holds the weights (f32; BF16 and F16 widened exactly), AdamW moments of zero and
// no data cursor: training from it starts a fresh optimizer and the data stream at its step.
#pragma once
#include <cstdint>
#include <string>

#include "config/config.h"

namespace hylo {

struct HfImportOptions {
  std::string hf_dir, run_dir;
  bool overwrite = false;  // replace RUN's checkpoints, metrics and log
};

struct HfImportResult {
  Config config;
  int64_t step = 0;
  std::string checkpoint;       // the file written
  bool hylo_config = false;     // config.json's "hylo" config was used
};

HfImportResult import_hf(const HfImportOptions& options);

}  // namespace hylo
