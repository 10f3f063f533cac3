// Model shape as plain data. Parsing, defaults-in-YAML and validation live in train/config.h so
// that nn/ never depends on yaml-cpp; the YAML key of every field is its path here
// (model.local.block, model.moe.top_k, ...).
#pragma once
#include <string>

namespace hylo {

// One attention layer kind (SPEC §1). Which fields matter depends on `kind`:
// swa reads `window`, pbb reads `block` and `bridge`, full reads neither.
struct AttnKindConfig {
  std::string kind = "full";  // full | swa | pbb
  int window = 0, block = 0, bridge = 0;
  double rope_theta = 10000;
  bool nope = false;  // no positional encoding at all in this kind of layer
  bool operator==(const AttnKindConfig&) const = default;
};

struct MoeConfig {
  int experts = 0 /*0 = dense*/, top_k = 2, expert_hidden = 0 /*0 = the dense FFN's hidden size*/,
      shared_experts = 0, every = 1 /*an MoE FFN in every k-th layer, the others dense*/;
  std::string router = "softmax";  // softmax | sigmoid
  double aux_loss_coef = 0.01, bias_update_rate = 0.0 /*> 0 enables aux-loss-free bias*/,
         capacity_factor = 0.0 /*0 = dropless*/;
  bool operator==(const MoeConfig&) const = default;
};

struct ModelConfig {
  int vocab_size = 50304, d_model = 256, n_layers = 4, n_heads = 4, n_kv_heads = 0 /*0 = n_heads*/,
      ffn_hidden = 0 /*0 = 8/3·d rounded up to a multiple of 64*/;
  std::string pattern = "LLLG";  // 'L' = local, 'G' = global; repeated to n_layers
  AttnKindConfig local{"pbb", 0, 128, 32}, global{"full"};
  MoeConfig moe;
  bool tie_embeddings = true, qk_norm = false;
  double norm_eps = 1e-5, init_std = 0.02;

  int head_dim() const { return n_heads > 0 ? d_model / n_heads : 0; }
  int kv_heads() const { return n_kv_heads > 0 ? n_kv_heads : n_heads; }
  // The SwiGLU hidden size actually built: 8/3·d keeps the parameter count of a 4·d GELU MLP;
  // rounding to 64 keeps GEMM tiles full.
  int ffn_hidden_size() const { return ffn_hidden > 0 ? ffn_hidden : (8 * d_model / 3 + 63) / 64 * 64; }
  int expert_hidden_size() const { return moe.expert_hidden > 0 ? moe.expert_hidden : ffn_hidden_size(); }
  // 'L' or 'G' for 0-based `layer`: the pattern repeated to the depth.
  char layer_kind(int layer) const { return pattern.empty() ? 'G' : pattern[size_t(layer) % pattern.size()]; }
  const AttnKindConfig& layer_attn(int layer) const { return layer_kind(layer) == 'L' ? local : global; }
  // MoE layers are the (every)-th, (2·every)-th, ... counting from 1, so `every: 2` alternates
  // dense/MoE starting dense (the usual convention: the first layer stays dense).
  bool layer_is_moe(int layer) const { return moe.experts > 0 && moe.every > 0 && (layer + 1) % moe.every == 0; }

  bool operator==(const ModelConfig&) const = default;
};

}  // namespace hylo
