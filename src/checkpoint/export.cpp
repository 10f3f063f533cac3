#include "checkpoint/export.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "core/file.h"
#include "core/rng.h"
#include "data/tokenizer.h"
#include "ops/cpu/cross_entropy.h"
#include "checkpoint/buffers.h"
#include "config/config.h"
#include "core/json_text.h"

namespace hylo {

namespace fs = std::filesystem;

namespace {

const char* safetensors_dtype(DType t) {
  if (t == DType::f32) return "F32";
  HYLO_CHECK(t == DType::bf16, "export: safetensors tensors here are f32 or bf16, got {}", dtype_name(t));
  return "BF16";
}

// What a reimplementation must do as hylo does (nn/transformer.h, ops/).
constexpr const char* kConventions = R"json({
    "linear": "y = x W^T with W (out, in); no biases",
    "block": "x += wo(attention(attn_norm(x))); x += ffn(ffn_norm(x)); then final_norm and the head (tied to embed when tie_embeddings)",
    "rmsnorm": "x / sqrt(mean(x^2) + norm_eps) * weight",
    "rope": "rotate-half on q and k (after qk-norm, when on): dims (i, i + hd/2) rotate by pos * rope_theta^(-2i/hd); none where nope",
    "attention": "softmax(q k^T / sqrt(hd)) over the allowed keys s <= t; query head h reads kv head h / (n_heads / n_kv_heads); wq rows are head-major",
    "masks": "full: always; swa(window W): t - s < W; pbb(block b, bridge w): s / b == t / b or t - s < w",
    "ffn": "w_in rows [0, F) gate, [F, 2F) up: w_out(silu(gate) * up)",
    "moe": "scores = softmax (or sigmoid) of router x; top_k experts by scores + router_bias (ties to the lower index); weights = chosen scores / their sum; y = sum_k weight_k * expert_k(x) + shared(x); expert e: w_out[e](silu(gate) * up) with w_in[e]"
  })json";

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
std::string probe_json(const Transformer& model, int count) {
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
  std::vector<std::string> nll, argmax, rows;
  for (int t = 0; t < count; ++t) {
    const double* row = L + t * V;
    std::vector<std::string> picked;
    for (int32_t c : columns) picked.push_back(json_number(row[c]));
    rows.push_back(fmt::format("[{}]", fmt::join(picked, ", ")));
    if (t + 1 == count) break;
    nll.push_back(json_number(loss[size_t(t)]));
    argmax.push_back(std::to_string(std::max_element(row, row + V) - row));
  }
  std::vector<std::string> id_text, column_text;
  for (int32_t id : ids) id_text.push_back(std::to_string(id));
  for (int32_t c : columns) column_text.push_back(std::to_string(c));
  return fmt::format(
      "{{\n    \"ids\": [{}],\n    \"next_token_nll\": [{}],\n    \"argmax\": [{}],\n    \"columns\": [{}],\n"
      "    \"logits\": [{}]\n  }}",
      fmt::join(id_text, ", "), fmt::join(nll, ", "), fmt::join(argmax, ", "), fmt::join(column_text, ", "),
      fmt::join(rows, ", "));
}

// Long enough for every local mask to cross two of its spans (block or window), within the
// trained context.
int probe_length(const Config& config) {
  int span = 8;
  for (int l = 0; l < config.model.n_layers; ++l) {
    const AttnKindConfig& a = config.model.layer_attn(l);
    span = std::max({span, a.kind == "pbb" ? a.block : 0, a.kind == "swa" ? a.window : 0});
  }
  return std::max(2, std::min(2 * span + 8, config.train.seq_len));
}

std::string layers_json(const ModelConfig& c) {
  std::vector<std::string> layers;
  for (int l = 0; l < c.n_layers; ++l) {
    const AttnKindConfig& a = c.layer_attn(l);
    std::string mask = json_string(a.kind);
    if (a.kind == "swa") mask += fmt::format(R"(, "window": {})", a.window);
    if (a.kind == "pbb") mask += fmt::format(R"(, "block": {}, "bridge": {})", a.block, a.bridge);
    layers.push_back(fmt::format(R"({{"attention": {}, "rope_theta": {}, "nope": {}, "ffn": "{}"}})", mask,
                                 json_number(a.rope_theta), a.nope ? "true" : "false",
                                 c.layer_is_moe(l) ? "moe" : "dense"));
  }
  return fmt::format("[\n    {}\n  ]", fmt::join(layers, ",\n    "));
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::vector<std::pair<std::string, std::string>>& metadata) {
  std::vector<std::string> meta, entries;
  for (const auto& [k, v] : metadata) meta.push_back(json_string(k) + ": " + json_string(v));
  size_t offset = 0;
  for (const NamedTensor& t : tensors) {
    HYLO_CHECK(t.value.device() == Device::cpu && t.value.is_contiguous(), "export: {} is not a contiguous CPU tensor",
               t.name);
    std::vector<std::string> dims;
    for (int64_t d : t.value.shape()) dims.push_back(std::to_string(d));
    entries.push_back(fmt::format(R"({}: {{"dtype": "{}", "shape": [{}], "data_offsets": [{}, {}]}})",
                                  json_string(t.name), safetensors_dtype(t.value.dtype()), fmt::join(dims, ", "),
                                  offset, offset + t.value.nbytes()));
    offset += t.value.nbytes();
  }
  std::string header = fmt::format(R"({{"__metadata__": {{{}}}, {}}})", fmt::join(meta, ", "), fmt::join(entries, ", "));
  header.append((8 - header.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string length(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) length[size_t(i)] = char((n >> (8 * i)) & 0xff);  // little-endian u64
  std::vector<std::string_view> pieces{length, header};
  for (const NamedTensor& t : tensors) pieces.emplace_back(static_cast<const char*>(t.value.raw()), t.value.nbytes());
  write_file_atomic(path, pieces);
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
  const std::string probe = probe_json(model, probe_length(loaded.config));  // before anything is written

  std::vector<NamedTensor> tensors;
  for (const Parameter& p : model.parameters())
    tensors.push_back({p.name, p.var.value().to(Device::cpu).to(o.dtype)});
  for (NamedTensor& b : buffer_tensors(model)) tensors.push_back(std::move(b));  // MoE router biases, f32
  fs::create_directories(dir, ec);
  HYLO_CHECK(!ec, "{}: cannot create the directory: {}", o.out_dir, ec.message());
  write_safetensors(weights.string(), tensors,
                    {{"format", "pt"}, {"source", loaded.path}, {"step", std::to_string(loaded.step)}});
  write_file_atomic(config.string(),
                    fmt::format("{{\n  \"format\": \"hylo\",\n  \"source\": {},\n  \"step\": {},\n  \"dtype\": \"{}\",\n"
                                "  \"model\": {},\n  \"layers\": {},\n  \"conventions\": {},\n  \"probe\": {}\n}}\n",
                                json_string(loaded.path), loaded.step, safetensors_dtype(o.dtype),
                                section_to_json(loaded.config, "model"), layers_json(loaded.config.model),
                                kConventions, probe));
}

}  // namespace hylo
