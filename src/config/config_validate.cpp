// Whether a Config can run: validate() checks every value against its range and the others it
// depends on, training_device() what the machine offers. Each failure is one line that names the
// config file, the key and its value (SPEC §8).
#include "config/config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <initializer_list>
#include <string>

#include "core/error.h"
#include "core/tensor.h"
#include "data/source_span.h"
#include "config/config_text.h"

#if HYLO_WITH_CUDA
#include <cuda_runtime_api.h>

#include "ops/ops.h"
#endif

namespace hylo {
namespace {

// --- validation helpers: each throws one line naming the key and its value.
struct Checker {
  std::string prefix;  // "configs/x.yaml: " or ""

  template <class... Args>
  void need(bool ok, fmt::format_string<Args...> f, Args&&... args) const {
    if (!ok) throw Error(prefix + fmt::format(f, std::forward<Args>(args)...), __FILE__, __LINE__);
  }
  template <class T>
  void at_least(const std::string& key, T v, T lo) const {
    need(v >= lo, "{}={} must be >= {}", key, v, lo);
  }
  void positive(const std::string& key, double v) const {
    need(std::isfinite(v) && v > 0, "{}={} must be > 0", key, yaml_double(v));
  }
  void non_negative(const std::string& key, double v) const {
    need(std::isfinite(v) && v >= 0, "{}={} must be >= 0", key, yaml_double(v));
  }
  void within(const std::string& key, double v, double lo, double hi, bool hi_open = false) const {
    bool ok = std::isfinite(v) && v >= lo && (hi_open ? v < hi : v <= hi);
    need(ok, "{}={} must be in [{}, {}{}", key, yaml_double(v), lo, hi, hi_open ? ")" : "]");
  }
  void one_of(const std::string& key, const std::string& v, std::initializer_list<const char*> allowed) const {
    for (const char* a : allowed)
      if (v == a) return;
    need(false, "{}='{}' is not one of {}", key, v, fmt::join(allowed, ", "));
  }
  void attn(const std::string& p, const AttnKindConfig& a) const {
    one_of(p + ".kind", a.kind, {"full", "swa", "pbb"});
    positive(p + ".rope_theta", a.rope_theta);
    if (a.kind == "swa") need(a.window >= 1, "{}.window={} must be >= 1 for kind swa", p, a.window);
    if (a.kind == "pbb") {
      need(a.block >= 1, "{}.block={} must be >= 1 for kind pbb", p, a.block);
      need(a.bridge >= 1, "{}.bridge={} must be >= 1 for kind pbb (1 <= bridge <= block)", p, a.bridge);
      need(a.bridge <= a.block, "{0}.bridge={1} > {0}.block={2} (PBB needs 1 <= bridge <= block)", p, a.bridge,
           a.block);
    }
  }
};

}  // namespace

void validate(const Config& c) {
  const Checker ck{config_error_prefix(c)};
  const ModelConfig& m = c.model;
  ck.at_least("model.vocab_size", m.vocab_size, 1);
  ck.at_least("model.d_model", m.d_model, 1);
  ck.at_least("model.n_layers", m.n_layers, 1);
  ck.at_least("model.n_heads", m.n_heads, 1);
  ck.at_least("model.n_kv_heads", m.n_kv_heads, 0);
  ck.at_least("model.ffn_hidden", m.ffn_hidden, 0);
  ck.need(m.d_model % m.n_heads == 0, "model.d_model={} is not divisible by model.n_heads={}", m.d_model, m.n_heads);
  ck.need(m.n_heads % m.kv_heads() == 0, "model.n_heads={} is not divisible by model.n_kv_heads={}", m.n_heads,
          m.kv_heads());
  ck.need(m.head_dim() % 2 == 0, "head dim model.d_model/model.n_heads = {}/{} = {} must be even (RoPE rotates pairs)",
          m.d_model, m.n_heads, m.head_dim());
  ck.need(!m.pattern.empty(), "model.pattern is empty (use e.g. \"LLLG\", or \"G\" for all full attention)");
  ck.need(m.pattern.find_first_not_of("LG") == std::string::npos, "model.pattern='{}' may contain only 'L' and 'G'",
          m.pattern);
  ck.attn("model.local", m.local);
  ck.attn("model.global", m.global);
  ck.at_least("model.moe.experts", m.moe.experts, 0);
  if (m.moe.experts > 0) {
    ck.at_least("model.moe.top_k", m.moe.top_k, 1);
    ck.need(m.moe.top_k <= m.moe.experts, "model.moe.top_k={} > model.moe.experts={}", m.moe.top_k, m.moe.experts);
    ck.at_least("model.moe.expert_hidden", m.moe.expert_hidden, 0);
    ck.at_least("model.moe.shared_experts", m.moe.shared_experts, 0);
    ck.at_least("model.moe.every", m.moe.every, 1);
    ck.need(m.moe.every <= m.n_layers, "model.moe.every={} > model.n_layers={}: no layer would be MoE", m.moe.every,
            m.n_layers);
    ck.one_of("model.moe.router", m.moe.router, {"softmax", "sigmoid"});
    ck.non_negative("model.moe.aux_loss_coef", m.moe.aux_loss_coef);
    ck.non_negative("model.moe.bias_update_rate", m.moe.bias_update_rate);
    ck.non_negative("model.moe.capacity_factor", m.moe.capacity_factor);
  }
  ck.positive("model.norm_eps", m.norm_eps);
  ck.positive("model.init_std", m.init_std);

  const TrainConfig& t = c.train;
  ck.at_least<int64_t>("train.steps", t.steps, 0);
  ck.at_least("train.batch_size", t.batch_size, 1);
  ck.at_least("train.micro_batch_size", t.micro_batch_size, 0);
  ck.need(t.batch_size % t.micro_batch() == 0, "train.batch_size={} is not divisible by train.micro_batch_size={}",
          t.batch_size, t.micro_batch());
  ck.at_least("train.seq_len", t.seq_len, 1);
  ck.positive("train.lr", t.lr);
  ck.within("train.min_lr_ratio", t.min_lr_ratio, 0, 1);
  ck.at_least<int64_t>("train.warmup_steps", t.warmup_steps, 0);
  ck.one_of("train.schedule", t.schedule, {"cosine", "wsd"});
  ck.within("train.decay_fraction", t.decay_fraction, 0, 1);
  ck.non_negative("train.weight_decay", t.weight_decay);
  ck.within("train.beta1", t.beta1, 0, 1, /*hi_open=*/true);
  ck.within("train.beta2", t.beta2, 0, 1, /*hi_open=*/true);
  ck.positive("train.eps", t.eps);
  ck.non_negative("train.grad_clip", t.grad_clip);
  ck.non_negative("train.z_loss", t.z_loss);
  ck.at_least<int64_t>("train.checkpoint_every", t.checkpoint_every, 0);
  ck.at_least<int64_t>("train.keep_last", t.keep_last, 0);
  ck.at_least<int64_t>("train.eval_every", t.eval_every, 0);
  ck.at_least<int64_t>("train.eval_batches", t.eval_batches, 1);
  ck.at_least("train.eval_retrieval", t.eval_retrieval, 0);
  ck.need(t.eval_retrieval == 0 || t.eval_every > 0,
          "train.eval_retrieval={} scores retrieval at the in-loop evaluations, but train.eval_every=0 has none",
          t.eval_retrieval);
  ck.need(t.eval_retrieval == 0 || t.seq_len > 2 * data::kSpanTokens,
          "train.eval_retrieval={} needs train.seq_len > {} (a source span, its repeat and a distance), got {}",
          t.eval_retrieval, 2 * data::kSpanTokens, t.seq_len);
  ck.at_least<int64_t>("train.log_every", t.log_every, 1);
  ck.one_of("train.nan_policy", t.nan_policy, {"skip", "abort"});
  ck.at_least("train.expert_parallel", t.expert_parallel, 1);
  ck.positive("train.hang_timeout_s", t.hang_timeout_s);
  ck.one_of("train.precision", t.precision, {"bf16", "fp8"});
  ck.one_of("train.fp8_format", t.fp8_format, {"hybrid", "e4m3"});
  ck.one_of("train.fp8_scaling", t.fp8_scaling, {"delayed", "current"});
  ck.at_least("train.fp8_amax_history", t.fp8_amax_history, 1);
  if (t.expert_parallel > 1) {
    ck.need(m.moe.experts > 0, "train.expert_parallel={} needs an MoE model (model.moe.experts > 0)",
            t.expert_parallel);
    ck.need(m.moe.experts % t.expert_parallel == 0,
            "model.moe.experts={} is not divisible by train.expert_parallel={}", m.moe.experts, t.expert_parallel);
  }
  ck.need(!c.data.train.empty() || !c.data.mix.empty(),
          "data.train is empty (the training token files: a path, a glob or a list; or data.mix)");
  ck.need(c.data.train.empty() || c.data.mix.empty(),
          "data.train ({}) and data.mix are both set: the mixture is the training data, remove data.train",
          c.data.train);
  for (size_t i = 0; i < c.data.mix.size(); ++i)
    ck.need(c.data.mix[i].weight > 0 && std::isfinite(c.data.mix[i].weight),
            "data.mix[{}].weight={} must be a positive number", i, yaml_double(c.data.mix[i].weight));
  ck.one_of("data.format", c.data.format, {"auto", "hylo", "llmc", "nanogpt"});
  ck.need(t.eval_every == 0 || !c.data.val.empty(),
          "data.val is empty but train.eval_every={} evaluates on it (the validation token files, or "
          "train.eval_every=0)",
          t.eval_every);
  ck.within("data.retrieval_mix", c.data.retrieval_mix, 0, 1);
  ck.need(c.data.retrieval_mix == 0 || t.seq_len >= 2 * data::kSpanTokens,
          "data.retrieval_mix={} needs train.seq_len >= {} (a source span and its repeat), got {}",
          yaml_double(c.data.retrieval_mix), 2 * data::kSpanTokens, t.seq_len);
  ck.one_of("device", c.device, {"cpu", "cuda"});
}

Device training_device(const Config& config) {
  if (config.device == "cpu") {
    keep_freed_host_memory();  // CPU steps reuse their large host tensors
    return Device::cpu;
  }
  const std::string origin = config_error_prefix(config);
  HYLO_CHECK(config.device == "cuda", "{}device: expected cpu or cuda, got '{}'", origin, config.device);
#if !HYLO_WITH_CUDA
  HYLO_FAIL("{}device: cuda requested but this hylo was built without CUDA (cmake -DHYLO_CUDA=ON)", origin);
#else
  // Asked here, so that the answers name the settings instead of the first CUDA call to fail.
  const ModelConfig& m = config.model;
  HYLO_CHECK(cuda_attention_supports_head_dim(m.head_dim()),
             "{}model: head dim model.d_model/model.n_heads = {}/{} = {} has no CUDA attention kernel (64 or 128); "
             "change model.n_heads or use --device cpu",
             origin, m.d_model, m.n_heads, m.head_dim());
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  HYLO_CHECK(err == cudaSuccess && count > 0,
             "{}device: cuda requested but no CUDA device is usable here ({}); use --device cpu", origin,
             err == cudaSuccess ? "none found" : cudaGetErrorString(err));
  if (config.train.precision == "fp8") {
    int device = 0, major = 0, minor = 0;
    HYLO_CHECK(cudaGetDevice(&device) == cudaSuccess &&
                   cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
                   cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess,
               "{}train.precision: fp8 cannot read the GPU's compute capability", origin);
    HYLO_CHECK(major * 10 + minor >= 89,
               "{}train.precision: fp8 needs an sm_89+ GPU (Ada, Hopper or newer) for FP8 tensor cores, this one is "
               "sm_{}{}; use train.precision=bf16",
               origin, major, minor);
    // cuBLASLt's FP8 GEMMs take dimensions that are multiples of 16 (kernels/gemm/gemm.h); the
    // token count of a micro-batch is one of them.
    for (const auto& [key, value] :
         {std::pair<const char*, int64_t>{"model.d_model", m.d_model}, {"model.ffn_hidden", m.ffn_hidden_size()},
          {"model.n_kv_heads x head_dim", int64_t(m.kv_heads()) * m.head_dim()},
          {"train.seq_len", int64_t(config.train.seq_len)}})
      HYLO_CHECK(value % 16 == 0, "{}train.precision: fp8 on cuda needs {} = {} to be a multiple of 16 (cuBLASLt's "
                 "FP8 GEMMs)", origin, key, value);
  }
  return Device::cuda;
#endif
}

}  // namespace hylo
