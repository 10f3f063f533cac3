// A scratch directory for CLI tests that run `hylo` itself: token shards with learnable structure
// (a noisy repeating sequence over a 200-token vocabulary) and `tiny.yaml`, a PBB hybrid of the
// given model and train sections that trains on them in well under a second per step. Removed at
// the end of the test.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/rng.h"
#include "data/shard.h"

namespace hylo::test {

struct TinyWorkspace {
  std::filesystem::path dir;
  std::string hylo = std::string(HYLO_BINARY_DIR) + "/hylo";

  // sections: the YAML of `model:` and `train:` (no `data:`, which points at the shards).
  TinyWorkspace(const std::string& name, const std::string& sections, int train_tokens, int val_tokens) {
    dir = std::filesystem::temp_directory_path() / ("hylo_test_" + name + "_" + std::to_string(getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    write_tokens("train.bin", train_tokens, 1);
    write_tokens("val.bin", val_tokens, 2);
    std::ofstream(dir / "tiny.yaml") << sections << "data:\n  train: " << (dir / "train.bin").string()
                                     << "\n  val: " << (dir / "val.bin").string() << "\n";
  }
  ~TinyWorkspace() { std::filesystem::remove_all(dir); }
  TinyWorkspace(const TinyWorkspace&) = delete;
  TinyWorkspace& operator=(const TinyWorkspace&) = delete;

  void write_tokens(const std::string& name, int n, uint64_t seed) const {
    Rng rng{seed, 0, 0};
    std::vector<int32_t> tokens(n);
    for (int i = 0; i < n; ++i) tokens[i] = rng.below(10) == 0 ? int32_t(rng.below(200)) : int32_t(i * 7 % 97);
    data::write_shard((dir / name).string(), tokens, 200, 1, "split=test");
  }
};

}  // namespace hylo::test
