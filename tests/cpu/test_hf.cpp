// Hugging Face export and import (checkpoint/hf_*.h): the class and config.json keys per family,
// tensors under transformers' names with the gate|up projections split, GPT-2's tokenizer files
// derived from the tiktoken ranks (equal to OpenAI's encoder.json / vocab.bpe, and encoding as
// tiktoken does through a merge-list BPE), the probe, export -> import bit-exact, and one-line
// errors. scripts/check_hf.py checks the exports against transformers itself on the GPU machine.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/export.h"
#include "checkpoint/hf_export.h"
#include "checkpoint/hf_import.h"
#include "checkpoint/hf_tokenizer_files.h"
#include "checkpoint/model_checkpoint.h"
#include "checkpoint/safetensors.h"
#include "core/file.h"
#include "error_of.h"
#include "model_checkpoint_fixture.h"
#include "run_command.h"
#include "tiny_workspace.h"

using namespace hylo;
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

std::string tokenizer_path(const std::string& name) { return std::string(HYLO_SOURCE_DIR "/data/tokenizer/") + name; }

const data::Tokenizer& r50k() {
  REQUIRE_MESSAGE(fs::exists(tokenizer_path("r50k_base.tiktoken")), "run scripts/fetch_data.sh first");
  static const data::Tokenizer tokenizer = data::Tokenizer::from_tiktoken(tokenizer_path("r50k_base.tiktoken"));
  return tokenizer;
}

struct Scratch {
  fs::path dir;
  explicit Scratch(const std::string& name) : dir(fs::temp_directory_path() / (name + std::to_string(getpid()))) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Scratch() { fs::remove_all(dir); }
  std::string operator/(const std::string& name) const { return (dir / name).string(); }
};

// The families: 4 layers LLLG of width 32 (2 heads of 16) over GPT-2's padded vocabulary.
Config family(const std::string& name) {
  Config c;
  ModelConfig& m = c.model;
  m.vocab_size = 50304;
  m.d_model = 32;
  m.n_layers = 4;
  m.n_heads = 2;
  m.ffn_hidden = 64;
  m.pattern = "LLLG";
  m.local = {"full"};
  m.global = {"full"};
  c.train.seq_len = 40;
  if (name == "swa") m.local = {"swa", 6, 0, 0};
  if (name == "pbb" || name == "moe" || name == "qk_pbb") m.local = {"pbb", 0, 8, 3};
  if (name == "qk_norm" || name == "qk_pbb") m.qk_norm = true, m.n_kv_heads = 1;
  if (name == "qk_norm") m.local = {"swa", 5, 0, 0}, m.tie_embeddings = false;
  if (name == "nope") m.global.nope = true;
  if (name == "moe") {
    m.moe.experts = 4, m.moe.top_k = 2, m.moe.expert_hidden = 16, m.moe.shared_experts = 1, m.moe.every = 2;
    m.moe.bias_update_rate = 0.01;
  }
  validate(c);
  return c;
}

LoadedModel loaded_model(const Config& config) {
  LoadedModel loaded;
  loaded.path = "runs/test/checkpoints/step_7.h5";
  loaded.step = 7;
  loaded.config = config;
  loaded.model = std::make_unique<Transformer>(config.model, 11);
  // Norm weights start at one: make them differ so that a misplaced one shows.
  float k = 0;
  for (Parameter& p : loaded.model->parameters())
    if (p.var.value().dim() == 1)
      for (float& w : std::span(p.var.mutable_value().data<float>(), size_t(p.var.value().numel()))) w += (k += 0.01f);
  for (NamedBufferRef& b : loaded.model->buffers())
    for (int e = 0; e < b.value.numel(); ++e) b.value.data<float>()[e] = 0.25f * float(e % 3) - 0.25f;
  return loaded;
}

json read_json(const std::string& path) { return json::parse(read_file(path).value_or("null")); }

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

std::string export_family(const std::string& name, const Scratch& s, DType dtype = DType::f32) {
  const LoadedModel loaded = loaded_model(family(name));
  HfExportOptions o;
  o.out_dir = s / ("hf_" + name);
  o.tokenizer = tokenizer_path("r50k_base.tiktoken");
  o.dtype = dtype;
  export_hf(loaded, o);
  return o.out_dir;
}

}  // namespace

TEST_CASE("hf tokenizer files: vocab.json and merges.txt from the tiktoken ranks are GPT-2's own") {
  const HfTokenizerFiles files = hf_tokenizer_files(r50k(), 1024);
  const nlohmann::json vocab = nlohmann::json::parse(files.vocab_json);
  CHECK(vocab.size() == 50257);
  CHECK(vocab["Hello"] == 15496);
  CHECK(vocab["\xC4\xA0world"] == 995);  // "Ġworld": the leading space is U+0120
  CHECK(vocab["<|endoftext|>"] == 50256);
  std::istringstream lines(files.merges_txt);
  std::vector<std::string> merges;
  for (std::string line; std::getline(lines, line);) merges.push_back(line);
  REQUIRE(merges.size() == 50001);  // the header, then one merge per token above the 256 bytes
  CHECK(merges[0] == "#version: 0.2");
  CHECK(merges[1] == "\xC4\xA0 t");  // "Ġ t", rank 256
  // OpenAI's original files (scripts/fetch_data.sh fetches them beside the rank file).
  CHECK(vocab == nlohmann::json::parse(read_file(tokenizer_path("encoder.json")).value_or("null")));
  std::istringstream original(read_file(tokenizer_path("vocab.bpe")).value_or(""));
  std::vector<std::string> original_merges;
  for (std::string line; std::getline(original, line);)
    if (!line.empty()) original_merges.push_back(line);
  CHECK(merges == original_merges);
  const json config = json::parse(files.tokenizer_config_json);
  CHECK(config["tokenizer_class"] == "GPT2Tokenizer");
  CHECK(config["eos_token"] == "<|endoftext|>");
  CHECK(config["model_max_length"] == 1024);
}

TEST_CASE("hf tokenizer files: a merge-list BPE over them gives tiktoken's ids") {
  const Scratch s("hylo_hf_tok_");
  const HfTokenizerFiles files = hf_tokenizer_files(r50k(), 1024);
  write_file_atomic(s / "vocab.json", files.vocab_json);
  write_file_atomic(s / "merges.txt", files.merges_txt);
  const data::Tokenizer merged = data::Tokenizer::from_gpt2_files(s / "vocab.json", s / "merges.txt");
  for (const std::string& text : std::vector<std::string>{"Hello world", " lighthouse keepers' stairs", "naïve café — 1897!\n\n  x",
                                 "<|endoftext|>The end.", kHfProbeText}) {
    CAPTURE(text);
    CHECK(merged.encode(text) == r50k().encode(text));
  }
  CHECK(r50k().encode("Hello world") == std::vector<int32_t>{15496, 995});
}

TEST_CASE("hf export: the transformers class and config.json keys per family") {
  const Scratch s("hylo_hf_cfg_");
  struct Expect {
    std::string family, architecture, model_type;
    std::vector<std::string> layer_types;
    nlohmann::json sliding_window;
  };
  const std::vector<std::string> hybrid = {"sliding_attention", "sliding_attention", "sliding_attention",
                                           "full_attention"};
  for (const Expect& e : std::vector<Expect>{
           {"full", "LlamaForCausalLM", "llama", {}, nullptr},
           {"swa", "SmolLM3ForCausalLM", "smollm3", hybrid, 6},  // transformers' window W keeps t - s < W
           {"nope", "SmolLM3ForCausalLM", "smollm3", std::vector<std::string>(4, "full_attention"), nullptr},
           {"qk_norm", "Qwen3ForCausalLM", "qwen3", hybrid, 5},
           {"pbb", "HyloForCausalLM", "hylo", hybrid, 8},  // the block: every key a PBB query reads
           {"qk_pbb", "HyloQkNormForCausalLM", "hylo_qk_norm", hybrid, 8},
           {"moe", "HyloForCausalLM", "hylo", hybrid, 8},
       }) {
    CAPTURE(e.family);
    const std::string dir = export_family(e.family, s);
    const json c = read_json(dir + "/config.json");
    CHECK(c["architectures"] == json::array({e.architecture}));
    CHECK(c["model_type"] == e.model_type);
    CHECK(c["vocab_size"] == 50304);
    CHECK(c["hidden_size"] == 32);
    CHECK(c["intermediate_size"] == 64);
    CHECK(c["num_hidden_layers"] == 4);
    CHECK(c["num_attention_heads"] == 2);
    CHECK(c["head_dim"] == 16);
    CHECK(c["num_key_value_heads"] == (e.family.starts_with("qk") ? 1 : 2));
    CHECK(c["rms_norm_eps"] == 1e-5);
    CHECK(c["rope_parameters"]["rope_theta"] == 10000.0);
    CHECK(c["tie_word_embeddings"] == (e.family != "qk_norm"));
    for (const char* id : {"bos_token_id", "eos_token_id", "pad_token_id"}) CHECK(c[id] == 50256);
    if (e.layer_types.empty()) {
      CHECK_FALSE(c.contains("layer_types"));
    } else {
      CHECK(c["layer_types"] == json(e.layer_types));
      CHECK(c["sliding_window"] == e.sliding_window);
      CHECK(c["use_sliding_window"] == !e.sliding_window.is_null());
    }
    if (e.model_type == "smollm3" || e.model_type == "hylo")
      CHECK(c["no_rope_layers"] == (e.family == "nope" ? json::array({1, 1, 1, 0}) : json::array({1, 1, 1, 1})));
    const bool remote = e.model_type.starts_with("hylo");
    CHECK(fs::exists(dir + "/modeling_hylo.py") == remote);
    if (remote) {
      CHECK(c["auto_map"]["AutoModelForCausalLM"] == "modeling_hylo." + e.architecture);
      CHECK(c["hylo_pbb"] == json{{"block", 8}, {"bridge", 3}});
    }
    if (e.family == "moe") {
      CHECK(c["hylo_moe"]["experts"] == 4);
      CHECK(c["hylo_moe"]["every"] == 2);
      CHECK(c["hylo_moe"]["router"] == "softmax");
    }
    const json g = read_json(dir + "/generation_config.json");
    CHECK(g["eos_token_id"] == 50256);
    CHECK(g["suppress_tokens"].size() == 50304 - 50257);  // the padding rows are no tokens
    CHECK(g["suppress_tokens"][0] == 50257);
    for (const char* f : {"vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json"})
      CHECK(fs::exists(dir + "/" + f));
  }
}

TEST_CASE("hf export: tensors under transformers' names with gate and up halves, and the probe is hylo's forward") {
  const Scratch s("hylo_hf_names_");
  const std::string dir = export_family("moe", s);
  const LoadedModel loaded = loaded_model(family("moe"));
  const std::map<std::string, Tensor> w = read_hf_weights(dir);
  std::map<std::string, Tensor> params;
  for (const Parameter& p : loaded.model->parameters()) params.emplace(p.name, p.var.value());
  CHECK(same_bytes(w.at("model.embed_tokens.weight"), params.at("embed")));
  CHECK_FALSE(w.count("lm_head.weight"));  // tied
  CHECK(same_bytes(w.at("model.norm.weight"), params.at("final_norm")));
  const Tensor& w_in = params.at("blocks.0.ffn.w_in");  // (2F, D): gate rows, then up rows
  CHECK(same_bytes(w.at("model.layers.0.mlp.gate_proj.weight"), w_in.slice(0, 0, 64).contiguous()));
  CHECK(same_bytes(w.at("model.layers.0.mlp.up_proj.weight"), w_in.slice(0, 64, 128).contiguous()));
  CHECK(same_bytes(w.at("model.layers.0.mlp.down_proj.weight"), params.at("blocks.0.ffn.w_out")));
  CHECK(same_bytes(w.at("model.layers.2.self_attn.q_proj.weight"), params.at("blocks.2.attn.wq")));
  CHECK(same_bytes(w.at("model.layers.2.input_layernorm.weight"), params.at("blocks.2.attn_norm")));
  CHECK(same_bytes(w.at("model.layers.2.post_attention_layernorm.weight"), params.at("blocks.2.ffn_norm")));
  CHECK(same_bytes(w.at("model.layers.1.mlp.experts.gate_up_proj"), params.at("blocks.1.moe.w_in")));
  CHECK(same_bytes(w.at("model.layers.1.mlp.experts.down_proj"), params.at("blocks.1.moe.w_out")));
  CHECK(same_bytes(w.at("model.layers.1.mlp.gate.weight"), params.at("blocks.1.moe.router")));
  const Tensor& shared = params.at("blocks.1.moe.shared.w_in");
  CHECK(same_bytes(w.at("model.layers.1.mlp.shared_experts.up_proj.weight"), shared.slice(0, 16, 32).contiguous()));
  CHECK(w.at("model.layers.1.mlp.gate.e_score_correction_bias").to_vector<float>() ==
        std::vector<float>{-0.25f, 0.f, 0.25f, -0.25f});
  CHECK(w.size() == 2 + 4 * 6 + 2 * 3 + 2 * 7);  // embed, norm; per layer 4 attn + 2 norms; dense 3; MoE 7

  const SafetensorsContents probe = read_safetensors(dir + "/probe.safetensors");
  const std::vector<int32_t> ids = nlohmann::json::parse(probe.metadata.at("ids")).get<std::vector<int32_t>>();
  CHECK(ids.size() == 24);  // 2 x block 8 + 8
  const std::vector<int32_t> text = r50k().encode(probe.metadata.at("text"));
  CHECK(std::equal(ids.begin(), ids.end(), text.begin()));
  NoGradGuard no_grad;
  const Tensor logits = loaded.model->forward(Tensor::from_vector(ids, {1, 24})).value();
  CHECK(same_bytes(probe.tensors.at("logits"), logits));
}

TEST_CASE("hf export -> import: weights, buffers and config back bit for bit, for every family") {
  const Scratch s("hylo_hf_trip_");
  for (const std::string name : {"full", "swa", "nope", "qk_norm", "pbb", "qk_pbb", "moe"}) {
    CAPTURE(name);
    const std::string dir = export_family(name, s);
    const LoadedModel original = loaded_model(family(name));
    HfImportOptions o{dir, s / ("run_" + name)};
    const HfImportResult r = import_hf(o);
    CHECK(r.hylo_config);
    CHECK(r.step == 7);
    CHECK(r.checkpoint == o.run_dir + "/checkpoints/step_7.h5");
    CHECK(to_yaml(r.config) == to_yaml(original.config));
    CHECK(read_file(o.run_dir + "/config.yaml").value_or("") == to_yaml(original.config));
    const CheckpointState state = load_checkpoint(r.checkpoint);
    const ParamList& params = original.model->parameters();
    REQUIRE(state.model.size() == params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      CAPTURE(params[i].name);
      CHECK(state.model[i].name == params[i].name);
      CHECK(same_bytes(state.model[i].value, params[i].var.value()));
      CHECK(state.optim_m[i].value.to_vector<float>() == std::vector<float>(size_t(params[i].var.value().numel()), 0.f));
    }
    const std::vector<NamedBufferRef> buffers = original.model->buffers();
    REQUIRE(state.buffers.size() == buffers.size());
    for (size_t i = 0; i < buffers.size(); ++i) CHECK(same_bytes(state.buffers[i].value, buffers[i].value));
    // What eval and generate load computes what the original does.
    const LoadedModel back = load_model_checkpoint(o.run_dir, {}, Device::cpu);
    NoGradGuard no_grad;
    const Tensor ids = Tensor::from_vector(std::vector<int32_t>{464, 1468, 50256, 7, 99, 3}, {1, 6});
    CHECK(same_bytes(back.model->forward(ids).value(), original.model->forward(ids).value()));
    // Without hylo's own config the model comes from the standard keys alone, the same function.
    json c = read_json(dir + "/config.json");
    c.erase("hylo");
    write_file_atomic(dir + "/config.json", c.dump(2));
    const HfImportResult plain = import_hf({dir, s / ("plain_" + name)});
    CHECK_FALSE(plain.hylo_config);
    CHECK(plain.step == 0);
    const LoadedModel derived = load_model_checkpoint(s / ("plain_" + name), {}, Device::cpu);
    CHECK(same_bytes(derived.model->forward(ids).value(), original.model->forward(ids).value()));
    for (int l = 0; l < 4; ++l) CHECK(derived.config.model.layer_attn(l) == original.config.model.layer_attn(l));
  }
}

TEST_CASE("hf export bf16: tensors rounded, import widens them exactly") {
  const Scratch s("hylo_hf_bf16_");
  const std::string dir = export_family("pbb", s, DType::bf16);
  CHECK(read_json(dir + "/config.json")["dtype"] == "bfloat16");
  const HfImportResult r = import_hf({dir, s / "run"});
  const CheckpointState state = load_checkpoint(r.checkpoint);
  const LoadedModel original = loaded_model(family("pbb"));
  for (size_t i = 0; i < state.model.size(); ++i)
    CHECK(same_bytes(state.model[i].value, original.model->parameters()[i].var.value().to(DType::bf16).to(DType::f32)));
}

TEST_CASE("hf export: models no transformers class computes are refused in one line, before any file") {
  const Scratch s("hylo_hf_refuse_");
  for (const auto& [change, message] : std::vector<std::pair<std::function<void(ModelConfig&)>, std::string>>{
           {[](ModelConfig& m) { m.qk_norm = true, m.global.nope = true; }, "QK-norm with NoPE layers"},
           {[](ModelConfig& m) { m.local.rope_theta = 500000; }, "layers use rope_theta 500000 and 10000"},
           {[](ModelConfig& m) { m.global = {"swa", 4, 0, 0}; }, "layers use pbb(block 8, bridge 3) and swa(window 4)"},
       }) {
    Config c = family("pbb");
    change(c.model);
    HfExportOptions o;
    o.out_dir = s / "out";
    o.tokenizer = tokenizer_path("r50k_base.tiktoken");
    CHECK(test::error_of([&] { export_hf(loaded_model(c), o); }).find(message) != std::string::npos);
    CHECK_FALSE(fs::exists(o.out_dir));
  }
  const std::string dir = export_family("full", s);
  HfExportOptions again;
  again.out_dir = dir;
  again.tokenizer = tokenizer_path("r50k_base.tiktoken");
  CHECK(test::error_of([&] { export_hf(loaded_model(family("full")), again); }) ==
        dir + "/config.json: already exists (use --overwrite to replace it)");
  again.tokenizer = s / "missing.tiktoken";
  again.overwrite = true;
  CHECK(test::error_of([&] { export_hf(loaded_model(family("full")), again); }).find("missing.tiktoken") !=
        std::string::npos);
}

TEST_CASE("hf import: bad directories fail in one line naming the file and key, writing nothing") {
  const Scratch s("hylo_hf_bad_");
  const std::string dir = export_family("swa", s);
  const std::string run = s / "run";
  const json good = read_json(dir + "/config.json");
  const auto with = [&](const std::function<void(json&)>& change) {
    json c = good;
    change(c);
    write_file_atomic(dir + "/config.json", c.dump());
    return test::error_of([&] { import_hf({dir, run}); });
  };
  CHECK(with([](json& c) { c["model_type"] = "gpt2"; }).find("config.json: model_type 'gpt2' is not one hylo imports") !=
        std::string::npos);
  CHECK(with([](json& c) { c.erase("hidden_size"); }).find("config.json: hidden_size is missing") != std::string::npos);
  CHECK(with([](json& c) { c["rope_parameters"]["rope_type"] = "llama3"; })
            .find("rope_parameters.rope_type 'llama3': hylo has the default RoPE only") != std::string::npos);
  CHECK(with([](json& c) { c["attention_bias"] = true; }).find("attention_bias is true") != std::string::npos);
  CHECK(with([](json& c) { c["head_dim"] = 8; }).find("head_dim 8 is not hidden_size / num_attention_heads = 16") !=
        std::string::npos);
  CHECK(with([](json& c) { c["layer_types"] = json::array({"full_attention"}); }).find("layer_types is not a list of 4") !=
        std::string::npos);
  CHECK(with([](json& c) { c["vocab_size"] = 32000; }).find("vocab_size 32000 is below GPT-2's 50257") !=
        std::string::npos);
  CHECK(with([](json& c) { c["intermediate_size"] = 48; })
            .find("model.layers.0.mlp.gate_proj.weight is (64, 32), config.json makes it (48, 32)") != std::string::npos);
  CHECK_FALSE(fs::exists(run));
  write_file_atomic(dir + "/config.json", good.dump());

  // Weights: a missing tensor, one without a place.
  const std::string weights = read_file(dir + "/model.safetensors").value_or("");
  std::map<std::string, Tensor> w = read_hf_weights(dir);
  const auto rewrite = [&](const std::map<std::string, Tensor>& tensors) {
    std::vector<NamedTensor> list;
    for (const auto& [name, t] : tensors) list.push_back({name, t});
    write_safetensors(dir + "/model.safetensors", list, {{"format", "pt"}});
  };
  std::map<std::string, Tensor> fewer = w;
  fewer.erase("model.layers.3.mlp.up_proj.weight");
  rewrite(fewer);
  CHECK(test::error_of([&] { import_hf({dir, run}); }) ==
        dir + ": the weights lack model.layers.3.mlp.up_proj.weight (hylo's blocks.3.ffn.w_in)");
  std::map<std::string, Tensor> more = w;
  more.emplace("model.layers.0.self_attn.q_proj.bias", Tensor::zeros({32}, DType::f32));
  rewrite(more);
  CHECK(test::error_of([&] { import_hf({dir, run}); }) ==
        dir + ": the weights hold model.layers.0.self_attn.q_proj.bias, which config.json's model has no place for");
  write_file_atomic(dir + "/model.safetensors", weights);
  write_file_atomic(dir + "/model.safetensors", std::string("\x10\0\0\0\0\0\0\0{not json}      ", 24));
  CHECK(test::error_of([&] { import_hf({dir, run}); }).find("model.safetensors: the safetensors header is not valid JSON") !=
        std::string::npos);
  CHECK_FALSE(fs::exists(run));
  fs::remove(dir + "/model.safetensors");
  CHECK(test::error_of([&] { import_hf({dir, run}); }) ==
        dir + ": neither model.safetensors nor model.safetensors.index.json is there");
  CHECK(test::error_of([&] { import_hf({s / "nowhere", run}); }) == s / "nowhere" + "/config.json: cannot read the file");

  // A run directory that holds something is not replaced without --overwrite.
  write_file_atomic(dir + "/model.safetensors", weights);
  fs::create_directories(run);
  write_file_atomic(run + "/notes.txt", "mine");
  CHECK(test::error_of([&] { import_hf({dir, run}); }) == run + ": already exists (use --overwrite to replace its checkpoints)");
  CHECK(read_file(run + "/notes.txt").value_or("") == "mine");
}

TEST_CASE("hf import: sharded weights through model.safetensors.index.json") {
  const Scratch s("hylo_hf_shards_");
  const std::string dir = export_family("full", s);
  std::map<std::string, Tensor> w = read_hf_weights(dir);
  std::vector<NamedTensor> first, second;
  json map = json::object();
  for (const auto& [name, t] : w) {
    const bool early = name < "model.layers.2";
    (early ? first : second).push_back({name, t});
    map[name] = early ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  write_safetensors(dir + "/model-00001-of-00002.safetensors", first, {});
  write_safetensors(dir + "/model-00002-of-00002.safetensors", second, {});
  write_file_atomic(dir + "/model.safetensors.index.json", json{{"weight_map", map}}.dump());
  fs::remove(dir + "/model.safetensors");
  const std::map<std::string, Tensor> read = read_hf_weights(dir);
  REQUIRE(read.size() == w.size());
  for (const auto& [name, t] : w) CHECK(same_bytes(read.at(name), t));
  map["model.norm.weight"] = "model-00001-of-00002.safetensors";  // it is in the second
  write_file_atomic(dir + "/model.safetensors.index.json", json{{"weight_map", map}}.dump());
  CHECK(test::error_of([&] { read_hf_weights(dir); }).find("holds model.norm.weight, which") != std::string::npos);
}

TEST_CASE("hf export: modeling_hylo.py is valid Python (when python3 is here)") {
  if (std::system("python3 -c pass >/dev/null 2>&1") != 0) return;
  const Scratch s("hylo_hf_py_");
  write_file_atomic(s / "modeling_hylo.py", hf_modeling_py());
  CHECK(std::system(("python3 -c \"import ast, sys; ast.parse(open(sys.argv[1]).read())\" " + (s / "modeling_hylo.py"))
                        .c_str()) == 0);
}

TEST_CASE("hylo export --format hf and hylo import on the command line") {
  const Scratch s("hylo_hf_cli_");
  const std::string hylo = std::string(HYLO_BINARY_DIR) + "/hylo", run = s / "run", hf = s / "hf", back = s / "back";
  const test::TinyWorkspace shards("hf_cli", "", 4000, 2000);  // token shards for resuming training
  LoadedModel loaded = loaded_model(family("pbb"));
  loaded.config.data.train = (shards.dir / "train.bin").string();
  loaded.config.data.val = (shards.dir / "val.bin").string();
  loaded.config.train.batch_size = 2;
  test::write_model_checkpoint(run, loaded.config, *loaded.model, 7);
  const std::string tokenizer = " --tokenizer " + tokenizer_path("r50k_base.tiktoken");
  const auto exported = test::run_command(hylo + " export " + run + " --format hf --out " + hf + tokenizer);
  REQUIRE_MESSAGE(exported.exit_code == 0, exported.output);
  CHECK(exported.output.find("HyloForCausalLM") != std::string::npos);
  CHECK(exported.output.find("trust_remote_code=True") != std::string::npos);
  const auto imported = test::run_command(hylo + " import " + hf + " --out " + back);
  REQUIRE_MESSAGE(imported.exit_code == 0, imported.output);
  CHECK(imported.output.find("--resume auto") != std::string::npos);
  const CheckpointState a = load_checkpoint(run + "/checkpoints/step_7.h5"),
                        b = load_checkpoint(back + "/checkpoints/step_7.h5");
  REQUIRE(a.model.size() == b.model.size());
  for (size_t i = 0; i < a.model.size(); ++i) CHECK(same_bytes(a.model[i].value, b.model[i].value));
  CHECK(a.config_yaml == b.config_yaml);
  // Training continues from it: a fresh optimizer, the data stream at step 7's batch.
  const auto resumed = test::run_command(hylo + " train " + back + "/config.yaml --run-dir " + back +
                                         " --resume auto --set train.steps=9");
  REQUIRE_MESSAGE(resumed.exit_code == 0, resumed.output);
  CHECK(resumed.output.find("at step 7 (no data cursor") != std::string::npos);
  CHECK(fs::exists(back + "/checkpoints/step_9.h5"));
  // The default format stays hylo's own.
  const auto own = test::run_command(hylo + " export " + run + " --out " + (s / "own"));
  REQUIRE_MESSAGE(own.exit_code == 0, own.output);
  CHECK(read_json(s / "own/config.json")["format"] == "hylo");
  const auto bad = test::run_command(hylo + " export " + run + " --format onnx --out " + (s / "x"));
  CHECK(bad.exit_code == 2);
  CHECK(bad.output.find("--format") != std::string::npos);
  const auto again = test::run_command(hylo + " import " + hf + " --out " + back);
  CHECK(again.exit_code == 1);
  CHECK(again.output.find(back + ": already exists (use --overwrite to replace its checkpoints)") != std::string::npos);
}
