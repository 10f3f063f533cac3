#include "eval/evaluate.h"

#include <cmath>

#include "data/loader.h"
#include "data/step_batch.h"

namespace hylo {

double val_loss_sum(const Transformer& model, const Config& config, Device device, int rank, int ranks) {
  NoGradGuard no_grad;
  const TrainConfig& t = config.train;
  const int B = t.micro_batch();
  // A fixed seed, independent of the training seed's progress: every evaluation sees the same
  // batches. Batch i is a function of i alone, so a rank can go straight to its own.
  data::DataLoader val({val_dataset(config.data)}, B, t.seq_len, /*rank=*/0, /*world_size=*/1, /*seed=*/0x5eed,
                       /*prefetch=*/false, /*retrieval_mix=*/0, "data.val");
  const int vocab_valid = int(val.vocab_size());
  // Expert-parallel ranks exchange tokens in every forward, so each runs as many as the busiest:
  // a rank past its share repeats a batch and drops the result.
  const int64_t rounds = (t.eval_batches + ranks - 1) / ranks;
  const int64_t end = model.expert_parallel() ? rounds * ranks : t.eval_batches;
  double sum = 0;
  for (int64_t i = rank; i < end; i += ranks) {
    val.skip_to(uint64_t(i % t.eval_batches));
    StepBatch batch = make_step_batch(val.next(), B, t.seq_len, device);
    const double loss =
        double(model.loss(batch.inputs_BT, batch.targets_N, vocab_valid).value().to(DType::f32).to_vector<float>()[0]);
    if (i < t.eval_batches) sum += loss;
  }
  return sum;
}

EvalResult val_loss_result(double loss_sum, const Config& config) {
  const TrainConfig& t = config.train;
  EvalResult r;
  r.loss = t.eval_batches ? loss_sum / double(t.eval_batches) : 0.0;
  r.perplexity = std::exp(r.loss);
  r.tokens = t.eval_batches * int64_t(t.micro_batch()) * t.seq_len;
  return r;
}

EvalResult evaluate_val_loss(const Transformer& model, const Config& config, Device device) {
  return val_loss_result(val_loss_sum(model, config, device, 0, 1), config);
}

}  // namespace hylo
