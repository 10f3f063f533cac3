// Checkpoints (HDF5) and run directories: round trip, corruption, crash safety, retention,
// config refusal and the metrics log.
#include <doctest/doctest.h>
#include <hdf5.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "core/file.h"
#include "error_of.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/run_dir.h"

namespace fs = std::filesystem;
using namespace hylo;
using hylo::test::error_of;

namespace {

// A fresh directory per test, removed afterwards.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / fmt::format("hylo_test_{}_{}", name, ::getpid())) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
};

Tensor ramp(const Shape& shape, float start) {
  Tensor t = Tensor::empty(shape, DType::f32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = start + 0.001f * float(i);
  return t;
}

CheckpointState sample_state(int64_t step) {
  CheckpointState s;
  s.step = step;
  s.updates = step - 3;  // three steps skipped as non-finite
  Tensor special = ramp({2, 3}, 1.0f);
  float* p = special.data<float>();
  p[0] = -0.0f;  // bit patterns that a value comparison would not catch
  p[1] = std::numeric_limits<float>::quiet_NaN();
  p[2] = std::numeric_limits<float>::denorm_min();
  p[3] = std::numeric_limits<float>::infinity();
  s.model = {{"embed.weight", ramp({50, 8}, float(step))},
             {"blocks.0.attn.wq", ramp({8, 8}, 2.0f)},
             {"blocks.0.norm1.weight", special},
             {"blocks.10.ffn.w1", ramp({16, 8}, 3.0f)},
             {"scalar", Tensor::from_vector<float>({42.5f}, {})},
             {"empty", Tensor::empty({0, 4}, DType::f32)},
             {"a_last_but_saved_after", ramp({3}, 4.0f)}};  // creation order, not name order
  for (const auto& nt : s.model) {
    s.optim_m.push_back({nt.name, ramp(nt.value.shape(), 0.5f)});
    s.optim_v.push_back({nt.name, ramp(nt.value.shape(), 0.25f)});
  }
  s.buffers = {{"blocks.1.moe.router_bias", ramp({8}, -1.0f)},
               {"counts", Tensor::from_vector<int64_t>({1, 2, int64_t(1) << 40}, {3})},
               {"half", Tensor::from_vector<double>({0.1, 0.2}, {2})}};
  s.rng = {0x0123456789abcdefull, ~0ull, 7};
  s.data_cursor = {3, 123456789, 0xfeedull};
  s.config_yaml = "model:\n  d_model: 8\n# comment with unicode: \xc3\xa9\n";
  s.meta = {{"version", "0.1.0"}, {"git_revision", "abc123"}, {"world_size", "1"}, {"layout", ""}};
  return s;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && a.nbytes() == b.nbytes() &&
         (a.nbytes() == 0 || std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
}

void check_same(const std::vector<NamedTensor>& a, const std::vector<NamedTensor>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].name);
    CHECK(a[i].name == b[i].name);
    CHECK(same_bits(a[i].value, b[i].value));
  }
}

// File offset of a dataset's raw data (contiguous layout).
haddr_t data_offset(const std::string& file, const std::string& dataset) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  REQUIRE(f >= 0);
  hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
  REQUIRE(d >= 0);
  haddr_t off = H5Dget_offset(d);
  H5Dclose(d);
  H5Fclose(f);
  REQUIRE(off != HADDR_UNDEF);
  return off;
}

void flip_byte(const std::string& file, uint64_t offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  REQUIRE(f.good());
  f.seekg(std::streamoff(offset));
  char ch = 0;
  f.read(&ch, 1);
  ch = char(ch ^ 0x10);
  f.seekp(std::streamoff(offset));
  f.write(&ch, 1);
  REQUIRE(f.good());
}

}  // namespace

TEST_CASE("checkpoint: save/load round trip is bit-exact, names with dots, order kept") {
  TempDir dir("ckpt_roundtrip");
  const std::string path = checkpoint_path(dir.str(), 20);
  CHECK(path == dir.str() + "/checkpoints/step_20.h5");
  const CheckpointState s = sample_state(20);
  save_checkpoint(path, s);
  CHECK(fs::exists(path));
  CHECK_FALSE(fs::exists(path + ".tmp"));

  const CheckpointState r = load_checkpoint(path);
  CHECK(r.step == 20);
  CHECK(r.updates == 17);
  check_same(s.model, r.model);
  check_same(s.optim_m, r.optim_m);
  check_same(s.optim_v, r.optim_v);
  check_same(s.buffers, r.buffers);
  CHECK(r.rng == s.rng);
  CHECK(r.data_cursor == s.data_cursor);
  CHECK(r.config_yaml == s.config_yaml);
  CHECK(r.meta == s.meta);
  CHECK(r.model[4].value.shape().empty());   // a scalar stays rank 0
  CHECK(r.model[4].value.to_vector<float>() == std::vector<float>{42.5f});
  CHECK(r.model[5].value.numel() == 0);
  CHECK_NOTHROW(verify_checkpoint(path));

  // Without the moments: everything else as before, optim_m and optim_v empty.
  const CheckpointState w = load_checkpoint(path, /*moments=*/false);
  check_same(s.model, w.model);
  check_same(s.buffers, w.buffers);
  CHECK((w.optim_m.empty() && w.optim_v.empty() && w.step == 20 && w.config_yaml == s.config_yaml));

  // An empty state round-trips too, and names that are not dataset names are refused.
  save_checkpoint(path, CheckpointState{});
  CheckpointState e = load_checkpoint(path);
  CHECK((e.step == 0 && e.model.empty() && e.rng.empty() && e.config_yaml.empty() && e.meta.empty()));
  CheckpointState bad;
  bad.model = {{"blocks/0", ramp({2}, 0)}};
  CHECK(error_of([&] { save_checkpoint(path + ".bad", bad); }).find("invalid name 'blocks/0'") != std::string::npos);
  CHECK_FALSE(fs::exists(path + ".bad"));
  CHECK_FALSE(fs::exists(path + ".bad.tmp"));
}

TEST_CASE("checkpoint: a flipped data byte fails the whole-file checksum - in a file without it (older hylo), the "
          "dataset's checksum names the dataset") {
  TempDir dir("ckpt_crc");
  const std::string path = checkpoint_path(dir.str(), 20);
  save_checkpoint(path, sample_state(20));
  flip_byte(path, data_offset(path, "/model/blocks.0.attn.wq") + 13);
  CHECK(error_of([&] { load_checkpoint(path); }).starts_with(path + ": truncated or corrupt HDF5 file (whole-file "
                                                              "checksum mismatch"));
  // From here on the files are as an older hylo wrote them: no user block, no whole-file checksum.
  auto save_old = [&](const CheckpointState& s) {
    save_checkpoint(path, s);
    const std::string bytes = read_file(path).value();
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes.substr(512);
  };
  save_old(sample_state(20));
  flip_byte(path, data_offset(path, "/model/blocks.0.attn.wq") + 13);
  CHECK(error_of([&] { load_checkpoint(path); }) == path + ": checksum mismatch in /model/blocks.0.attn.wq");
  CHECK(error_of([&] { verify_checkpoint(path); }) == path + ": checksum mismatch in /model/blocks.0.attn.wq");

  save_old(sample_state(20));
  flip_byte(path, data_offset(path, "/optim/v/blocks.10.ffn.w1"));
  CHECK(error_of([&] { load_checkpoint(path); }) == path + ": checksum mismatch in /optim/v/blocks.10.ffn.w1");
  // Moments not kept are still verified.
  CHECK(error_of([&] { load_checkpoint(path, false); }) == path + ": checksum mismatch in /optim/v/blocks.10.ffn.w1");

  save_old(sample_state(20));
  flip_byte(path, data_offset(path, "/data/cursor") + 2);
  CHECK(error_of([&] { load_checkpoint(path); }) == path + ": checksum mismatch in /data/cursor");
}

TEST_CASE("checkpoint: truncated, foreign and missing files are rejected with one line") {
  TempDir dir("ckpt_trunc");
  const std::string path = checkpoint_path(dir.str(), 1);
  save_checkpoint(path, sample_state(1));
  const auto full = fs::file_size(path);
  for (uintmax_t keep : {full / 2, full - 1, uintmax_t(100)}) {
    fs::copy_file(path, path + ".cut.h5", fs::copy_options::overwrite_existing);
    fs::resize_file(path + ".cut.h5", keep);
    std::string msg = error_of([&] { load_checkpoint(path + ".cut.h5"); });
    INFO(keep, " ", msg);
    CHECK(msg.starts_with(path + ".cut.h5: truncated or corrupt HDF5 file"));
    CHECK(msg.find('\n') == std::string::npos);
  }
  std::ofstream(path + ".empty.h5").close();
  CHECK(error_of([&] { load_checkpoint(path + ".empty.h5"); }).starts_with(path + ".empty.h5: truncated or corrupt"));

  std::ofstream(path + ".txt") << "hello, not hdf5\n";
  CHECK(error_of([&] { load_checkpoint(path + ".txt"); }).starts_with(path + ".txt: not a hylo checkpoint"));

  // A valid HDF5 file that hylo did not write.
  const std::string other = dir.str() + "/other.h5";
  hid_t f = H5Fcreate(other.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  REQUIRE(f >= 0);
  H5Fclose(f);
  CHECK(error_of([&] { load_checkpoint(other); }).starts_with(other + ": not a hylo checkpoint"));

  CHECK(error_of([&] { load_checkpoint(dir.str() + "/nope.h5"); }) == dir.str() + "/nope.h5: no such checkpoint file");
}

TEST_CASE("checkpoint: latest_valid_checkpoint skips a corrupt newest file and .tmp leftovers") {
  TempDir dir("ckpt_latest");
  CHECK_FALSE(latest_valid_checkpoint(dir.str()).has_value());
  save_checkpoint(checkpoint_path(dir.str(), 5), sample_state(5));
  save_checkpoint(checkpoint_path(dir.str(), 10), sample_state(10));
  save_checkpoint(checkpoint_path(dir.str(), 15), sample_state(15));
  // step 15 corrupt, step 30 only a .tmp, a stray file that is not a checkpoint name.
  flip_byte(checkpoint_path(dir.str(), 15), data_offset(checkpoint_path(dir.str(), 15), "/model/embed.weight"));
  std::ofstream(checkpoint_path(dir.str(), 30) + ".tmp") << "partial";
  std::ofstream(dir.str() + "/checkpoints/step_x.h5") << "junk";
  auto latest = latest_valid_checkpoint(dir.str());
  REQUIRE(latest.has_value());
  CHECK(*latest == checkpoint_path(dir.str(), 10));
  CHECK(load_checkpoint(*latest).step == 10);
  // Numeric, not lexicographic, order: step_9 < step_10.
  save_checkpoint(checkpoint_path(dir.str(), 9), sample_state(9));
  CHECK(*latest_valid_checkpoint(dir.str()) == checkpoint_path(dir.str(), 10));

  CHECK(checkpoint_step("a/b/step_123.h5") == 123);
  CHECK_FALSE(checkpoint_step("a/b/step_123.h5.tmp").has_value());
  CHECK_FALSE(checkpoint_step("step_.h5").has_value());
  CHECK_FALSE(checkpoint_step("step_1a.h5").has_value());
}

TEST_CASE("checkpoint: prune keeps the newest K and removes dead .tmp files") {
  TempDir dir("ckpt_prune");
  CheckpointState s;
  s.model = {{"w", ramp({4}, 1)}};
  for (int step : {1, 2, 3, 10, 20}) save_checkpoint(checkpoint_path(dir.str(), step), s);
  std::ofstream(checkpoint_path(dir.str(), 4) + ".tmp") << "dead writer";
  std::ofstream(checkpoint_path(dir.str(), 30) + ".tmp") << "writer maybe still running";
  prune_checkpoints(dir.str(), 0);  // 0 keeps all
  for (int step : {1, 2, 3, 10, 20}) CHECK(fs::exists(checkpoint_path(dir.str(), step)));
  prune_checkpoints(dir.str(), 2);
  for (int step : {1, 2, 3}) CHECK_FALSE(fs::exists(checkpoint_path(dir.str(), step)));
  CHECK(fs::exists(checkpoint_path(dir.str(), 10)));
  CHECK(fs::exists(checkpoint_path(dir.str(), 20)));
  CHECK_FALSE(fs::exists(checkpoint_path(dir.str(), 4) + ".tmp"));
  CHECK(fs::exists(checkpoint_path(dir.str(), 30) + ".tmp"));
}

TEST_CASE("checkpoint: a writer killed mid-write leaves the previous checkpoint as the latest") {
  TempDir dir("ckpt_kill");
  save_checkpoint(checkpoint_path(dir.str(), 1), sample_state(1));
  // ~200 MB in 50 tensors, built before fork() so the child spends its time writing.
  CheckpointState big;
  big.step = 2;
  for (int i = 0; i < 50; ++i) big.model.push_back({fmt::format("blocks.{}.w", i), ramp({1024, 1024}, float(i))});
  const std::string target = checkpoint_path(dir.str(), 2);
  // The writer's own temporary name (unique_temp_path): step_2.h5.<pid>-<hex>.tmp.
  auto temp_file = [&] {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir.path / "checkpoints", ec))
      if (entry.path().string().starts_with(target + ".") && entry.path().string().ends_with(".tmp"))
        return entry.path().string();
    return std::string();
  };

  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    try {
      save_checkpoint(target, big);
    } catch (...) {
      ::_exit(1);
    }
    ::_exit(0);
  }
  // Kill once the writer is visibly in the middle of the file (not before it started).
  bool mid_write = false;
  std::string tmp;
  for (int i = 0; i < 30000 && !mid_write; ++i) {
    std::error_code ec;
    if (tmp.empty()) tmp = temp_file();
    mid_write = !tmp.empty() && fs::file_size(tmp, ec) > (8u << 20) && !ec;
    if (!mid_write) ::usleep(500);
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(mid_write);
  CHECK(WIFSIGNALED(status));
  CHECK_FALSE(fs::exists(target));
  auto latest = latest_valid_checkpoint(dir.str());
  REQUIRE(latest.has_value());
  CHECK(*latest == checkpoint_path(dir.str(), 1));
  CheckpointState r = load_checkpoint(*latest);
  CHECK(r.step == 1);
  check_same(r.model, sample_state(1).model);
  // And the half-written .tmp itself is never mistaken for a checkpoint.
  if (fs::exists(tmp)) CHECK_FALSE(error_of([&] { load_checkpoint(tmp); }).empty());
}

TEST_CASE("run_dir: a different config is refused unless --resume or --overwrite") {
  TempDir dir("rundir");
  const std::string run = dir.str() + "/runs/x";
  prepare_run_dir(run, "a: 1\n", RunDirMode::fresh);
  CHECK(read_file(run + "/config.yaml").value() == "a: 1\n");
  CHECK(fs::is_directory(run + "/checkpoints"));
  CHECK_NOTHROW(prepare_run_dir(run, "a: 1\n", RunDirMode::fresh));  // same config: fine

  std::ofstream(run + "/metrics.jsonl") << "{\"step\":1}\n";
  std::ofstream(run + "/checkpoints/step_1.h5") << "x";
  std::ofstream(run + "/events.out.tfevents.1700000000.host") << "x";
  CHECK(error_of([&] { prepare_run_dir(run, "a: 2\n", RunDirMode::fresh); }) ==
        run + " already holds a different config (use --resume auto or --overwrite)");
  CHECK(read_file(run + "/config.yaml").value() == "a: 1\n");  // nothing on disk lost
  CHECK(fs::exists(run + "/checkpoints/step_1.h5"));
  CHECK(fs::exists(run + "/events.out.tfevents.1700000000.host"));

  prepare_run_dir(run, "a: 2\n", RunDirMode::resume);
  CHECK(read_file(run + "/config.yaml").value() == "a: 2\n");
  CHECK(read_file(run + "/config.1.yaml").value() == "a: 1\n");  // the old config is kept
  CHECK(fs::exists(run + "/checkpoints/step_1.h5"));

  prepare_run_dir(run, "a: 3\n", RunDirMode::overwrite);
  CHECK(read_file(run + "/config.yaml").value() == "a: 3\n");
  CHECK_FALSE(fs::exists(run + "/checkpoints/step_1.h5"));
  CHECK_FALSE(fs::exists(run + "/metrics.jsonl"));
  CHECK_FALSE(fs::exists(run + "/events.out.tfevents.1700000000.host"));
  CHECK(fs::exists(run + "/config.1.yaml"));  // only what a run writes goes
  CHECK(fs::is_directory(run + "/checkpoints"));
  CHECK_FALSE(fs::exists(run + "/config.yaml.tmp"));
}

TEST_CASE("run_dir: MetricsLog writes one strict JSON object per line, and truncate_after parses the rows") {
  using Row = nlohmann::ordered_json;
  TempDir dir("metrics");
  {
    MetricsLog log(dir.str());
    log.write(Row{{"step", 1}, {"loss", 0.1 + 0.2}, {"lr", 3e-4}, {"tokens", int64_t(1) << 40}});
    log.write(Row{{"step", 2}, {"loss", 2.5f}, {"skipped", true}, {"note", "say \"hi\"\n\tok"}});
    log.write(Row{{"step", 3}, {"loss", std::nan("")}, {"grad_norm", -std::numeric_limits<double>::infinity()}});
    log.print("step 3 | loss nan");
  }
  std::istringstream lines(read_file(dir.path / "metrics.jsonl").value());
  std::vector<nlohmann::json> rows;
  for (std::string line; std::getline(lines, line);) {
    INFO(line);
    CHECK(line.starts_with("{\"step\":"));  // keys in insertion order
    rows.push_back(nlohmann::json::parse(line));  // throws on anything but strict JSON
  }
  REQUIRE(rows.size() == 3);
  CHECK(rows[0]["step"] == 1);
  CHECK(rows[0]["loss"].get<double>() == 0.1 + 0.2);  // round-trips exactly
  CHECK(rows[0]["lr"].get<double>() == 3e-4);
  CHECK(rows[0]["tokens"].get<int64_t>() == int64_t(1) << 40);
  CHECK(rows[1]["loss"].get<double>() == 2.5);
  CHECK(rows[1]["skipped"] == true);
  CHECK(rows[1]["note"] == "say \"hi\"\n\tok");
  CHECK(rows[2]["loss"].is_null());  // NaN and inf have no JSON spelling
  CHECK(rows[2]["grad_norm"].is_null());
  CHECK(read_file(dir.path / "log.txt").value() == "step 3 | loss nan\n");

  // Reopening appends; truncate_after drops the rows of steps being redone after a resume and a
  // line torn by a kill, and keeps rows without an integer step.
  {
    MetricsLog log(dir.str());
    log.write(Row{{"step", 4}});
    log.write(Row{{"note", "no step"}, {"value", 9}});
    log.write(Row{{"step", "5"}});
  }
  const std::string torn = "{\"step\":6,\"loss\":1.";
  std::ofstream(dir.path / "metrics.jsonl", std::ios::app) << torn << "\n";
  MetricsLog::truncate_after(dir.str(), 2);
  std::vector<std::string> kept;
  std::istringstream after(read_file(dir.path / "metrics.jsonl").value());
  for (std::string line; std::getline(after, line);) kept.push_back(line);
  REQUIRE(kept.size() == 4);
  CHECK(nlohmann::json::parse(kept[0])["step"] == 1);
  CHECK(nlohmann::json::parse(kept[1])["step"] == 2);
  CHECK(nlohmann::json::parse(kept[2])["note"] == "no step");
  CHECK(nlohmann::json::parse(kept[3])["step"] == "5");
}
