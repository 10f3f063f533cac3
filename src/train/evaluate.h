// Validation loss on held-out documents: the same fixed batches every time it is called, so
// in-loop evaluations and `hylo eval` are comparable.
#pragma once
#include <string>

#include "nn/transformer.h"
#include "train/config.h"

namespace hylo {

struct EvalResult {
  double loss = 0;
  double perplexity = 0;
  int64_t tokens = 0;
};

EvalResult evaluate_val_loss(const Transformer& model, const Config& config, Device device);

}  // namespace hylo
