#include "checkpoint/hf_export.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>

#include "checkpoint/buffers.h"
#include "checkpoint/export.h"
#include "checkpoint/hf_tokenizer_files.h"
#include "core/error.h"
#include "core/file.h"

namespace hylo {

namespace fs = std::filesystem;

const char* const kHfProbeText =
    "The old lighthouse keeper climbed the stairs every evening, one hundred and twelve of them, "
    "to light the lamp before the ships came in. In 1897 a storm broke the glass; he fixed it "
    "himself, with tools he had bought in the village for three shillings. \"Nobody else will do "
    "it,\" he said, and he was right.";

std::vector<int32_t> hf_probe_ids(const data::Tokenizer& tokenizer, int count) {
  const std::vector<int32_t> text = tokenizer.encode(kHfProbeText);
  std::vector<int32_t> ids(size_t(std::max(count, 0)));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = text[i % text.size()];
  return ids;
}

namespace {

// Each parameter's rows under its transformers name(s), then the MoE router biases.
std::vector<NamedTensor> hf_tensors(Transformer& model, DType dtype) {
  std::vector<NamedTensor> named;
  for (const Parameter& p : model.parameters()) named.push_back({p.name, p.var.value().to(Device::cpu).to(dtype)});
  for (NamedTensor& b : buffer_tensors(model)) named.push_back(std::move(b));
  std::vector<NamedTensor> tensors;
  for (const NamedTensor& t : named)
    for (const HfPiece& piece : hf_pieces(t.name, t.value.size(0)))
      tensors.push_back({piece.name, t.value.slice(0, piece.begin, piece.end).contiguous()});
  return tensors;
}

}  // namespace

HfModelClass export_hf(const LoadedModel& loaded, const HfExportOptions& o) {
  HYLO_CHECK(o.dtype == DType::f32 || o.dtype == DType::bf16, "export: --dtype must be f32 or bf16");
  const Config& config = loaded.config;
  const HfModelClass cls = hf_model_class(config.model);  // refuses what no class computes, before anything
  const data::Tokenizer tokenizer = data::Tokenizer::from_tiktoken(o.tokenizer);
  HYLO_CHECK(config.model.vocab_size >= tokenizer.vocab_size(),
             "export --format hf: model.vocab_size {} is below the tokenizer's {} tokens", config.model.vocab_size,
             tokenizer.vocab_size());

  const fs::path dir(o.out_dir);
  std::vector<std::string> names = {"config.json",     "generation_config.json", "model.safetensors",
                                    "vocab.json",      "merges.txt",             "tokenizer_config.json",
                                    "special_tokens_map.json", "probe.safetensors"};
  if (cls.remote_code) names.push_back("modeling_hylo.py");
  std::error_code ec;
  HYLO_CHECK(!fs::exists(dir, ec) || fs::is_directory(dir, ec), "{}: exists and is not a directory", o.out_dir);
  for (const std::string& name : names)
    HYLO_CHECK(o.overwrite || !fs::exists(dir / name, ec), "{}: already exists (use --overwrite to replace it)",
               (dir / name).string());

  Transformer& model = *loaded.model;
  // The probe describes the weights as exported: rounded to bf16 first when they leave as bf16.
  if (o.dtype == DType::bf16)
    for (Parameter& p : model.parameters()) p.var.mutable_value() = p.var.value().to(DType::bf16).to(DType::f32);
  const std::vector<int32_t> ids = hf_probe_ids(tokenizer, probe_length(config));
  Tensor logits;
  {
    NoGradGuard no_grad;
    logits = model.forward(Tensor::from_vector(ids, {1, int64_t(ids.size())})).value().to(Device::cpu).contiguous();
  }
  const std::string dtype = o.dtype == DType::f32 ? "float32" : "bfloat16";
  nlohmann::ordered_json hf = hf_config(config, cls, dtype);
  hf["hylo"] = {{"source", loaded.path}, {"step", loaded.step}, {"config_yaml", to_yaml(config)}};
  nlohmann::ordered_json suppressed = nlohmann::ordered_json::array();
  for (int id = tokenizer.vocab_size(); id < config.model.vocab_size; ++id) suppressed.push_back(id);
  const int eot = tokenizer.end_of_text_id();
  nlohmann::ordered_json generation = {{"bos_token_id", eot}, {"eos_token_id", eot}, {"pad_token_id", eot},
                                       {"do_sample", false}};
  if (!suppressed.empty()) generation["suppress_tokens"] = suppressed;
  const HfTokenizerFiles tok = hf_tokenizer_files(tokenizer, config.train.seq_len);
  const std::vector<NamedTensor> tensors = hf_tensors(model, o.dtype);

  fs::create_directories(dir, ec);
  HYLO_CHECK(!ec, "{}: cannot create the directory: {}", o.out_dir, ec.message());
  write_safetensors((dir / "model.safetensors").string(), tensors, {{"format", "pt"}});
  write_safetensors((dir / "probe.safetensors").string(), {{"logits", logits}},
                    {{"ids", nlohmann::json(ids).dump()},
                     {"text", kHfProbeText},
                     {"source", loaded.path},
                     {"step", std::to_string(loaded.step)}});
  write_file_atomic((dir / "vocab.json").string(), tok.vocab_json);
  write_file_atomic((dir / "merges.txt").string(), tok.merges_txt);
  write_file_atomic((dir / "tokenizer_config.json").string(), tok.tokenizer_config_json);
  write_file_atomic((dir / "special_tokens_map.json").string(), tok.special_tokens_map_json);
  write_file_atomic((dir / "generation_config.json").string(), generation.dump(2) + "\n");
  if (cls.remote_code) write_file_atomic((dir / "modeling_hylo.py").string(), hf_modeling_py());
  write_file_atomic((dir / "config.json").string(), hf.dump(2) + "\n");  // last: the directory is whole
  return cls;
}

}  // namespace hylo
