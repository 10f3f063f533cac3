// Validation loss on held-out documents: the same fixed batches every time it is called, so
// in-loop evaluations and `hylo eval` are comparable.
#pragma once
#include <string>

#include "nn/transformer.h"
#include "config/config.h"

namespace hylo {

struct EvalResult {
  double loss = 0;
  double perplexity = 0;
  int64_t tokens = 0;
};

EvalResult evaluate_val_loss(const Transformer& model, const Config& config, Device device);

// The same in parts, for data-parallel jobs: rank `rank` of `ranks` sums the losses of batches
// rank, rank + ranks, ...; the ranks' sums added up give val_loss_result its argument.
double val_loss_sum(const Transformer& model, const Config& config, Device device, int rank, int ranks);
EvalResult val_loss_result(double loss_sum, const Config& config);

}  // namespace hylo
