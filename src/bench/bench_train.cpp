// `hylo bench train CONFIG [--steps N] [--warmup N] [--set k=v]... [--json PATH]
// [--expert-gemm grouped|loop]`: times whole training steps (forward, backward, grad norm, AdamW)
// on synthetic tokens, so it needs no corpus. Reports the median step time, tokens/s, MFU and peak
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

#include "bench/bench_json.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "core/rng.h"
#include "data/tokenizer.h"
#include "nn/transformer.h"
#include "ops/ops.h"
#include "config/config.h"
#include "nn/flops.h"
#include "core/json_text.h"
#include "optim/optimizer.h"
#include "train/step_batch.h"

#if HYLO_WITH_CUDA
#include "core/cuda/allocator.h"
#include "core/cuda/profile.h"
#include "core/cuda/tensor_kernels.h"
#include "kernels/moe/grouped_gemm.h"
#endif

namespace hylo {

int run_bench_train(const Args& args) {
  const std::string& config_path = leading_path(args, "bench train", "a config file");
  int steps = 10, warmup = 3;
  std::string json_path, expert_gemm;
  std::vector<std::string> overrides;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& flag = args[i];
    const std::string& value = flag_value(args, i, "bench train");
    if (flag == "--steps") steps = parse_positive_int("bench train", flag, value);
    else if (flag == "--warmup") warmup = parse_number<int>("bench train", flag, value);
    else if (flag == "--set") overrides.push_back(value);
    else if (flag == "--json") json_path = value;
    else if (flag == "--expert-gemm") expert_gemm = value;
    else HYLO_FAIL("bench train: unknown flag '{}'", flag);
  }
  HYLO_CHECK(steps > 0 && warmup >= 0, "bench train: --steps must be positive and --warmup non-negative");
  if (!expert_gemm.empty()) {
    HYLO_CHECK(expert_gemm == "grouped" || expert_gemm == "loop",
               "bench train: --expert-gemm must be 'grouped' or 'loop', got '{}'", expert_gemm);
#if HYLO_WITH_CUDA
    cuda::set_grouped_gemm_path(expert_gemm == "grouped" ? cuda::GroupedGemmPath::cublas_grouped
                                                         : cuda::GroupedGemmPath::lt_loop);
#endif
  }
  const Config config = load_config(config_path, overrides);
  const Device device = training_device(config);
  HYLO_CHECK(expert_gemm.empty() || device == Device::cuda,
             "bench train: --expert-gemm chooses the CUDA MoE path; {} runs on {}", config_path, device_name(device));
  const TrainConfig& t = config.train;
  const int B = t.micro_batch(), T = t.seq_len;
  const int accumulation = t.batch_size / B;  // one process (the trainer divides by its ranks too)

  Transformer model(config.model, t.seed);
  model.set_recompute(t.recompute);
  AdamW optimizer(model.parameters(), AdamWOptions{t.beta1, t.beta2, t.eps, t.weight_decay}, device);
  const int vocab_valid = std::min(config.model.vocab_size, data::kR50kTokens);  // the rest is padding
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
    optimizer.zero_grad();
    for (int micro = 0; micro < accumulation; ++micro) {
      Var l = model.loss(batch.inputs_BT, batch.targets_N, vocab_valid);
      loss = l.value().to(DType::f32).to_vector<float>()[0];
      scale(l, 1.0 / accumulation).backward();
    }
    const double norm = optimizer.grad_norm();  // reads back: the step's work is done after this
    optimizer.step(t.lr, clip_scale(norm, t.grad_clip));
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
  fmt::print("{:<28} {:>10} {:>12} {:>7} {:>9}\n", "config", "step ms", "tokens/s", "mfu", "peak GiB");
  fmt::print("{:<28} {:>10.1f} {:>12.0f} {:>6.1f}% {:>9.2f}\n", config_path, median_ms, tokens_per_s, 100 * mfu, peak_gib);
  if (!json_path.empty()) {
    BenchJson json;
    json.bench = "train";
    json.device = device_name(device);
    json.settings = fmt::format(
        "{{\"config\": {}, \"batch\": {}, \"seq_len\": {}, \"steps\": {}, \"warmup\": {}, \"expert_gemm\": \"{}\", "
        "\"timing\": \"median wall time of a whole step (host-synchronised)\", \"mfu\": \"tokens/s * "
        "flops_per_token / peak (989.4 TFLOP/s dense bf16 on CUDA; none, so 0, on CPU)\"}}",
        json_string(config_path), t.batch_size, T, steps, warmup, expert_gemm.empty() ? "default" : expert_gemm);
    json.rows.push_back(fmt::format("{{\"step_ms\": {:.2f}, \"tokens_per_s\": {:.0f}, \"mfu\": {:.4f}, "
                                    "\"flops_per_token\": {:.6g}, \"peak_gib\": {:.2f}, \"final_loss\": {:.4f}}}",
                                    median_ms, tokens_per_s, mfu, flops, peak_gib, loss));
    write_bench_json(json_path, json);
  }
#if HYLO_WITH_CUDA
  if (device == Device::cuda && cuda::profiling_enabled()) fmt::print("{}", cuda::profile_report(steps));
#endif
  return 0;
}

}  // namespace hylo
