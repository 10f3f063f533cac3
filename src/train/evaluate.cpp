#include "train/evaluate.h"

#include <cmath>

#include "data/loader.h"
#include "train/step_batch.h"

namespace hylo {

EvalResult evaluate_val_loss(const Transformer& model, const Config& config, Device device) {
  NoGradGuard no_grad;
  const TrainConfig& t = config.train;
  const int B = t.micro_batch();
  // A fixed seed, independent of the training seed's progress: every evaluation sees the same batches.
  data::DataLoader val(config.data.val, B, t.seq_len, /*rank=*/0, /*world_size=*/1, /*seed=*/0x5eed);
  const int vocab_valid = int(val.vocab_size());
  double sum = 0;
  for (int64_t i = 0; i < t.eval_batches; ++i) {
    StepBatch batch = make_step_batch(val.next(), B, t.seq_len, device);
    sum += double(model.loss(batch.inputs_BT, batch.targets_N, vocab_valid).value().to(DType::f32).to_vector<float>()[0]);
  }
  EvalResult r;
  r.loss = t.eval_batches ? sum / double(t.eval_batches) : 0.0;
  r.perplexity = std::exp(r.loss);
  r.tokens = t.eval_batches * int64_t(B) * t.seq_len;
  return r;
}

}  // namespace hylo
