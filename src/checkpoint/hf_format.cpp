#include "checkpoint/hf_format.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>
#include <set>

#include "core/error.h"
#include "data/tokenizer.h"

namespace hylo {

namespace {

using ojson = nlohmann::ordered_json;

std::string mask_name(const AttnKindConfig& a) {
  if (a.kind == "swa") return fmt::format("swa(window {})", a.window);
  if (a.kind == "pbb") return fmt::format("pbb(block {}, bridge {})", a.block, a.bridge);
  return a.kind;
}

bool same_mask(const AttnKindConfig& a, const AttnKindConfig& b) {
  return a.kind == b.kind && (a.kind != "swa" || a.window == b.window) &&
         (a.kind != "pbb" || (a.block == b.block && a.bridge == b.bridge));
}

// What the HF side needs of the layers: the one windowed mask there may be, the one RoPE theta.
struct LayerSummary {
  std::optional<AttnKindConfig> window;
  double rope_theta = 10000;
  bool nope = false;
};

LayerSummary summarize(const ModelConfig& m) {
  LayerSummary s;
  std::optional<double> theta;
  for (int l = 0; l < m.n_layers; ++l) {
    const AttnKindConfig& a = m.layer_attn(l);
    if (a.kind != "full") {
      HYLO_CHECK(!s.window || same_mask(*s.window, a),
                 "export --format hf: layers use {} and {}; transformers' models take one windowed mask besides full "
                 "attention (use --format hylo)", mask_name(*s.window), mask_name(a));
      s.window = a;
    }
    if (a.nope) {
      s.nope = true;
      continue;
    }
    HYLO_CHECK(!theta || *theta == a.rope_theta,
               "export --format hf: layers use rope_theta {} and {}; the classes here take one (use --format hylo)",
               *theta, a.rope_theta);
    theta = a.rope_theta;
  }
  s.rope_theta = theta.value_or(m.global.rope_theta);
  HYLO_CHECK(!(m.qk_norm && s.nope),
             "export --format hf: QK-norm with NoPE layers: Qwen3 (QK-norm) has no NoPE layers and SmolLM3 (NoPE) no "
             "QK-norm (use --format hylo)");
  return s;
}

std::string config_class(const HfModelClass& cls) {
  return cls.base == HfBase::qwen3 ? "HyloQkNormConfig" : "HyloConfig";
}

// Typed reads of config.json; null counts as absent.
const ojson* find(const ojson& j, const std::string& key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

template <typename T>
T value_at(const ojson& j, const std::string& key, const std::string& path, std::optional<T> fallback = {}) {
  const ojson* v = find(j, key);
  if (!v) {
    HYLO_CHECK(fallback.has_value(), "{}: {} is missing", path, key);
    return *fallback;
  }
  bool ok;
  if constexpr (std::is_same_v<T, bool>) ok = v->is_boolean();
  else if constexpr (std::is_integral_v<T>) ok = v->is_number_integer();
  else if constexpr (std::is_floating_point_v<T>) ok = v->is_number();
  else ok = v->is_string();
  HYLO_CHECK(ok, "{}: {} has the value {} of the wrong type", path, key, v->dump());
  return v->get<T>();
}

// The RoPE theta of config.json: rope_parameters (transformers 5) or rope_theta; RoPE variants
// other than the default one have no equivalent in hylo.
double rope_theta_of(const ojson& hf, const std::string& path, double class_default) {
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    const ojson* r = find(hf, key);
    if (!r) continue;
    HYLO_CHECK(r->is_object(), "{}: {} is not an object", path, key);
    const std::string type = value_at<std::string>(*r, "rope_type", path, std::string("default"));
    HYLO_CHECK(type == "default", "{}: {}.rope_type '{}': hylo has the default RoPE only", path, key, type);
    HYLO_CHECK(value_at<double>(*r, "partial_rotary_factor", path, 1.0) == 1.0,
               "{}: {}.partial_rotary_factor: hylo rotates the whole head", path, key);
    if (find(*r, "rope_theta")) return value_at<double>(*r, "rope_theta", path);
  }
  return value_at<double>(hf, "rope_theta", path, class_default);
}

// The shortest pattern that repeats to `layers`.
std::string shortest_period(const std::string& layers) {
  for (size_t p = 1; p < layers.size(); ++p) {
    if (layers.size() % p) continue;
    bool repeats = true;
    for (size_t i = p; i < layers.size() && repeats; ++i) repeats = layers[i] == layers[i - p];
    if (repeats) return layers.substr(0, p);
  }
  return layers;
}

MoeConfig moe_from_json(const ojson& j, const std::string& path) {
  HYLO_CHECK(j.is_object(), "{}: hylo_moe is not an object", path);
  MoeConfig moe;
  const std::string p = path + ": hylo_moe";
  moe.experts = value_at<int>(j, "experts", p);
  moe.top_k = value_at<int>(j, "top_k", p);
  moe.expert_hidden = value_at<int>(j, "expert_hidden", p);
  moe.shared_experts = value_at<int>(j, "shared_experts", p);
  moe.every = value_at<int>(j, "every", p);
  moe.router = value_at<std::string>(j, "router", p);
  moe.aux_loss_coef = value_at<double>(j, "aux_loss_coef", p, moe.aux_loss_coef);
  moe.bias_update_rate = value_at<double>(j, "bias_update_rate", p, moe.bias_update_rate);
  moe.capacity_factor = value_at<double>(j, "capacity_factor", p, moe.capacity_factor);
  return moe;
}

}  // namespace

HfModelClass hf_model_class(const ModelConfig& m) {
  const LayerSummary s = summarize(m);
  HfModelClass c;
  c.remote_code = (s.window && s.window->kind == "pbb") || m.moe.experts > 0;
  c.base = m.qk_norm ? HfBase::qwen3 : (c.remote_code || s.window || s.nope) ? HfBase::smollm3 : HfBase::llama;
  if (c.remote_code) {
    c.architecture = m.qk_norm ? "HyloQkNormForCausalLM" : "HyloForCausalLM";
    c.model_type = m.qk_norm ? "hylo_qk_norm" : "hylo";
  } else if (c.base == HfBase::llama) {
    c.architecture = "LlamaForCausalLM", c.model_type = "llama";
  } else if (c.base == HfBase::smollm3) {
    c.architecture = "SmolLM3ForCausalLM", c.model_type = "smollm3";
  } else {
    c.architecture = "Qwen3ForCausalLM", c.model_type = "qwen3";
  }
  return c;
}

ojson hf_config(const Config& config, const HfModelClass& cls, const std::string& dtype) {
  const ModelConfig& m = config.model;
  const LayerSummary s = summarize(m);
  const int eot = data::kEndOfTextId;
  ojson j = ojson::object();
  j["architectures"] = ojson::array({cls.architecture});
  j["model_type"] = cls.model_type;
  if (cls.remote_code)
    j["auto_map"] = {{"AutoConfig", "modeling_hylo." + config_class(cls)},
                     {"AutoModelForCausalLM", "modeling_hylo." + cls.architecture}};
  j["vocab_size"] = m.vocab_size;
  j["hidden_size"] = m.d_model;
  j["intermediate_size"] = m.ffn_hidden_size();
  j["num_hidden_layers"] = m.n_layers;
  j["num_attention_heads"] = m.n_heads;
  j["num_key_value_heads"] = m.kv_heads();
  j["head_dim"] = m.head_dim();
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = config.train.seq_len;
  j["initializer_range"] = m.init_std;
  j["rms_norm_eps"] = m.norm_eps;
  j["rope_theta"] = s.rope_theta;  // transformers 4; 5 reads rope_parameters
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", s.rope_theta}};
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["mlp_bias"] = false;
  j["tie_word_embeddings"] = m.tie_embeddings;
  if (cls.base != HfBase::llama) {
    ojson types = ojson::array();
    for (int l = 0; l < m.n_layers; ++l)
      types.push_back(m.layer_attn(l).kind == "full" ? "full_attention" : "sliding_attention");
    j["layer_types"] = types;
    j["use_sliding_window"] = s.window.has_value();
    j["sliding_window"] = !s.window ? ojson(nullptr) : s.window->kind == "swa" ? ojson(s.window->window) : ojson(s.window->block);
  }
  if (cls.base == HfBase::smollm3) {
    ojson rope = ojson::array();
    for (int l = 0; l < m.n_layers; ++l) rope.push_back(m.layer_attn(l).nope ? 0 : 1);
    j["no_rope_layers"] = rope;
  }
  if (cls.base == HfBase::qwen3) j["max_window_layers"] = m.n_layers;  // unused beside layer_types
  if (cls.remote_code) {
    j["hylo_pbb"] = s.window && s.window->kind == "pbb" ? ojson{{"block", s.window->block}, {"bridge", s.window->bridge}}
                                                         : ojson(nullptr);
    if (m.moe.experts > 0)
      j["hylo_moe"] = {{"experts", m.moe.experts},
                       {"top_k", m.moe.top_k},
                       {"expert_hidden", m.expert_hidden_size()},
                       {"shared_experts", m.moe.shared_experts},
                       {"every", m.moe.every},
                       {"router", m.moe.router},
                       {"aux_loss_coef", m.moe.aux_loss_coef},
                       {"bias_update_rate", m.moe.bias_update_rate},
                       {"capacity_factor", m.moe.capacity_factor}};
    else
      j["hylo_moe"] = nullptr;
  }
  j["use_cache"] = true;
  j["bos_token_id"] = eot;
  j["eos_token_id"] = eot;
  j["pad_token_id"] = eot;
  j["dtype"] = dtype;
  return j;
}

ModelConfig model_from_hf_config(const ojson& hf, const std::string& path) {
  HYLO_CHECK(hf.is_object(), "{}: not a JSON object", path);
  const std::string type = value_at<std::string>(hf, "model_type", path);
  const std::set<std::string> known{"llama", "smollm3", "qwen3", "hylo", "hylo_qk_norm"};
  HYLO_CHECK(known.count(type), "{}: model_type '{}' is not one hylo imports (llama, smollm3, qwen3, hylo, hylo_qk_norm)",
             path, type);
  const bool qwen3 = type == "qwen3" || type == "hylo_qk_norm", smollm3 = type == "smollm3" || type == "hylo",
             hylo = type == "hylo" || type == "hylo_qk_norm";
  HYLO_CHECK(value_at<std::string>(hf, "hidden_act", path, std::string("silu")) == "silu",
             "{}: hidden_act '{}': hylo's FFN is SwiGLU (silu)", path, hf["hidden_act"].dump());
  for (const char* bias : {"attention_bias", "mlp_bias"})
    HYLO_CHECK(!value_at<bool>(hf, bias, path, false), "{}: {} is true: hylo's linear layers have no bias", path, bias);

  ModelConfig m;
  m.vocab_size = value_at<int>(hf, "vocab_size", path);
  HYLO_CHECK(m.vocab_size >= data::kR50kTokens,
             "{}: vocab_size {} is below GPT-2's {} tokens, the only tokenizer hylo has", path, m.vocab_size,
             data::kR50kTokens);
  m.d_model = value_at<int>(hf, "hidden_size", path);
  m.n_layers = value_at<int>(hf, "num_hidden_layers", path);
  m.n_heads = value_at<int>(hf, "num_attention_heads", path);
  HYLO_CHECK(m.d_model > 0 && m.n_layers > 0 && m.n_heads > 0 && m.d_model % m.n_heads == 0,
             "{}: hidden_size {}, num_hidden_layers {}, num_attention_heads {}: hylo needs positive sizes and "
             "heads dividing the width", path, m.d_model, m.n_layers, m.n_heads);
  const int kv = value_at<int>(hf, "num_key_value_heads", path, m.n_heads);
  m.n_kv_heads = kv == m.n_heads ? 0 : kv;
  const int head_dim = value_at<int>(hf, "head_dim", path, m.d_model / m.n_heads);
  HYLO_CHECK(head_dim == m.d_model / m.n_heads, "{}: head_dim {} is not hidden_size / num_attention_heads = {}", path,
             head_dim, m.d_model / m.n_heads);
  m.ffn_hidden = value_at<int>(hf, "intermediate_size", path);
  m.norm_eps = value_at<double>(hf, "rms_norm_eps", path, 1e-6);
  m.init_std = value_at<double>(hf, "initializer_range", path, 0.02);
  m.tie_embeddings = value_at<bool>(hf, "tie_word_embeddings", path, smollm3);
  m.qk_norm = qwen3;
  const double theta = rope_theta_of(hf, path, smollm3 ? 2e6 : qwen3 ? 1e6 : 1e4);

  // Each layer's attention from layer_types, sliding_window, no_rope_layers and hylo_pbb, with
  // the classes' own defaults where the keys are absent.
  const ojson* pbb = hylo ? find(hf, "hylo_pbb") : nullptr;
  const ojson* types = qwen3 || smollm3 ? find(hf, "layer_types") : nullptr;
  const ojson* no_rope = smollm3 ? find(hf, "no_rope_layers") : nullptr;
  HYLO_CHECK(!types || (types->is_array() && int(types->size()) == m.n_layers), "{}: layer_types is not a list of {}",
             path, m.n_layers);
  HYLO_CHECK(!no_rope || (no_rope->is_array() && int(no_rope->size()) >= m.n_layers),
             "{}: no_rope_layers is not a list of {}", path, m.n_layers);
  const bool use_window = value_at<bool>(hf, "use_sliding_window", path, false);
  const int interval = value_at<int>(hf, "no_rope_layer_interval", path, 4);
  std::vector<AttnKindConfig> layers;
  for (int l = 0; l < m.n_layers; ++l) {
    AttnKindConfig a;
    a.rope_theta = theta;
    if (smollm3 && no_rope) {
      const ojson& r = (*no_rope)[size_t(l)];
      HYLO_CHECK(r.is_number_integer(), "{}: no_rope_layers[{}] {} is not 0 or 1", path, l, r.dump());
      a.nope = r.get<int>() == 0;
    } else if (smollm3) {
      a.nope = (l + 1) % interval == 0;
    }
    bool sliding = false;
    if (types) {
      const std::string t = (*types)[size_t(l)].is_string() ? (*types)[size_t(l)].get<std::string>() : "";
      HYLO_CHECK(t == "full_attention" || t == "sliding_attention",
                 "{}: layer_types[{}] {} is not full_attention or sliding_attention", path, l, (*types)[size_t(l)].dump());
      sliding = t == "sliding_attention";
    } else if (qwen3) {
      sliding = use_window && find(hf, "sliding_window") && l >= value_at<int>(hf, "max_window_layers", path, 28);
    } else if (smollm3) {
      sliding = use_window && find(hf, "sliding_window") && !a.nope;
    }
    if (sliding) {
      const int window = value_at<int>(hf, "sliding_window", path);
      HYLO_CHECK(window >= 1, "{}: sliding_window {} must be >= 1", path, window);
      if (pbb) {
        a.kind = "pbb";
        a.block = value_at<int>(*pbb, "block", path + ": hylo_pbb");
        a.bridge = value_at<int>(*pbb, "bridge", path + ": hylo_pbb");
        HYLO_CHECK(window == a.block, "{}: sliding_window {} is not hylo_pbb.block {}", path, window, a.block);
      } else {
        a.kind = "swa";
        a.window = window;
      }
    }
    layers.push_back(a);
  }
  // Two kinds at most, as hylo's local/global pattern: the windowed one local, or (both full)
  // the one with RoPE.
  std::vector<AttnKindConfig> kinds;
  for (const AttnKindConfig& a : layers)
    if (std::find(kinds.begin(), kinds.end(), a) == kinds.end()) kinds.push_back(a);
  HYLO_CHECK(kinds.size() <= 2, "{}: the layers have {} kinds of attention; hylo has two (local and global)", path,
             kinds.size());
  if (kinds.size() == 2 && (kinds[1].kind != "full" || (kinds[0].kind == "full" && kinds[0].nope)))
    std::swap(kinds[0], kinds[1]);
  m.local = kinds[0];
  m.global = kinds.back();
  std::string pattern;
  for (const AttnKindConfig& a : layers) pattern += kinds.size() == 2 && a == m.local ? 'L' : 'G';
  m.pattern = shortest_period(pattern);

  if (const ojson* moe = hylo ? find(hf, "hylo_moe") : nullptr) m.moe = moe_from_json(*moe, path);
  return m;
}

std::vector<HfPiece> hf_pieces(const std::string& name, int64_t rows) {
  if (name == "embed") return {{"model.embed_tokens.weight", 0, rows}};
  if (name == "final_norm") return {{"model.norm.weight", 0, rows}};
  if (name == "head") return {{"lm_head.weight", 0, rows}};
  const size_t dot = name.find('.', 7);
  HYLO_CHECK(name.starts_with("blocks.") && dot != std::string::npos, "export --format hf: no Hugging Face name for {}",
             name);
  const std::string layer = "model.layers." + name.substr(7, dot - 7) + ".", part = name.substr(dot + 1);
  // hylo's suffix -> transformers' (two names: the gate rows, then the up rows).
  static const std::vector<std::pair<std::string, std::vector<std::string>>> table = {
      {"attn_norm", {"input_layernorm.weight"}},
      {"attn.wq", {"self_attn.q_proj.weight"}},
      {"attn.wk", {"self_attn.k_proj.weight"}},
      {"attn.wv", {"self_attn.v_proj.weight"}},
      {"attn.wo", {"self_attn.o_proj.weight"}},
      {"attn.q_norm", {"self_attn.q_norm.weight"}},
      {"attn.k_norm", {"self_attn.k_norm.weight"}},
      {"ffn_norm", {"post_attention_layernorm.weight"}},
      {"ffn.w_in", {"mlp.gate_proj.weight", "mlp.up_proj.weight"}},
      {"ffn.w_out", {"mlp.down_proj.weight"}},
      {"moe.router", {"mlp.gate.weight"}},
      {"moe.router_bias", {"mlp.gate.e_score_correction_bias"}},
      {"moe.w_in", {"mlp.experts.gate_up_proj"}},  // (E, 2F, D): gate rows first within each expert
      {"moe.w_out", {"mlp.experts.down_proj"}},
      {"moe.shared.w_in", {"mlp.shared_experts.gate_proj.weight", "mlp.shared_experts.up_proj.weight"}},
      {"moe.shared.w_out", {"mlp.shared_experts.down_proj.weight"}},
  };
  for (const auto& [suffix, names] : table) {
    if (suffix != part) continue;
    if (names.size() == 1) return {{layer + names[0], 0, rows}};
    return {{layer + names[0], 0, rows / 2}, {layer + names[1], rows / 2, rows}};
  }
  HYLO_FAIL("export --format hf: no Hugging Face name for {}", name);
}

}  // namespace hylo
