#include "checkpoint/hf_import.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>

#include "checkpoint/checkpoint.h"
#include "checkpoint/hf_format.h"
#include "checkpoint/run_dir.h"
#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "core/file.h"
#include "core/revision.h"
#include "nn/transformer.h"

namespace hylo {

namespace fs = std::filesystem;

namespace {

using ojson = nlohmann::ordered_json;

// What config.json's standard keys say of `config`'s model: equal for two configs exactly when
// they compute the same function (pattern spellings and unused kinds aside).
ModelConfig as_hf_sees_it(const Config& config, const std::string& path) {
  const HfModelClass cls = hf_model_class(config.model);
  return model_from_hf_config(hf_config(config, cls, "float32"), path);
}

// The config and step: hylo's own from config.json when it describes this model, else defaults.
HfImportResult choose_config(const ojson& hf, const std::string& path) {
  HfImportResult r;
  const ModelConfig model = model_from_hf_config(hf, path);
  auto own = hf.find("hylo");
  if (own != hf.end() && own->is_object() && own->contains("config_yaml") && (*own)["config_yaml"].is_string()) {
    Config embedded = config_from_yaml_text((*own)["config_yaml"].get<std::string>(), path + ": hylo.config_yaml");
    r.config = embedded;
    if (as_hf_sees_it(embedded, path) == model) {
      r.hylo_config = true;
      const auto step = own->find("step");
      r.step = step != own->end() && step->is_number_integer() ? step->get<int64_t>() : 0;
      return r;
    }
  } else {
    const auto max_pos = hf.find("max_position_embeddings");
    if (max_pos != hf.end() && max_pos->is_number_integer())
      r.config.train.seq_len = int(std::clamp<int64_t>(max_pos->get<int64_t>(), 1, 2048));
  }
  r.config.model = model;
  r.config.device = "cpu";
  r.config.source_path = path;
  return r;
}

// `weights` (transformers' names) into the model's parameters and buffers, each tensor used once.
void fill_model(Transformer& model, std::map<std::string, Tensor>& weights, const std::string& dir) {
  std::set<std::string> used;
  const auto fill = [&](const std::string& name, Tensor& value) {
    const int64_t rows = value.size(0), row = value.numel() / std::max<int64_t>(rows, 1);
    for (const HfPiece& piece : hf_pieces(name, rows)) {
      auto it = weights.find(piece.name);
      HYLO_CHECK(it != weights.end(), "{}: the weights lack {} (hylo's {})", dir, piece.name, name);
      Shape expected = value.shape();
      expected[0] = piece.end - piece.begin;
      HYLO_CHECK(it->second.shape() == expected, "{}: {} is {}, config.json makes it {}", dir, piece.name,
                 shape_str(it->second.shape()), shape_str(expected));
      std::memcpy(value.data<float>() + piece.begin * row, it->second.data<float>(), it->second.nbytes());
      used.insert(piece.name);
    }
  };
  for (Parameter& p : model.parameters()) fill(p.name, p.var.mutable_value());
  for (NamedBufferRef& b : model.buffers()) fill(b.name, b.value);
  if (model.config().tie_embeddings) {  // a tied head saved anyway must be the embedding
    auto head = weights.find("lm_head.weight");
    if (head != weights.end()) {
      const Tensor& embed = weights.at("model.embed_tokens.weight");
      HYLO_CHECK(head->second.shape() == embed.shape() &&
                     std::memcmp(head->second.raw(), embed.raw(), embed.nbytes()) == 0,
                 "{}: lm_head.weight differs from model.embed_tokens.weight, but tie_word_embeddings is true", dir);
      used.insert(head->first);
    }
  }
  for (const auto& [name, value] : weights)
    HYLO_CHECK(used.count(name) || name.ends_with("rotary_emb.inv_freq"),
               "{}: the weights hold {}, which config.json's model has no place for", dir, name);
}

}  // namespace

HfImportResult import_hf(const HfImportOptions& o) {
  const std::string path = (fs::path(o.hf_dir) / "config.json").string();
  const std::optional<std::string> text = read_file(path);
  HYLO_CHECK(text.has_value(), "{}: cannot read the file", path);
  ojson hf;
  try {
    hf = ojson::parse(*text);
  } catch (const nlohmann::json::exception& e) {
    HYLO_FAIL("{}: not valid JSON: {}", path, e.what());
  }
  HfImportResult r = choose_config(hf, path);
  validate(r.config);
  std::error_code ec;
  HYLO_CHECK(o.overwrite || !fs::exists(o.run_dir, ec) || fs::is_empty(o.run_dir, ec),
             "{}: already exists (use --overwrite to replace its checkpoints)", o.run_dir);

  std::map<std::string, Tensor> weights = read_hf_weights(o.hf_dir);
  Transformer model(r.config.model, r.config.train.seed);
  fill_model(model, weights, o.hf_dir);

  CheckpointState state;
  state.step = r.step;
  for (const Parameter& p : model.parameters()) {
    state.model.push_back({p.name, p.var.value()});
    state.optim_m.push_back({p.name, Tensor::zeros(p.var.shape(), DType::f32)});
    state.optim_v.push_back({p.name, Tensor::zeros(p.var.shape(), DType::f32)});
  }
  for (NamedBufferRef& b : model.buffers()) state.buffers.push_back({b.name, b.value});
  state.rng = {r.config.train.seed, uint64_t(r.step)};
  state.config_yaml = to_yaml(r.config);
  state.meta = {{"version", "1"}, {"git_revision", git_revision()}, {"world_size", "1"}, {"layout", "dp=1"},
                {"device", "cpu"}, {"imported_from", o.hf_dir}};
  prepare_run_dir(o.run_dir, state.config_yaml, o.overwrite ? RunDirMode::overwrite : RunDirMode::fresh);
  r.checkpoint = checkpoint_path(o.run_dir, r.step);
  save_checkpoint(r.checkpoint, state);
  return r;
}

}  // namespace hylo
