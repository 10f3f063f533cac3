#include "checkpoint/export.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "core/file.h"
#include "core/rng.h"
#include "data/tokenizer.h"
#include "ops/cpu/cross_entropy.h"
#include "checkpoint/buffers.h"
#include "config/config.h"

namespace hylo {

namespace fs = std::filesystem;

namespace {

const char* safetensors_dtype(DType t) {
  if (t == DType::f32) return "F32";
  HYLO_CHECK(t == DType::bf16, "export: safetensors tensors here are f32 or bf16, got {}", dtype_name(t));
  return "BF16";
}

// What a reimplementation must do as hylo does (nn/transformer.h, ops/).
nlohmann::ordered_json conventions() {
  return {
      {"linear", "y = x W^T with W (out, in); no biases"},
      {"block", "x += wo(attention(attn_norm(x))); x += ffn(ffn_norm(x)); then final_norm and the head (tied to embed "
                "when tie_embeddings)"},
      {"rmsnorm", "x / sqrt(mean(x^2) + norm_eps) * weight"},
      {"rope", "rotate-half on q and k (after qk-norm, when on): dims (i, i + hd/2) rotate by pos * "
               "rope_theta^(-2i/hd); none where nope"},
      {"attention", "softmax(q k^T / sqrt(hd)) over the allowed keys s <= t; query head h reads kv head h / (n_heads / "
                    "n_kv_heads); wq rows are head-major"},
      {"masks", "full: always; swa(window W): t - s < W; pbb(block b, bridge w): s / b == t / b or t - s < w"},
      {"ffn", "w_in rows [0, F) gate, [F, 2F) up: w_out(silu(gate) * up)"},
      {"moe", "scores = softmax (or sigmoid) of router x; top_k experts by scores + router_bias (ties to the lower "
              "index); weights = chosen scores / their sum; y = sum_k weight_k * expert_k(x) + shared(x); expert e: "
              "w_out[e](silu(gate) * up) with w_in[e]"}};
}

// Deterministic ids for the probe, below the tokenizer's vocabulary (the model's may be padded).
std::vector<int32_t> probe_ids(int count, int vocab) {
  Rng rng{0x9e3779b97f4a7c15ull, 0, 0};
  std::vector<int32_t> ids(static_cast<size_t>(count));
  for (auto& id : ids) id = int32_t(rng.below(uint64_t(std::min(vocab, data::kR50kTokens))));
  return ids;
}

// hylo's forward on the probe: per position t the loss of predicting ids[t + 1] (log-softmax over
// the whole vocabulary), the argmax, and the logits of a few columns (the first probe ids), which
// a reimplementation matches to rounding even where an untrained model's losses all sit near
// log(vocab).
nlohmann::ordered_json probe_json(const Transformer& model, int count) {
  NoGradGuard no_grad;
  const std::vector<int32_t> ids = probe_ids(count, model.config().vocab_size);
  const Tensor logits = model.forward(Tensor::from_vector(ids, {1, count})).value().to(Device::cpu).to(DType::f64);
  const int64_t V = logits.size(1);
  const double* L = logits.data<double>();
  const std::vector<int32_t> columns(ids.begin(), ids.begin() + std::min<size_t>(ids.size(), 16));
  // The next-token losses by the cross-entropy reference, rows 0..count-2 against ids 1..count-1.
  const std::vector<int32_t> next(ids.begin() + 1, ids.end());
  std::vector<double> loss(next.size()), lse(next.size());
  cpu::cross_entropy_forward<double>(count - 1, int(V), int(V), L, next.data(), loss.data(), lse.data());
  std::vector<int64_t> argmax;
  std::vector<std::vector<double>> rows;
  for (int t = 0; t < count; ++t) {
    const double* row = L + t * V;
    std::vector<double>& picked = rows.emplace_back();
    for (int32_t c : columns) picked.push_back(row[c]);
    if (t + 1 < count) argmax.push_back(std::max_element(row, row + V) - row);
  }
  return {{"ids", ids}, {"next_token_nll", loss}, {"argmax", argmax}, {"columns", columns}, {"logits", rows}};
}

nlohmann::ordered_json layers_json(const ModelConfig& c) {
  nlohmann::ordered_json layers = nlohmann::ordered_json::array();
  for (int l = 0; l < c.n_layers; ++l) {
    const AttnKindConfig& a = c.layer_attn(l);
    nlohmann::ordered_json& layer = layers.emplace_back();
    layer["attention"] = a.kind;
    if (a.kind == "swa") layer["window"] = a.window;
    if (a.kind == "pbb") layer["block"] = a.block, layer["bridge"] = a.bridge;
    layer["rope_theta"] = a.rope_theta;
    layer["nope"] = a.nope;
    layer["ffn"] = c.layer_is_moe(l) ? "moe" : "dense";
  }
  return layers;
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::vector<std::pair<std::string, std::string>>& metadata) {
  nlohmann::ordered_json index = {{"__metadata__", nlohmann::ordered_json::object()}};
  for (const auto& [k, v] : metadata) index["__metadata__"][k] = v;
  size_t offset = 0;
  for (const NamedTensor& t : tensors) {
    HYLO_CHECK(t.value.device() == Device::cpu && t.value.is_contiguous(), "export: {} is not a contiguous CPU tensor",
               t.name);
    HYLO_CHECK(!index.contains(t.name), "export: two tensors are named '{}'", t.name);
    index[t.name] = {{"dtype", safetensors_dtype(t.value.dtype())},
                     {"shape", t.value.shape()},
                     {"data_offsets", {offset, offset + t.value.nbytes()}}};
    offset += t.value.nbytes();
  }
  std::string header = index.dump();
  header.append((8 - header.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string length(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) length[size_t(i)] = char((n >> (8 * i)) & 0xff);  // little-endian u64
  std::vector<std::string_view> pieces{length, header};
  for (const NamedTensor& t : tensors) pieces.emplace_back(static_cast<const char*>(t.value.raw()), t.value.nbytes());
  write_file_atomic(path, pieces);
}

int probe_length(const Config& config) {
  int span = 8;
  for (int l = 0; l < config.model.n_layers; ++l) {
    const AttnKindConfig& a = config.model.layer_attn(l);
    span = std::max({span, a.kind == "pbb" ? a.block : 0, a.kind == "swa" ? a.window : 0});
  }
  return std::max(2, std::min(2 * span + 8, config.train.seq_len));
}

void export_model(const LoadedModel& loaded, const ExportOptions& o) {
  HYLO_CHECK(o.dtype == DType::f32 || o.dtype == DType::bf16, "export: --dtype must be f32 or bf16");
  const fs::path dir(o.out_dir), weights = dir / "model.safetensors", config = dir / "config.json";
  std::error_code ec;
  HYLO_CHECK(!fs::exists(dir, ec) || fs::is_directory(dir, ec), "{}: exists and is not a directory", o.out_dir);
  for (const fs::path& f : {weights, config})
    HYLO_CHECK(o.overwrite || !fs::exists(f, ec), "{}: already exists (use --overwrite to replace it)", f.string());
  Transformer& model = *loaded.model;
  // The probe describes the weights as exported: rounded to bf16 first when they leave as bf16.
  if (o.dtype == DType::bf16)
    for (Parameter& p : model.parameters()) p.var.mutable_value() = p.var.value().to(DType::bf16).to(DType::f32);
  nlohmann::ordered_json probe = probe_json(model, probe_length(loaded.config));  // before anything is written

  std::vector<NamedTensor> tensors;
  for (const Parameter& p : model.parameters())
    tensors.push_back({p.name, p.var.value().to(Device::cpu).to(o.dtype)});
  for (NamedTensor& b : buffer_tensors(model)) tensors.push_back(std::move(b));  // MoE router biases, f32
  fs::create_directories(dir, ec);
  HYLO_CHECK(!ec, "{}: cannot create the directory: {}", o.out_dir, ec.message());
  write_safetensors(weights.string(), tensors,
                    {{"format", "pt"}, {"source", loaded.path}, {"step", std::to_string(loaded.step)}});
  const nlohmann::ordered_json description = {{"format", "hylo"},
                                               {"source", loaded.path},
                                               {"step", loaded.step},
                                               {"dtype", safetensors_dtype(o.dtype)},
                                               {"model", section_to_json(loaded.config, "model")},
                                               {"layers", layers_json(loaded.config.model)},
                                               {"conventions", conventions()},
                                               {"probe", std::move(probe)}};
  write_file_atomic(config.string(), description.dump(2) + "\n");
}

}  // namespace hylo
