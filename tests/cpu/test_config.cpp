// Config loading, overrides, error messages, validation and the YAML round trip.
#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <set>
#include <string>

#include "core/error.h"
#include "error_of.h"
#include "config/config.h"

namespace fs = std::filesystem;
using namespace hylo;
using hylo::test::error_of;

namespace {

std::string yaml_error(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  return error_of([&] { config_from_yaml_text(yaml, "configs/x.yaml", overrides); });
}

// Expects validate() to reject `c` after `edit` with a message containing `needle`.
void expect_invalid(const std::function<void(Config&)>& edit, const std::string& needle) {
  Config c;
  edit(c);
  std::string msg = error_of([&] { validate(c); });
  INFO("expected: ", needle, "  got: ", msg);
  CHECK(msg.find(needle) != std::string::npos);
  CHECK(msg.find('\n') == std::string::npos);
}

// Stored parameters of a dense model (for checking the reference configs against SPEC §2).
int64_t dense_params(const ModelConfig& m) {
  const int64_t d = m.d_model, hd = m.head_dim(), kv = m.kv_heads();
  const int64_t attn = d * d /*wq*/ + 2 * d * kv * hd /*wk, wv*/ + d * d /*wo*/;
  const int64_t ffn = 3 * d * m.ffn_hidden_size();
  const int64_t embed = int64_t(m.vocab_size) * d * (m.tie_embeddings ? 1 : 2);
  return embed + m.n_layers * (attn + ffn + 2 * d) + d;
}

}  // namespace

TEST_CASE("config: an empty document gives the in-code defaults") {
  Config c = config_from_yaml_text("", "empty.yaml");
  CHECK(c == Config{});
  CHECK(c.source_path == "empty.yaml");
  CHECK(c.model.vocab_size == 50304);
  CHECK(c.model.pattern == "LLLG");
  CHECK(c.model.local == AttnKindConfig{"pbb", 0, 128, 32});
  CHECK(c.model.global.kind == "full");
  CHECK(c.model.moe.experts == 0);
  CHECK(c.train.lr == 3e-4);
  CHECK(c.train.schedule == "cosine");
  CHECK(c.train.seed == 1234u);
  CHECK(c.device == "cpu");
  CHECK(c.model.kv_heads() == c.model.n_heads);
  CHECK(c.model.ffn_hidden_size() == 704);  // 8/3 * 256 = 682.7 -> 704
  CHECK(c.train.micro_batch() == c.train.batch_size);
}

TEST_CASE("config: model helpers repeat the pattern to the depth") {
  ModelConfig m;
  m.n_layers = 8;
  m.pattern = "LLLG";
  std::string kinds;
  for (int l = 0; l < m.n_layers; ++l) kinds += m.layer_kind(l);
  CHECK(kinds == "LLLGLLLG");
  CHECK(&m.layer_attn(3) == &m.global);
  CHECK(&m.layer_attn(4) == &m.local);
  m.d_model = 1024;
  m.n_heads = 16;
  CHECK(m.head_dim() == 64);
  CHECK(m.ffn_hidden_size() == 2752);
  m.moe.experts = 8;
  m.moe.every = 2;
  CHECK_FALSE(m.layer_is_moe(0));
  CHECK(m.layer_is_moe(1));
  CHECK(m.expert_hidden_size() == 2752);
}

TEST_CASE("config: values from YAML, then --set overrides") {
  const std::string yaml = R"(
model:
  d_model: 128
  n_heads: 8
  local: {kind: swa, window: 64}
  moe: {experts: 8, top_k: 2, router: sigmoid}
  qk_norm: yes
train:
  lr: 1.0e-3
  steps: 1e3          # an exactly integral float is accepted for an integer key
  seed: 18446744073709551615
data:
  val: ""
device: cuda
)";
  Config c = config_from_yaml_text(yaml, "x.yaml");
  CHECK(c.model.d_model == 128);
  CHECK(c.model.local.kind == "swa");
  CHECK(c.model.local.window == 64);
  CHECK(c.model.local.block == 128);  // untouched keys keep their defaults
  CHECK(c.model.moe.router == "sigmoid");
  CHECK(c.train.lr == 1e-3);
  CHECK(c.train.steps == 1000);
  CHECK(c.train.seed == std::numeric_limits<uint64_t>::max());
  CHECK(c.model.qk_norm);
  CHECK(c.data.val.empty());
  CHECK(c.device == "cuda");

  Config o = config_from_yaml_text(yaml, "x.yaml",
                                   {"model.local.kind=pbb", "model.local.block=256", "model.local.bridge=32",
                                    "train.lr=3e-4", " train.steps = 7", "model.global={kind: swa, window: 9}",
                                    "model.qk_norm=true", "data.train=/tmp/a b.bin"});
  CHECK(o.model.local.kind == "pbb");
  CHECK(o.model.local.block == 256);
  CHECK(o.train.lr == 3e-4);
  CHECK(o.train.steps == 7);
  CHECK(o.model.global.kind == "swa");
  CHECK(o.model.global.window == 9);
  CHECK(o.model.qk_norm);
  CHECK(o.data.train == "/tmp/a b.bin");

  // Dotted keys work inside the file too.
  CHECK(config_from_yaml_text("model.local.block: 96\n", "x.yaml").model.local.block == 96);
}

TEST_CASE("config: unknown keys name the nearest valid key") {
  CHECK(yaml_error("train:\n  lerning_rate: 1\n") ==
        "configs/x.yaml: unknown key 'train.lerning_rate' (did you mean 'train.lr'?)");
  CHECK(yaml_error("model:\n  n_head: 4\n") == "configs/x.yaml: unknown key 'model.n_head' (did you mean 'model.n_heads'?)");
  CHECK(yaml_error("modle:\n  d_model: 4\n") == "configs/x.yaml: unknown key 'modle' (did you mean 'model'?)");
  CHECK(yaml_error("model:\n  lr: 1\n") == "configs/x.yaml: unknown key 'model.lr' (did you mean 'train.lr'?)");
  CHECK(yaml_error("model:\n  local:\n    windw: 4\n") ==
        "configs/x.yaml: unknown key 'model.local.windw' (did you mean 'model.local.window'?)");
  CHECK(yaml_error("model:\n  hidden_size: 4\n") ==
        "configs/x.yaml: unknown key 'model.hidden_size' (did you mean 'model.d_model'?)");
  CHECK(yaml_error("", {"train.lerning_rate=1"}) ==
        "--set train.lerning_rate=1: unknown key 'train.lerning_rate' (did you mean 'train.lr'?)");
  // Nothing close: the valid keys of that section are listed instead.
  std::string msg = yaml_error("data:\n  zzzzzzzzzz: 1\n");
  CHECK(msg == "configs/x.yaml: unknown key 'data.zzzzzzzzzz' (valid keys under 'data': train, val, mix, format, retrieval_mix)");
}

TEST_CASE("config: wrong types name the key and the value") {
  CHECK(yaml_error("train:\n  steps: abc\n") == "configs/x.yaml: train.steps: expected an integer, got 'abc'");
  CHECK(yaml_error("train:\n  steps: 1.5\n") == "configs/x.yaml: train.steps: expected an integer, got '1.5'");
  CHECK(yaml_error("train:\n  lr: fast\n") == "configs/x.yaml: train.lr: expected a number, got 'fast'");
  CHECK(yaml_error("model:\n  qk_norm: maybe\n") == "configs/x.yaml: model.qk_norm: expected true or false, got 'maybe'");
  CHECK(yaml_error("model:\n  local: 5\n") == "configs/x.yaml: model.local: expected a mapping, got '5'");
  CHECK(yaml_error("model:\n  d_model: [1, 2]\n") == "configs/x.yaml: model.d_model: expected an integer, got a list");
  CHECK(yaml_error("model:\n  d_model:\n") == "configs/x.yaml: model.d_model: expected an integer, got nothing");
  CHECK(yaml_error("train:\n  seed: -1\n") == "configs/x.yaml: train.seed: expected a non-negative integer, got '-1'");
  CHECK(yaml_error("model:\n  d_model: 1e12\n") ==
        "configs/x.yaml: model.d_model: '1e12' is out of range (-2147483648 to 2147483647)");
  CHECK(yaml_error("- 1\n- 2\n") == "configs/x.yaml: top level: expected a mapping, got a list");
  CHECK(yaml_error("", {"train.steps=abc"}) == "--set train.steps=abc: train.steps: expected an integer, got 'abc'");
  CHECK(yaml_error("", {"train.steps"}) == "--set train.steps: expected KEY=VALUE, e.g. --set train.lr=3e-4");
}

TEST_CASE("config: malformed YAML reports file, line and column") {
  std::string msg = yaml_error("model:\n  d_model: 64\n  n_heads: [4, 8\n");
  INFO(msg);
  CHECK(msg.starts_with("configs/x.yaml:"));
  CHECK(msg.find(": malformed YAML: ") != std::string::npos);
  CHECK(msg.find('\n') == std::string::npos);
  msg = yaml_error("model:\n  d_model: 64\n   n_heads: 4\n");  // bad indentation on line 3
  INFO(msg);
  CHECK(msg.starts_with("configs/x.yaml:3:"));
  CHECK(msg.find("malformed YAML") != std::string::npos);
  msg = yaml_error("model:\n\td_model: 64\n");
  CHECK(msg.starts_with("configs/x.yaml:2:"));
  CHECK(msg.ends_with("(tabs are not allowed in YAML indentation)"));
  msg = yaml_error("train:\n  lr: 1\n  lr: 2\n");
  CHECK(msg == "configs/x.yaml:3:3: duplicate key 'train.lr'");
}

TEST_CASE("config: a missing file is named") {
  std::string msg = error_of([] { load_config("/nonexistent/dir/x.yaml", {}); });
  CHECK(msg.starts_with("/nonexistent/dir/x.yaml: cannot open config file"));
  const std::string dir = std::string(HYLO_SOURCE_DIR) + "/configs";
  CHECK(error_of([&] { load_config(dir, {}); }) == dir + ": is a directory, not a config file");
}

TEST_CASE("config: validate rejects impossible shapes with the key and values") {
  CHECK_NOTHROW(validate(Config{}));
  expect_invalid([](Config& c) { c.model.d_model = 100, c.model.n_heads = 3; },
                 "model.d_model=100 is not divisible by model.n_heads=3");
  expect_invalid([](Config& c) { c.model.n_heads = 8, c.model.d_model = 256, c.model.n_kv_heads = 3; },
                 "model.n_heads=8 is not divisible by model.n_kv_heads=3");
  expect_invalid([](Config& c) { c.model.d_model = 68, c.model.n_heads = 4; },
                 "model.d_model/model.n_heads = 68/4 = 17 must be even");
  expect_invalid([](Config& c) { c.model.n_heads = 0; }, "model.n_heads=0 must be >= 1");
  expect_invalid([](Config& c) { c.model.pattern = ""; }, "model.pattern is empty");
  expect_invalid([](Config& c) { c.model.pattern = "LLXG"; }, "model.pattern='LLXG' may contain only 'L' and 'G'");
  expect_invalid([](Config& c) { c.model.local.kind = "sliding"; },
                 "model.local.kind='sliding' is not one of full, swa, pbb");
  expect_invalid([](Config& c) { c.model.local = {"swa", 0}; }, "model.local.window=0 must be >= 1 for kind swa");
  expect_invalid([](Config& c) { c.model.local = {"pbb", 0, 512, 600}; },
                 "model.local.bridge=600 > model.local.block=512");
  expect_invalid([](Config& c) { c.model.local = {"pbb", 0, 512, 0}; }, "model.local.bridge=0 must be >= 1");
  expect_invalid([](Config& c) { c.model.global = {"pbb", 0, 0, 0}; }, "model.global.block=0 must be >= 1");
  expect_invalid([](Config& c) { c.model.moe.experts = 2, c.model.moe.top_k = 4; },
                 "model.moe.top_k=4 > model.moe.experts=2");
  expect_invalid([](Config& c) { c.model.moe.experts = 8, c.model.moe.router = "relu"; },
                 "model.moe.router='relu' is not one of softmax, sigmoid");
  expect_invalid([](Config& c) { c.train.batch_size = 10, c.train.micro_batch_size = 4; },
                 "train.batch_size=10 is not divisible by train.micro_batch_size=4");
  expect_invalid([](Config& c) { c.train.nan_policy = "ignore"; },
                 "train.nan_policy='ignore' is not one of skip, abort");
  expect_invalid([](Config& c) { c.train.schedule = "linear"; }, "train.schedule='linear' is not one of cosine, wsd");
  expect_invalid([](Config& c) { c.train.lr = 0; }, "train.lr=0 must be > 0");
  expect_invalid([](Config& c) { c.train.lr = std::numeric_limits<double>::infinity(); }, "train.lr=.inf must be > 0");
  expect_invalid([](Config& c) { c.train.steps = -1; }, "train.steps=-1 must be >= 0");
  expect_invalid([](Config& c) { c.train.beta2 = 1.0; }, "train.beta2=1 must be in [0, 1)");
  expect_invalid([](Config& c) { c.device = "tpu"; }, "device='tpu' is not one of cpu, cuda");
  expect_invalid([](Config& c) { c.data.retrieval_mix = 1.5; }, "data.retrieval_mix=1.5 must be in [0, 1]");
  expect_invalid([](Config& c) { c.train.eval_retrieval = 4; },
                 "train.eval_retrieval=4 scores retrieval at the in-loop evaluations, but train.eval_every=0 has none");
  expect_invalid(
      [](Config& c) {
        c.train.eval_retrieval = 4;
        c.train.eval_every = 10;
        c.train.seq_len = 16;
      },
      "train.eval_retrieval=4 needs train.seq_len > 16");
  expect_invalid(
      [](Config& c) {
        c.data.retrieval_mix = 0.1;
        c.train.seq_len = 12;
      },
      "data.retrieval_mix=0.1 needs train.seq_len >= 16");
  // The source file prefixes the message.
  Config c;
  c.source_path = "configs/x.yaml";
  c.model.local = {"pbb", 0, 512, 600};
  CHECK(error_of([&] { validate(c); }) ==
        "configs/x.yaml: model.local.bridge=600 > model.local.block=512 (PBB needs 1 <= bridge <= block)");
  // load_config validates too.
  CHECK(yaml_error("model:\n  local: {kind: pbb, block: 512, bridge: 600}\n").starts_with(
      "configs/x.yaml: model.local.bridge=600 > model.local.block=512"));
}

TEST_CASE("config: to_yaml writes every key and reads back equal") {
  Config c;
  c.model.vocab_size = 1000;
  c.model.d_model = 96;
  c.model.n_heads = 6;
  c.model.n_kv_heads = 2;
  c.model.pattern = "LG";
  c.model.local = {"swa", 77, 3, 2, 500000.5, true};
  c.model.global = {"full", 0, 0, 0, 1e6, false};
  c.model.moe = {16, 4, 384, 1, 2, "sigmoid", 0.001, 1e-3, 1.25};
  c.model.qk_norm = true;
  c.model.tie_embeddings = false;
  c.model.norm_eps = 1e-6;
  c.model.init_std = 0.1 + 0.2;  // not representable briefly: needs all 17 digits
  c.train.lr = 3e-4;
  c.train.seed = std::numeric_limits<uint64_t>::max();
  c.train.steps = int64_t(1) << 40;
  c.train.schedule = "wsd";
  c.train.nan_policy = "abort";
  c.model.qk_norm = true;
  c.train.eps = 1e-8;
  c.data.train = "data/yes";
  c.data.val = "123";  // must come back a string, not a number
  c.device = "cuda";
  const std::string yaml = to_yaml(c);
  INFO(yaml);
  Config back = config_from_yaml_text(yaml, "roundtrip");
  CHECK(back == c);
  CHECK(to_yaml(back) == yaml);
  CHECK(to_yaml(Config{}) != yaml);
  CHECK(config_from_yaml_text(to_yaml(Config{}), "d") == Config{});
  // Every key of the table appears, each once.
  const std::vector<std::string> keys = config_keys();
  CHECK(std::set<std::string>(keys.begin(), keys.end()).size() == keys.size());
  CHECK(keys.size() >= 50);
  for (const std::string& key : keys) {
    std::string leaf = key.substr(key.rfind('.') == std::string::npos ? 0 : key.rfind('.') + 1);
    CHECK_MESSAGE(yaml.find(leaf + ":") != std::string::npos, key);
  }
  CHECK(yaml.find("val: \"123\"") != std::string::npos);
  // Keys whose 0 means "derived" show the derived value in a comment.
  CHECK(to_yaml(Config{}).find("ffn_hidden: 0  # = 704") != std::string::npos);
}

TEST_CASE("config: data.train and data.val take a path, a glob or a list, and data.mix a weighted list") {
  Config c = config_from_yaml_text("data:\n  train: [a_*.bin, b.bin]\n  val: v.bin\n  format: llmc\n", "x");
  CHECK(c.data.train.items == std::vector<std::string>{"a_*.bin", "b.bin"});
  CHECK(c.data.val == "v.bin");
  CHECK(train_datasets(c.data).size() == 1);
  CHECK(train_datasets(c.data)[0].format == data::ShardFormat::llmc);
  CHECK(config_from_yaml_text(to_yaml(c), "back") == c);

  c = config_from_yaml_text("data:\n  mix:\n    - {path: web/train_*.bin, weight: 3}\n    - path: [books/a.bin, books/b.bin]\n"
                            "      weight: 1\n",
                            "x");
  CHECK(c.data.train.empty());  // the default gives way to the mixture
  REQUIRE(c.data.mix.size() == 2);
  CHECK(c.data.mix[0].weight == 3);
  CHECK(c.data.mix[1].path.items.size() == 2);
  const auto datasets = train_datasets(c.data);
  REQUIRE(datasets.size() == 2);
  CHECK(datasets[1].paths == std::vector<std::string>{"books/a.bin", "books/b.bin"});
  const std::string yaml = to_yaml(c);
  INFO(yaml);
  CHECK(config_from_yaml_text(yaml, "back") == c);
  CHECK(config_from_yaml_text("", "x", {"data.mix=[{path: a.bin, weight: 0.5}, {path: b.bin}]"}).data.mix[1].weight == 1);

  CHECK(yaml_error("data:\n  train: t.bin\n  mix: [{path: a.bin, weight: 1}]\n") ==
        "configs/x.yaml: data.train (t.bin) and data.mix are both set: the mixture is the training data, remove "
        "data.train");
  CHECK(yaml_error("data:\n  mix: [{path: a.bin, wieght: 1}]\n") ==
        "configs/x.yaml: unknown key 'data.mix[0].wieght' (did you mean 'weight'?) (a mixture entry has path and "
        "weight)");
  CHECK(yaml_error("data:\n  mix: [{weight: 1}]\n") ==
        "configs/x.yaml: data.mix[0]: no path (the dataset's token files or globs)");
  CHECK(yaml_error("data:\n  mix: [{path: a.bin, weight: -1}]\n").find("data.mix[0].weight=-1 must be a positive") !=
        std::string::npos);
  CHECK(yaml_error("data:\n  mix: {path: a.bin}\n") ==
        "configs/x.yaml: data.mix: expected a list of {path: GLOB_OR_LIST, weight: W}, got a mapping");
  CHECK(yaml_error("data:\n  train: {a: 1}\n") ==
        "configs/x.yaml: data.train: expected a path, a glob or a list of them, got a mapping");
  CHECK(yaml_error("data:\n  format: megatron\n").find("data.format") != std::string::npos);
}

TEST_CASE("config: every file in configs/ loads and validates") {
  int count = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(HYLO_SOURCE_DIR) / "configs")) {
    if (entry.path().extension() != ".yaml") continue;
    ++count;
    INFO(entry.path().string());
    Config c;
    CHECK_NOTHROW(c = load_config(entry.path().string(), {}));
    CHECK(config_from_yaml_text(to_yaml(c), "rt") == c);
  }
  CHECK(count >= 5);

  const std::string dir = std::string(HYLO_SOURCE_DIR) + "/configs/";
  Config tiny = load_config(dir + "tiny.yaml", {});
  CHECK(tiny.device == "cpu");
  CHECK(dense_params(tiny.model) < 2'000'000);
  Config small = load_config(dir + "small.yaml", {});
  CHECK(dense_params(small.model) > 15'000'000);
  CHECK(dense_params(small.model) < 25'000'000);
  for (const char* kind : {"full", "swa", "pbb"}) {
    Config c = load_config(dir + "205m-" + kind + ".yaml", {});
    INFO(kind);
    CHECK(dense_params(c.model) == 205'677'568);  // ~205.7M stored, SPEC §2
    CHECK(c.train.seq_len == 2048);
    CHECK(c.train.batch_size == 16);
    CHECK(c.train.lr == 3e-4);
    CHECK(c.device == "cuda");
  }
  CHECK(load_config(dir + "205m-full.yaml", {}).model.pattern == "G");
  Config swa = load_config(dir + "205m-swa.yaml", {});
  CHECK((swa.model.pattern == "LLLG" && swa.model.local.kind == "swa" && swa.model.local.window == 512));
  Config pbb = load_config(dir + "205m-pbb.yaml", {});
  CHECK((pbb.model.local == AttnKindConfig{"pbb", 0, 512, 128}));
  // Apart from the attention layout the three are the same experiment.
  Config full = load_config(dir + "205m-full.yaml", {});
  full.model.pattern = pbb.model.pattern;
  full.model.local = pbb.model.local;
  CHECK(full.model == pbb.model);
  CHECK(full.train == pbb.train);
}
