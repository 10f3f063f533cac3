// `hylo bench train CONFIG [--steps N] [--warmup N] [--set k=v]... [--json PATH]
// [--expert-gemm grouped|loop]`: times whole training steps, the trainer's own (train/step.h:
// forward, backward, gradient sum, grad norm, clipping, AdamW), on one process and synthetic
// tokens, so it needs no corpus. Reports the median step time, tokens/s, MFU and peak
// device memory. --expert-gemm picks how CUDA MoE layers issue their expert products
// (kernels/moe/grouped_gemm.h), to compare the two in whole steps.
//
// MFU = tokens/s * train_flops_per_token / peak, with train_flops_per_token =
// 6 * matmul params (LM head included) + 12 * H * hd * mean visited keys per layer
// (train/flops.h), and peak = 989.4 TFLOP/s dense bf16 (H100/H200 SXM). With HYLO_PROFILE=1 it
// also prints GPU time per op (forward/backward) over the timed steps.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "bench/bench.h"
#include "bench/bench_table.h"
#include "core/rng.h"
#include "data/tokenizer.h"
#include "config/config.h"
#include "nn/flops.h"
#include "parallel/layout.h"
#include "parallel/single_process.h"
#include "train/step.h"

#if HYLO_WITH_CUDA
#include "core/cuda/allocator.h"
#include "core/cuda/profile.h"
#include "core/cuda/tensor_kernels.h"
#include "kernels/moe/grouped_gemm.h"
#endif

namespace hylo {

int run_bench_train(const TrainBenchOptions& o) {
  const std::string& config_path = o.config;
  const int steps = o.steps, warmup = o.warmup;
  const std::string& expert_gemm = o.expert_gemm;  // grouped | loop (the command line checked)
  HYLO_CHECK(steps > 0 && warmup >= 0, "bench train: --steps must be positive and --warmup non-negative");
  if (!expert_gemm.empty()) {
#if HYLO_WITH_CUDA
    cuda::set_grouped_gemm_path(expert_gemm == "grouped" ? cuda::GroupedGemmPath::cublas_grouped
                                                         : cuda::GroupedGemmPath::lt_loop);
#endif
  }
  const Config config = load_config(config_path, o.overrides);
  const Device device = training_device(config);
  HYLO_CHECK(expert_gemm.empty() || device == Device::cuda,
             "bench train: --expert-gemm chooses the CUDA MoE path; {} runs on {}", config_path, device_name(device));
  const TrainConfig& t = config.train;

  // The trainer's own step on a job of one: its layout, split, model and updates.
  dist::SingleProcess one;
  const ParallelLayout layout(one, t.expert_parallel, config_path);
  const BatchSplit split = split_batch(t, layout.dp(), config_path);
  const int vocab_valid = std::min(config.model.vocab_size, data::kR50kTokens);  // the rest is padding
  TrainStep train_step(config, device, layout, split, vocab_valid);
  const int B = split.micro_batch, T = t.seq_len;
  Rng rng{t.seed, 99, 0};
  std::vector<int32_t> tokens(size_t(B) * (T + 1));
  for (auto& x : tokens) x = int32_t(rng.below(uint64_t(vocab_valid)));
  const StepBatch batch = make_step_batch(tokens, B, T, device);

  std::vector<double> step_ms;
  double loss = 0;
  for (int s = 0; s < warmup + steps; ++s) {
#if HYLO_WITH_CUDA
    if (s == warmup && device == Device::cuda) cuda::profile_reset();
#endif
    auto t0 = std::chrono::steady_clock::now();
    loss = train_step.run(s + 1, t.lr, [&] { return batch; }).loss;  // its grad norm reads back
#if HYLO_WITH_CUDA
    if (device == Device::cuda) cuda::synchronize();  // AdamW too: the clock covers the whole step
#endif
    if (s >= warmup)
      step_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(step_ms.begin(), step_ms.end());
  const double median_ms = step_ms[step_ms.size() / 2];
  const double tokens_per_s = double(t.batch_size) * T / (median_ms / 1000);
  const double flops = train_flops_per_token(config.model, T);
  const double peak = peak_flops(device == Device::cuda);
  const double mfu = peak > 0 ? tokens_per_s * flops / peak : 0.0;
  double peak_gib = 0;
#if HYLO_WITH_CUDA
  if (device == Device::cuda) peak_gib = double(cuda::allocator_stats().peak_bytes) / (1ull << 30);
#endif
  bench::Table table({{"config", "config", 28, -1, false, true},
                      {"step_ms", "step ms", 10, 2},
                      {"tokens_per_s", "tokens/s", 12, 0},
                      {"mfu_percent", "mfu %", 7, 1, false},
                      {"mfu", "", 0, 4},
                      {"flops_per_token", "", 0},
                      {"peak_gib", "peak GiB", 9, 2},
                      {"final_loss", "", 0, 4}});
  table.print_header();
  table.add({{"config", config_path},
             {"step_ms", median_ms},
             {"tokens_per_s", tokens_per_s},
             {"mfu_percent", 100 * mfu},
             {"mfu", mfu},
             {"flops_per_token", flops},
             {"peak_gib", peak_gib},
             {"final_loss", loss}});
  if (!o.json.empty())
    table.write_json(o.json, "train", std::string(device_name(device)),
                     {{"config", config_path},
                      {"batch", t.batch_size},
                      {"seq_len", T},
                      {"steps", steps},
                      {"warmup", warmup},
                      {"expert_gemm", expert_gemm.empty() ? "default" : expert_gemm},
                      {"timing", "median wall time of a whole step (host-synchronised)"},
                      {"mfu", "tokens/s * flops_per_token / peak (989.4 TFLOP/s dense bf16 on CUDA; none, so 0, on CPU)"}});
#if HYLO_WITH_CUDA
  if (device == Device::cuda && cuda::profiling_enabled()) fmt::print("{}", cuda::profile_report(steps));
#endif
  return 0;
}

}  // namespace hylo
