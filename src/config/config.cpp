// YAML <-> Config. One field table (visit_fields) is the only list of keys: the loader assigns
// through it, to_yaml walks it, and unknown keys are matched against it for "did you mean".
#include "config/config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <type_traits>

#include "core/error.h"
#include "core/suggest.h"
#include "config/config_text.h"

namespace hylo {
namespace {

// ---------------------------------------------------------------------------------------------
// The field table. f(key, field, aliases): `aliases` are names people bring from other
// frameworks (HF, llm.c, Megatron); they are never accepted, only used to suggest the real key.

template <class A, class F>
void visit_attn(const std::string& p, A& a, F& f) {
  f(p + ".kind", a.kind, "type attention mask");
  f(p + ".window", a.window, "window_size sliding_window");
  f(p + ".block", a.block, "block_size");
  f(p + ".bridge", a.bridge, "bridge_size bridge_width");
  f(p + ".rope_theta", a.rope_theta, "theta rope_base base");
  f(p + ".nope", a.nope, "no_rope");
}

// C is Config or const Config, so one table serves reading and writing.
template <class C, class F>
void visit_fields(C& c, F&& f) {
  auto& m = c.model;
  f(std::string("model.vocab_size"), m.vocab_size, "vocab n_vocab padded_vocab_size");
  f(std::string("model.d_model"), m.d_model, "hidden_size dim n_embd d_embed embed_dim");
  f(std::string("model.n_layers"), m.n_layers, "num_layers n_layer num_hidden_layers depth layers");
  f(std::string("model.n_heads"), m.n_heads, "num_heads n_head num_attention_heads heads");
  f(std::string("model.n_kv_heads"), m.n_kv_heads, "num_kv_heads n_kv_head num_key_value_heads kv_heads");
  f(std::string("model.ffn_hidden"), m.ffn_hidden, "intermediate_size ffn_dim ffn_hidden_size mlp_hidden");
  f(std::string("model.pattern"), m.pattern, "layer_pattern layers_pattern");
  visit_attn("model.local", m.local, f);
  visit_attn("model.global", m.global, f);
  f(std::string("model.moe.experts"), m.moe.experts, "num_experts n_experts n_routed_experts");
  f(std::string("model.moe.top_k"), m.moe.top_k, "topk k num_experts_per_tok");
  f(std::string("model.moe.expert_hidden"), m.moe.expert_hidden, "moe_intermediate_size expert_dim");
  f(std::string("model.moe.shared_experts"), m.moe.shared_experts, "n_shared_experts num_shared_experts");
  f(std::string("model.moe.every"), m.moe.every, "moe_every moe_layer_freq interval");
  f(std::string("model.moe.router"), m.moe.router, "router_type gate scoring_func");
  f(std::string("model.moe.aux_loss_coef"), m.moe.aux_loss_coef, "aux_loss alpha load_balance_coef");
  f(std::string("model.moe.bias_update_rate"), m.moe.bias_update_rate, "bias_update_speed gamma");
  f(std::string("model.moe.capacity_factor"), m.moe.capacity_factor, "capacity");
  f(std::string("model.tie_embeddings"), m.tie_embeddings, "tie_word_embeddings tied");
  f(std::string("model.qk_norm"), m.qk_norm, "qknorm use_qk_norm");
  f(std::string("model.norm_eps"), m.norm_eps, "rms_norm_eps eps layer_norm_eps");
  f(std::string("model.init_std"), m.init_std, "initializer_range std");

  auto& t = c.train;
  f(std::string("train.steps"), t.steps, "max_steps train_steps total_steps num_steps iters");
  f(std::string("train.batch_size"), t.batch_size, "global_batch_size batch");
  f(std::string("train.micro_batch_size"), t.micro_batch_size, "micro_batch micro_bs");
  f(std::string("train.seq_len"), t.seq_len, "seq_length max_seq_len context_length block_size");
  f(std::string("train.lr"), t.lr, "learning_rate max_lr peak_lr");
  f(std::string("train.min_lr_ratio"), t.min_lr_ratio, "min_lr final_lr_ratio");
  f(std::string("train.warmup_steps"), t.warmup_steps, "warmup warmup_iters");
  f(std::string("train.schedule"), t.schedule, "lr_schedule scheduler lr_scheduler");
  f(std::string("train.decay_fraction"), t.decay_fraction, "decay_ratio cooldown_fraction");
  f(std::string("train.weight_decay"), t.weight_decay, "wd");
  f(std::string("train.beta1"), t.beta1, "adam_beta1");
  f(std::string("train.beta2"), t.beta2, "adam_beta2");
  f(std::string("train.eps"), t.eps, "adam_eps epsilon");
  f(std::string("train.grad_clip"), t.grad_clip, "max_grad_norm clip_grad grad_norm_clip");
  f(std::string("train.z_loss"), t.z_loss, "z_loss_coef");
  f(std::string("train.seed"), t.seed, "random_seed");
  f(std::string("train.checkpoint_every"), t.checkpoint_every, "save_every ckpt_every save_interval");
  f(std::string("train.keep_last"), t.keep_last, "keep_last_k max_checkpoints");
  f(std::string("train.eval_every"), t.eval_every, "eval_interval val_every");
  f(std::string("train.eval_batches"), t.eval_batches, "eval_iters val_batches");
  f(std::string("train.eval_retrieval"), t.eval_retrieval, "retrieval_eval eval_copy");
  f(std::string("train.log_every"), t.log_every, "log_interval");
  f(std::string("train.nan_policy"), t.nan_policy, "on_nan");
  f(std::string("train.recompute"), t.recompute, "activation_checkpointing gradient_checkpointing checkpoint_activations");
  f(std::string("train.zero1"), t.zero1, "zero zero_stage shard_optimizer");
  f(std::string("train.expert_parallel"), t.expert_parallel, "ep ep_size expert_parallel_size expert_model_parallel_size");
  f(std::string("train.hang_timeout_s"), t.hang_timeout_s, "timeout nccl_timeout collective_timeout dist_timeout");
  f(std::string("train.precision"), t.precision, "dtype mixed_precision fp8");
  f(std::string("train.fp8_format"), t.fp8_format, "fp8_recipe");
  f(std::string("train.fp8_scaling"), t.fp8_scaling, "amax_scaling scaling");
  f(std::string("train.fp8_amax_history"), t.fp8_amax_history, "amax_history_len amax_history");

  f(std::string("data.train"), c.data.train, "train_bin train_path train_data train_files");
  f(std::string("data.val"), c.data.val, "val_bin val_path val_data valid validation val_files");
  f(std::string("data.mix"), c.data.mix, "mixture datasets blend data_mix weights");
  f(std::string("data.format"), c.data.format, "token_format file_format");
  f(std::string("data.retrieval_mix"), c.data.retrieval_mix, "copy_task synthetic_retrieval retrieval_rate");
  f(std::string("device"), c.device, "backend");
}

std::string section_of(const std::string& key) {
  auto dot = key.rfind('.');
  return dot == std::string::npos ? "" : key.substr(0, dot);
}
std::string leaf_of(const std::string& key) {
  auto dot = key.rfind('.');
  return dot == std::string::npos ? key : key.substr(dot + 1);
}

struct Schema {
  std::vector<std::string> leaves;                           // table order
  std::vector<std::string> sections;                         // "model", "model.local", ... (table order)
  std::vector<std::pair<std::string, std::string>> names;    // (key, name or alias) for suggestions
};

const Schema& schema() {
  static const Schema s = [] {
    Schema s;
    const Config c;
    visit_fields(c, [&](const std::string& key, const auto&, std::string_view aliases) {
      s.leaves.push_back(key);
      s.names.emplace_back(key, leaf_of(key));
      std::istringstream words{std::string(aliases)};
      for (std::string a; words >> a;) s.names.emplace_back(key, a);
      for (std::string sec = section_of(key); !sec.empty(); sec = section_of(sec))
        if (std::find(s.sections.begin(), s.sections.end(), sec) == s.sections.end()) s.sections.push_back(sec);
    });
    for (const auto& sec : s.sections) s.names.emplace_back(sec, leaf_of(sec));
    return s;
  }();
  return s;
}

// The nearest valid key by edit distance of the last component (against names and aliases), with
// a small penalty for a different section so that `model.lr` still finds `train.lr`.
std::string nearest_key(const std::string& key) {
  const std::string sec = section_of(key), leaf = leaf_of(key);
  size_t best = SIZE_MAX;
  std::string best_key;
  for (const auto& [cand, name] : schema().names) {
    size_t d = edit_distance(leaf, name) + (section_of(cand) == sec ? 0 : 2);
    if (d < best) best = d, best_key = cand;
  }
  return best <= std::max<size_t>(2, leaf.size() / 3) ? best_key : "";
}

std::string unknown_key_message(const std::string& origin, const std::string& key) {
  std::string near = nearest_key(key);
  if (!near.empty()) return fmt::format("{}: unknown key '{}' (did you mean '{}'?)", origin, key, near);
  const std::string sec = section_of(key);
  std::vector<std::string> valid;  // table order: leaves and sections as they first appear
  for (const std::string& leaf : schema().leaves) {
    for (std::string k = leaf; !k.empty(); k = section_of(k)) {
      if (section_of(k) != sec) continue;
      if (std::find(valid.begin(), valid.end(), leaf_of(k)) == valid.end()) valid.push_back(leaf_of(k));
      break;
    }
  }
  return fmt::format("{}: unknown key '{}' (valid keys {}: {})", origin, key,
                     sec.empty() ? "at the top level" : "under '" + sec + "'", fmt::join(valid, ", "));
}

// ---------------------------------------------------------------------------------------------
// Scalars. YAML spellings are accepted where they differ from C++'s (.inf, yes/no, +1, 1e6 for
// an integer field when it is exactly integral).

std::string describe(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "nothing";
  if (n.IsMap()) return "a mapping";
  if (n.IsSequence()) return "a list";
  return fmt::format("'{}'", n.Scalar());
}

std::optional<double> parse_double(std::string_view s) {
  if (s == ".inf" || s == ".Inf" || s == ".INF" || s == "+.inf" || s == "+.Inf" || s == "+.INF")
    return std::numeric_limits<double>::infinity();
  if (s == "-.inf" || s == "-.Inf" || s == "-.INF") return -std::numeric_limits<double>::infinity();
  if (s == ".nan" || s == ".NaN" || s == ".NAN") return std::numeric_limits<double>::quiet_NaN();
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  if (s.empty() || std::isalpha(static_cast<unsigned char>(s[0]))) return std::nullopt;  // "inf", "nan"
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

const std::vector<std::string> kMixKeys = {"path", "weight"};

struct ScalarTarget {
  const std::string& origin;
  const std::string& key;
  const YAML::Node& node;

  [[noreturn]] void fail(std::string_view expected) const {
    HYLO_FAIL("{}: {}: expected {}, got {}", origin, key, expected, describe(node));
  }
  std::string_view text(std::string_view expected) const {
    if (!node.IsScalar()) fail(expected);
    return node.Scalar();
  }

  template <class T>
  void integer(T& out, std::string_view expected) const {
    std::string_view s = text(expected);
    if (!s.empty() && s[0] == '+') s.remove_prefix(1);
    T v{};
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc() && end == s.data() + s.size()) {
      out = v;
      return;
    }
    if (auto d = parse_double(s); d && std::isfinite(*d) && *d == std::floor(*d)) {
      if (std::is_unsigned_v<T> && *d < 0) fail(expected);
      if (*d >= double(std::numeric_limits<T>::min()) && *d <= double(std::numeric_limits<T>::max())) {
        out = T(*d);
        return;
      }
      HYLO_FAIL("{}: {}: {} is out of range ({} to {})", origin, key, describe(node), std::numeric_limits<T>::min(),
                std::numeric_limits<T>::max());
    }
    fail(expected);
  }

  void assign(int& out) const { integer(out, "an integer"); }
  void assign(int64_t& out) const { integer(out, "an integer"); }
  void assign(uint64_t& out) const { integer(out, "a non-negative integer"); }
  void assign(double& out) const {
    auto v = parse_double(text("a number"));
    if (!v) fail("a number");
    out = *v;
  }
  void assign(bool& out) const {
    std::string s(text("true or false"));
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
    if (s == "true" || s == "yes" || s == "on") out = true;
    else if (s == "false" || s == "no" || s == "off") out = false;
    else fail("true or false");
  }
  void assign(PathList& out) const {
    out.items.clear();
    if (node.IsNull()) return;
    if (node.IsScalar()) {
      out = PathList(node.Scalar());
      return;
    }
    if (!node.IsSequence()) fail("a path, a glob or a list of them");
    for (const auto& item : node) {
      if (!item.IsScalar() || item.Scalar().empty()) fail("a list of paths or globs");
      out.items.push_back(item.Scalar());
    }
  }
  void assign(std::vector<MixEntry>& out) const {
    out.clear();
    if (node.IsNull()) return;
    if (!node.IsSequence()) fail("a list of {path: GLOB_OR_LIST, weight: W}");
    for (size_t i = 0; i < node.size(); ++i) {
      const YAML::Node& item = node[i];
      const std::string at = fmt::format("{}[{}]", key, i);
      if (!item.IsMap()) HYLO_FAIL("{}: {}: expected {{path: GLOB_OR_LIST, weight: W}}, got {}", origin, at, describe(item));
      MixEntry entry;
      bool has_path = false;
      for (const auto& kv : item) {
        const std::string name = kv.first.IsScalar() ? kv.first.Scalar() : "?";
        const std::string sub = at + "." + name;
        if (name == "path") ScalarTarget{origin, sub, kv.second}.assign(entry.path), has_path = true;
        else if (name == "weight") ScalarTarget{origin, sub, kv.second}.assign(entry.weight);
        else HYLO_FAIL("{}: unknown key '{}'{} (a mixture entry has path and weight)", origin, sub,
                       did_you_mean(name, kMixKeys));
      }
      if (!has_path || entry.path.empty()) HYLO_FAIL("{}: {}: no path (the dataset's token files or globs)", origin, at);
      out.push_back(std::move(entry));
    }
  }
  void assign(std::string& out) const {
    if (node.IsNull()) {  // `val:` with nothing after it means the empty string, not an error
      out.clear();
      return;
    }
    out = std::string(text("a string"));
  }
};

// ---------------------------------------------------------------------------------------------

class Loader {
 public:
  Loader(Config& config, std::string origin) : config_(config), origin_(std::move(origin)) {}

  // `path` is "" for the document root, a section ("model.local") or a leaf key.
  void apply(const std::string& path, const YAML::Node& node) {
    const Schema& s = schema();
    if (path.empty() || std::find(s.sections.begin(), s.sections.end(), path) != s.sections.end()) {
      if (node.IsNull()) return;  // `moe:` with nothing under it keeps the defaults
      HYLO_CHECK(node.IsMap(), "{}: {}: expected a mapping, got {}", origin_, path.empty() ? "top level" : path,
                 describe(node));
      for (const auto& kv : node) {
        HYLO_CHECK(kv.first.IsScalar(), "{}: {}: keys must be plain names, got {}", origin_,
                   path.empty() ? "top level" : path, describe(kv.first));
        // A dotted key in the file ("model.local.block: 256") works too: it resolves like --set.
        std::string child = path.empty() ? kv.first.Scalar() : path + "." + kv.first.Scalar();
        if (!seen_.insert(child).second)
          HYLO_FAIL("{}{}: duplicate key '{}'", origin_, where(kv.first), child);
        apply(child, kv.second);
      }
      return;
    }
    if (std::find(s.leaves.begin(), s.leaves.end(), path) == s.leaves.end())
      throw Error(unknown_key_message(origin_, path), __FILE__, __LINE__);
    visit_fields(config_, [&](const std::string& key, auto& field, std::string_view) {
      if (key == path) ScalarTarget{origin_, key, node}.assign(field);
    });
  }

 private:
  static std::string where(const YAML::Node& n) {
    YAML::Mark m = n.Mark();
    return m.is_null() ? "" : fmt::format(":{}:{}", m.line + 1, m.column + 1);
  }
  Config& config_;
  std::string origin_;
  std::set<std::string> seen_;
};

// yaml-cpp reports tab indentation as "illegal map value"; say what is wrong instead.
bool tab_indented(const std::string& text, int line) {
  std::istringstream lines(text);
  std::string l;
  for (int i = 0; i <= line && std::getline(lines, l); ++i) {
  }
  size_t indent_end = l.find_first_not_of(" \t");
  return l.substr(0, indent_end).find('\t') != std::string::npos;
}

YAML::Node parse_document(const std::string& text, const std::string& origin) {
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(text);
  } catch (const YAML::ParserException& e) {
    if (e.mark.is_null()) HYLO_FAIL("{}: malformed YAML: {}", origin, e.msg);
    HYLO_FAIL("{}:{}:{}: malformed YAML: {}{}", origin, e.mark.line + 1, e.mark.column + 1, e.msg,
              tab_indented(text, e.mark.line) ? " (tabs are not allowed in YAML indentation)" : "");
  } catch (const YAML::Exception& e) {
    HYLO_FAIL("{}: malformed YAML: {}", origin, e.msg);
  }
  HYLO_CHECK(docs.size() <= 1, "{}: expected one YAML document, found {}", origin, docs.size());
  return docs.empty() ? YAML::Node() : docs[0];
}

void apply_override(Config& config, const std::string& arg) {
  const std::string origin = "--set " + arg;
  const auto [key, text] = split_override(arg);
  YAML::Node value;
  try {
    value = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    HYLO_FAIL("{}: malformed value: {}", origin, e.msg);
  }
  Loader(config, origin).apply(key, value);
}

// Strings that another YAML reader would take for a number, bool or null get quoted.
bool needs_quotes(const std::string& s) {
  if (s.empty() || parse_double(s) || s == "~") return true;
  std::string l = s;
  std::transform(l.begin(), l.end(), l.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
  for (const char* word : {"true", "false", "yes", "no", "on", "off", "null", "y", "n"})
    if (l == word) return true;
  return false;
}

void emit(YAML::Emitter& out, const std::string& v) {
  if (needs_quotes(v)) out << YAML::DoubleQuoted;
  out << v;
}
void emit(YAML::Emitter& out, const PathList& v) {
  if (v.items.size() == 1) return emit(out, v.items[0]);
  if (v.items.empty()) return emit(out, std::string());
  out << YAML::Flow << YAML::BeginSeq;
  for (const std::string& item : v.items) emit(out, item);
  out << YAML::EndSeq;
}
void emit(YAML::Emitter& out, double v) { out << yaml_double(v); }
void emit(YAML::Emitter& out, const std::vector<MixEntry>& mix) {
  if (mix.empty()) {
    out << YAML::Flow << YAML::BeginSeq << YAML::EndSeq;
    return;
  }
  out << YAML::BeginSeq;
  for (const MixEntry& e : mix) {
    out << YAML::Flow << YAML::BeginMap << YAML::Key << "path" << YAML::Value;
    emit(out, e.path);
    out << YAML::Key << "weight" << YAML::Value;
    emit(out, e.weight);
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
}
void emit(YAML::Emitter& out, bool v) { out << (v ? "true" : "false"); }
template <class T>
  requires std::is_integral_v<T>
void emit(YAML::Emitter& out, T v) {
  out << fmt::format("{}", v);
}

// "0 = derived" keys keep their 0 (so the YAML reads back equal) with the derived value beside it.
std::string resolved_note(const Config& c, const std::string& key) {
  if (key == "model.n_kv_heads" && c.model.n_kv_heads == 0) return fmt::format("= n_heads = {}", c.model.kv_heads());
  if (key == "model.ffn_hidden" && c.model.ffn_hidden == 0) return fmt::format("= {}", c.model.ffn_hidden_size());
  if (key == "model.moe.expert_hidden" && c.model.moe.experts > 0 && c.model.moe.expert_hidden == 0)
    return fmt::format("= {}", c.model.expert_hidden_size());
  if (key == "train.micro_batch_size" && c.train.micro_batch_size == 0)
    return fmt::format("= batch_size = {}", c.train.micro_batch());
  return "";
}

std::vector<std::string> split_dots(const std::string& key) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t dot; (dot = key.find('.', start)) != std::string::npos; start = dot + 1)
    parts.push_back(key.substr(start, dot - start));
  parts.push_back(key.substr(start));
  return parts;
}

}  // namespace

std::string yaml_double(double v) {
  if (std::isnan(v)) return ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  // The shortest text that reads back to the same bits, with a '.' in the mantissa so that
  // YAML 1.1 readers (PyYAML) also see a float: 1e-05 -> 1.0e-05.
  std::string t = fmt::format("{}", v);
  if (auto e = t.find('e'); e != std::string::npos && t.find('.') == std::string::npos) t.insert(e, ".0");
  return t;
}

std::string config_error_prefix(const Config& c) { return c.source_path.empty() ? "" : c.source_path + ": "; }

std::pair<std::string, std::string> split_override(const std::string& arg) {
  const size_t eq = arg.find('=');
  HYLO_CHECK(eq != std::string::npos && eq > 0, "--set {}: expected KEY=VALUE, e.g. --set train.lr=3e-4", arg);
  std::string key = arg.substr(0, eq);
  key.erase(key.find_last_not_of(" \t") + 1);
  key.erase(0, key.find_first_not_of(" \t"));
  return {key, arg.substr(eq + 1)};
}

// ---------------------------------------------------------------------------------------------

Config config_from_yaml_text(const std::string& yaml, const std::string& origin,
                             const std::vector<std::string>& overrides) {
  Config config;
  config.source_path = origin;
  Loader(config, origin).apply("", parse_document(yaml, origin));
  for (const auto& o : overrides) apply_override(config, o);
  // A mixture is the training data: data.train's default then gives way to it (one set on purpose
  // beside data.mix is refused by validate()).
  if (!config.data.mix.empty() && config.data.train == DataConfig{}.train) config.data.train = PathList();
  validate(config);
  return config;
}

std::vector<data::DatasetSpec> train_datasets(const DataConfig& d) {
  const data::ShardFormat format = data::parse_shard_format(d.format, "data.format");
  if (d.mix.empty()) return {data::DatasetSpec{d.train.items, 1, format}};
  std::vector<data::DatasetSpec> out;
  for (const MixEntry& e : d.mix) out.push_back({e.path.items, e.weight, format});
  return out;
}

data::DatasetSpec val_dataset(const DataConfig& d) {
  return {d.val.items, 1, data::parse_shard_format(d.format, "data.format")};
}

data::ShardReader first_val_shard(const DataConfig& d) {
  return data::ShardReader(data::resolve_shard_paths(d.val.items, "data.val").front(), /*verify_payload=*/true,
                           data::parse_shard_format(d.format, "data.format"));
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  HYLO_CHECK(!std::filesystem::is_directory(path, ec), "{}: is a directory, not a config file", path);
  std::ifstream in(path, std::ios::binary);
  HYLO_CHECK(in.good(), "{}: cannot open config file (no such file or not readable)", path);
  std::ostringstream text;
  text << in.rdbuf();
  HYLO_CHECK(!in.bad(), "{}: error while reading the config file", path);
  return config_from_yaml_text(text.str(), path, overrides);
}

std::string to_yaml(const Config& c) {
  YAML::Emitter out;
  out.SetIndent(2);
  out << YAML::BeginMap;
  std::vector<std::string> open;  // sections currently open; the table keeps sections contiguous
  visit_fields(c, [&](const std::string& key, const auto& value, std::string_view) {
    std::vector<std::string> parts = split_dots(key);
    size_t common = 0;
    while (common < open.size() && common + 1 < parts.size() && open[common] == parts[common]) ++common;
    for (; open.size() > common; open.pop_back()) out << YAML::EndMap;
    for (size_t i = common; i + 1 < parts.size(); ++i) {
      out << YAML::Key << parts[i] << YAML::Value << YAML::BeginMap;
      open.push_back(parts[i]);
    }
    out << YAML::Key << parts.back() << YAML::Value;
    emit(out, value);
    if (std::string note = resolved_note(c, key); !note.empty()) out << YAML::Comment(note);
  });
  for (; !open.empty(); open.pop_back()) out << YAML::EndMap;
  out << YAML::EndMap;
  HYLO_CHECK(out.good(), "to_yaml: YAML emitter failed: {}", out.GetLastError());
  return std::string(out.c_str()) + "\n";
}

// JSON of the list-valued keys (nlohmann finds these by argument-dependent lookup).
void to_json(nlohmann::ordered_json& j, const PathList& p) {
  if (p.items.size() == 1) j = p.items[0];
  else j = p.items;
}
void to_json(nlohmann::ordered_json& j, const MixEntry& e) { j = {{"path", e.path}, {"weight", e.weight}}; }

nlohmann::ordered_json section_to_json(const Config& c, const std::string& section) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  visit_fields(c, [&](const std::string& key, const auto& value, std::string_view) {
    if (!key.starts_with(section + ".")) return;
    nlohmann::ordered_json* node = &out;  // descends from the section, creating objects on the way
    for (const std::string& part : split_dots(key.substr(section.size() + 1))) node = &(*node)[part];
    *node = value;
  });
  return out;
}

std::vector<std::string> config_keys() { return schema().leaves; }

}  // namespace hylo
