// hylo's models as Hugging Face transformers models (`hylo export --format hf`, `hylo import`).
//
// hylo's block is Llama's (pre-norm RMSNorm, rotate-half RoPE, SwiGLU, (out, in) weights, no
// biases, tied head by default); what differs is names, the fused gate|up projection and the
// config. The class that computes exactly what a model computes:
//   LlamaForCausalLM    every layer full attention with RoPE, no QK-norm, dense FFN
//   SmolLM3ForCausalLM  full and sliding-window layers (layer_types, sliding_window) and NoPE
//                       layers (no_rope_layers), no QK-norm, dense
//   Qwen3ForCausalLM    QK-norm (per head, before RoPE), full and sliding-window layers, dense
//   HyloForCausalLM, HyloQkNormForCausalLM (model_type hylo, hylo_qk_norm; trust_remote_code):
//                       PBB layers or MoE FFNs, on SmolLM3 or (QK-norm) Qwen3, from the
//                       modeling_hylo.py shipped in the directory (hf_modeling_py()).
// transformers' sliding window W lets query t attend key s when t - s < W (masking_utils'
// sliding_window_overlay: kv_idx > q_idx - W; its cache keeps W - 1 past keys), which is
// hylo's swa(W): sliding_window is the window itself. A PBB(b, w) layer is a sliding layer with
// sliding_window = b (every key it attends lies in the last b) narrowed by the PBB rule.
//
// No transformers MoE class routes as hylo does: Mixtral, Qwen3-MoE and OLMoE (softmax, top-k,
// renormalised) have neither the aux-loss-free selection bias nor an ungated shared expert
// (Qwen2-MoE's shared expert is sigmoid-gated), and Qwen3-MoE and OLMoE force QK-norm (OLMoE's
// over the whole projection); DeepSeek-V3 and GLM-4-MoE have the bias and shared experts but
// score with a sigmoid only and put dense layers only first (first_k_dense_replace, not hylo's
// every k-th), and DeepSeek-V3's attention is MLA; ERNIE-4.5-MoE routes as hylo's
// softmax router does but rotates interleaved pairs (not rotate-half) and has no sliding or NoPE
// layers. So MoE models use modeling_hylo.py too.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "config/config.h"

namespace hylo {

enum class HfBase { llama, smollm3, qwen3 };

struct HfModelClass {
  HfBase base = HfBase::llama;
  bool remote_code = false;  // PBB or MoE: HyloForCausalLM / HyloQkNormForCausalLM
  std::string architecture, model_type;
};

// The class of `model`; one line naming what no class here computes (two windowed masks, RoPE
// thetas that differ by layer kind, QK-norm with NoPE layers).
HfModelClass hf_model_class(const ModelConfig& model);

// config.json of `config`'s model as `cls` (vocab_size is the model's padded vocabulary; the
// padding rows are real rows of embed_tokens). `dtype`: "float32" or "bfloat16".
nlohmann::ordered_json hf_config(const Config& config, const HfModelClass& cls, const std::string& dtype);

// The model a config.json describes (llama, smollm3, qwen3, hylo, hylo_qk_norm); errors are one
// line naming `path` and the key.
ModelConfig model_from_hf_config(const nlohmann::ordered_json& hf, const std::string& path);

// Where a hylo parameter or buffer lives in the Hugging Face state dict: whole, or (fused
// gate|up projections) as two tensors of its first and second half of rows.
struct HfPiece {
  std::string name;
  int64_t begin = 0, end = 0;  // rows of dim 0
};
std::vector<HfPiece> hf_pieces(const std::string& hylo_name, int64_t rows);

// The text of modeling_hylo.py.
const char* hf_modeling_py();

}  // namespace hylo
