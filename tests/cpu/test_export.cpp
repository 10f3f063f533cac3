// `hylo export` (train/export.h): the safetensors file holds every parameter and router bias of the
// checkpoint with its name, shape and bytes (f32 masters exactly, or bf16 as rounded), the
// config.json describes the model and carries the probe; an existing export is not replaced
// without --overwrite; bad flags fail in one line. (scripts/check_export.py checks the probe
// against PyTorch on the GPU machine.)
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>

#include <unistd.h>

#include "checkpoint/export.h"
#include "core/file.h"
#include "error_of.h"
#include "run_command.h"
#include "checkpoint/checkpoint.h"
#include "training_workspace.h"

using namespace hylo;
namespace fs = std::filesystem;

namespace {

struct Safetensors {
  nlohmann::json header;
  std::string data;   // the bytes after the header
};

Safetensors read_safetensors(const std::string& path) {
  const std::string bytes = read_file(path).value_or("");
  REQUIRE(bytes.size() >= 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(bytes[size_t(i)]);
  REQUIRE(8 + n <= bytes.size());
  CHECK((8 + n) % 8 == 0);
  return {nlohmann::json::parse(bytes.substr(8, n)), bytes.substr(8 + n)};
}

// Checks each tensor's entry (F32) and bytes, and that they are all the file holds.
void check_tensors(const Safetensors& st, const std::vector<NamedTensor>& tensors) {
  size_t end = 0;
  for (const NamedTensor& t : tensors) {
    CAPTURE(t.name);
    REQUIRE(st.header.contains(t.name));
    const nlohmann::json& e = st.header[t.name];
    const Tensor& expected = t.value;
    CHECK(e["dtype"] == "F32");
    CHECK(e["shape"].get<std::vector<int64_t>>() == t.value.shape());
    const auto offsets = e["data_offsets"].get<std::vector<size_t>>();
    REQUIRE(offsets.size() == 2);
    REQUIRE(offsets[1] - offsets[0] == expected.nbytes());
    REQUIRE(offsets[1] <= st.data.size());
    CHECK(std::memcmp(st.data.data() + offsets[0], expected.raw(), expected.nbytes()) == 0);
    end = std::max(end, offsets[1]);
  }
  CHECK(end == st.data.size());
  CHECK(st.header.size() == tensors.size() + 1);  // + __metadata__
}

}  // namespace

TEST_CASE("hylo export writes every parameter and router bias, a config with the probe, and keeps what exists") {
  test::TrainingWorkspace ws("export");
  const auto trained = test::run_command(ws.train("moe", "--set train.steps=4 --set train.eval_every=0 "
                                                         "--set model.moe.experts=4 --set model.moe.every=2 --set model.moe.bias_update_rate=0.01"));
  REQUIRE_MESSAGE(trained.exit_code == 0, trained.output);
  const std::string run = (ws.dir / "moe").string(), out = (ws.dir / "export").string();
  const auto exported = test::run_command(ws.hylo + " export " + run + " --out " + out);
  REQUIRE_MESSAGE(exported.exit_code == 0, exported.output);

  const CheckpointState s = load_checkpoint((ws.dir / "moe/checkpoints/step_4.h5").string());
  std::vector<NamedTensor> tensors = s.model;
  tensors.insert(tensors.end(), s.buffers.begin(), s.buffers.end());
  REQUIRE(s.buffers.size() == 1);  // the MoE layer's router bias, moved off zero by the updates
  CHECK(s.buffers[0].value.to_vector<float>() != std::vector<float>(4, 0.f));
  check_tensors(read_safetensors(out + "/model.safetensors"), tensors);

  const nlohmann::json config = nlohmann::json::parse(read_file(out + "/config.json").value_or(""));
  CHECK(config["step"] == 4);
  CHECK(config["model"]["d_model"] == 32);
  CHECK(config["model"]["moe"]["experts"] == 4);
  CHECK(config["model"]["tie_embeddings"].is_boolean());
  REQUIRE(config["layers"].size() == 2);
  CHECK(config["layers"][0]["attention"] == "pbb");
  CHECK(config["layers"][0]["block"] == 8);
  CHECK(config["layers"][1]["attention"] == "full");
  CHECK(config["layers"][0]["ffn"] == "dense");
  CHECK(config["layers"][1]["ffn"] == "moe");
  CHECK(config["conventions"]["rmsnorm"].is_string());
  const nlohmann::json& probe = config["probe"];
  const size_t T = probe["ids"].size();
  CHECK(T == 24);  // 2 x block 8 + 8, the trained sequence length
  REQUIRE(probe["next_token_nll"].size() == T - 1);
  REQUIRE(probe["argmax"].size() == T - 1);
  REQUIRE(probe["logits"].size() == T);
  CHECK(probe["logits"][0].size() == probe["columns"].size());
  for (const nlohmann::json& nll : probe["next_token_nll"]) CHECK(std::isfinite(nll.get<double>()));

  // Exists: refused, and the file is as it was.
  const std::string before = read_file(out + "/model.safetensors").value_or("");
  const auto again = test::run_command(ws.hylo + " export " + run + " --out " + out + " --dtype bf16");
  CHECK(again.exit_code != 0);
  CHECK(again.output.find("model.safetensors: already exists (use --overwrite to replace it)") != std::string::npos);
  CHECK(read_file(out + "/model.safetensors").value_or("") == before);

  const auto bf16 = test::run_command(ws.hylo + " export " + run + " --out " + out + " --dtype bf16 --overwrite");
  REQUIRE_MESSAGE(bf16.exit_code == 0, bf16.output);
  std::vector<NamedTensor> params = s.model;  // the biases stay f32
  const Safetensors st = read_safetensors(out + "/model.safetensors");
  CHECK(st.header[s.buffers[0].name]["dtype"] == "F32");
  size_t bf16_bytes = 0;
  for (const NamedTensor& p : params) {
    CAPTURE(p.name);
    const auto offsets = st.header[p.name]["data_offsets"].get<std::vector<size_t>>();
    const Tensor rounded = p.value.to(DType::bf16);
    CHECK(st.header[p.name]["dtype"] == "BF16");
    CHECK(std::memcmp(st.data.data() + offsets[0], rounded.raw(), rounded.nbytes()) == 0);
    bf16_bytes += rounded.nbytes();
  }
  CHECK(st.data.size() == bf16_bytes + s.buffers[0].value.nbytes());

  for (const auto& [flags, message] : std::vector<std::pair<std::string, std::string>>{
           {"--out " + out + " --dtype fp8", "export: --dtype must be f32 or bf16, got 'fp8'"},
           {"", "export: --out is required"},
       }) {
    const auto r = test::run_command(ws.hylo + " export " + run + " " + flags);
    CHECK(r.exit_code != 0);
    CHECK(r.output.find(message) != std::string::npos);
  }
  const auto missing = test::run_command(ws.hylo + " export " + (ws.dir / "nothing").string() + " --out " + out);
  CHECK(missing.exit_code != 0);
}

TEST_CASE("write_safetensors: metadata and entries as JSON with text escaped, and two tensors of one name refused") {
  const fs::path dir = fs::temp_directory_path() / fmt::format("hylo_safetensors_{}", ::getpid());
  fs::create_directories(dir);
  const std::string path = (dir / "t.safetensors").string();
  const std::vector<NamedTensor> tensors = {{"a \"quoted\" name", Tensor::from_vector(std::vector<float>{1, 2, 3}, {3})},
                                            {"b", Tensor::from_vector(std::vector<float>{4, 5, 6, 7}, {2, 2})}};
  write_safetensors(path, tensors, {{"source", "runs/x\\y \"z\""}, {"step", "7"}});
  const Safetensors st = read_safetensors(path);
  CHECK(st.header["__metadata__"]["source"] == "runs/x\\y \"z\"");
  CHECK(st.header["__metadata__"]["step"] == "7");
  check_tensors(st, tensors);
  const std::vector<NamedTensor> twice = {tensors[1], tensors[1]};
  CHECK(test::error_of([&] { write_safetensors(path + ".2", twice, {}); }) == "export: two tensors are named 'b'");
  CHECK_FALSE(fs::exists(path + ".2"));
  fs::remove_all(dir);
}
