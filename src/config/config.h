// The run configuration: YAML file + `--set key=value` overrides -> Config, and back to YAML.
// Defaults live in the struct initialisers below; the list of YAML keys is derived from one field
// table in config.cpp (parse, to_yaml and "did you mean" all read it).
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json_fwd.hpp>

#include "core/dtype.h"
#include "data/shard_set.h"
#include "nn/model_config.h"

namespace hylo {

struct TrainConfig {
  int64_t steps = 100;
  int batch_size = 8 /*sequences per optimizer step, all ranks together*/,
      micro_batch_size = 0 /*0 = batch_size*/, seq_len = 256;
  double lr = 3e-4, min_lr_ratio = 0.1;
  int64_t warmup_steps = 10;
  std::string schedule = "cosine";  // cosine | wsd
  double decay_fraction = 0.2 /*wsd: last fraction of steps decays*/, weight_decay = 0.1, beta1 = 0.9,
         beta2 = 0.95, eps = 1e-8, grad_clip = 1.0 /*0 = off*/, z_loss = 0 /*PaLM: 1e-4*/;
  uint64_t seed = 1234;
  int64_t checkpoint_every = 0 /*0 = only at the end*/, keep_last = 3 /*0 = keep all*/,
          eval_every = 0 /*0 = never in-loop*/, eval_batches = 8, log_every = 1;
  // Sequences per distance of the retrieval task (train/retrieval.h) scored at every in-loop
  // evaluation (exact and token accuracy, mean log-prob of V), so that the curve shows when
  // copying appears; 0 = off.
  int eval_retrieval = 0;
  std::string nan_policy = "skip";  // skip | abort
  bool recompute = false;
  bool zero1 = false;  // ZeRO-1: optimizer state sharded over the data-parallel ranks (parallel/zero.h)
  int expert_parallel = 1;  // ranks per expert-parallel group: each holds experts / this many (SPEC §6)
  double hang_timeout_s = 900;  // several ranks: seconds without progress before a rank gives up (train/watchdog.h)
  // bf16 | fp8: the blocks' linear layers in FP8 (ops/fp8_linear.h; on the CPU an exact emulation).
  std::string precision = "bf16";
  std::string fp8_format = "hybrid";    // hybrid: gradients e5m2, x and w e4m3 | e4m3: all e4m3
  std::string fp8_scaling = "delayed";  // delayed: from the amax history | current: each tensor's own amax
  int fp8_amax_history = 16;            // steps of amax history per tensor (delayed scaling)

  int micro_batch() const { return micro_batch_size > 0 ? micro_batch_size : batch_size; }
  bool operator==(const TrainConfig&) const = default;
};

// data.train / data.val: one token file or glob, or a list of them (a YAML scalar or sequence),
// read as one stream in order (data/shard_set.h). An empty string is the empty list.
struct PathList {
  std::vector<std::string> items;
  PathList() = default;
  PathList(std::vector<std::string> paths) : items(std::move(paths)) {}
  PathList(std::string path) {
    if (!path.empty()) items.push_back(std::move(path));
  }
  PathList(const char* path) : PathList(std::string(path)) {}
  PathList(const std::filesystem::path& path) : PathList(path.string()) {}
  bool empty() const { return items.empty(); }
  bool operator==(const PathList&) const = default;
};

// One dataset of data.mix: {path: GLOB_OR_LIST, weight: W}.
struct MixEntry {
  PathList path;
  double weight = 1;
  bool operator==(const MixEntry&) const = default;
};

struct DataConfig {
  PathList train = "data/tokens/train_*.bin", val = "data/tokens/val_*.bin";
  // A weighted mixture of datasets, each row of a batch drawn from one (data/loader.h); when
  // given it is the training data and data.train stays unset.
  std::vector<MixEntry> mix;
  std::string format = "auto";  // of every token file: auto (by magic) | hylo | llmc | nanogpt
  // The fraction of training tokens that source spans K V and their repeats are written over
  // (data/source_span.h): teaches copying from context in budgets where text alone does not.
  double retrieval_mix = 0;
  bool operator==(const DataConfig&) const = default;
};

// The training datasets (data.mix, or data.train as one) and the validation one, as the loader
// takes them.
std::vector<data::DatasetSpec> train_datasets(const DataConfig& data);
data::DatasetSpec val_dataset(const DataConfig& data);
// The first file of data.val, opened and verified: what the retrieval and last-word tasks read.
data::ShardReader first_val_shard(const DataConfig& data);

struct Config {
  ModelConfig model;
  TrainConfig train;
  DataConfig data;
  std::string device = "cpu";  // cpu | cuda
  // Where the config came from (a file, or "<ckpt>:/config"): used to prefix error messages.
  // Provenance, not content: it is not written by to_yaml and not compared by ==.
  std::string source_path;

  bool operator==(const Config& o) const {
    return model == o.model && train == o.train && data == o.data && device == o.device;
  }
};

// Reads the YAML file at `path`, applies `overrides` ("model.local.block=256"; the value is parsed
// as a YAML scalar of the key's type; a mapping value sets a whole section), then validate()s.
// Every error is one line naming the file (or the --set argument), the key and the value.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});
// One `--set KEY=VALUE` override as {key (trimmed), value text}; throws naming it unless it has a
// key and an '='.
std::pair<std::string, std::string> split_override(const std::string& arg);

// Same for YAML text already in memory (the /config of a checkpoint); `origin` prefixes errors.
Config config_from_yaml_text(const std::string& yaml, const std::string& origin,
                             const std::vector<std::string>& overrides = {});

// Throws hylo::Error for impossible or unsupported settings, naming the keys and their values.
void validate(const Config& config);
// The device `config.device` names; an error when it is cuda and this build has no CUDA. The CPU
// comes with keep_freed_host_memory() (core/tensor.h).
Device training_device(const Config& config);

// Every key with its value, in the field table's order: config_from_yaml_text(to_yaml(c)) == c.
std::string to_yaml(const Config& config);
// The keys of one section ("model") and their values as a JSON object, nested as in the YAML.
nlohmann::ordered_json section_to_json(const Config& config, const std::string& section);

// All valid dotted leaf keys ("model.local.block", ...), in table order (for help and tests).
std::vector<std::string> config_keys();

}  // namespace hylo

// "{}" of a PathList: its items joined by ", " (what error messages show).
template <>
struct fmt::formatter<hylo::PathList> : fmt::formatter<std::string> {
  auto format(const hylo::PathList& p, fmt::format_context& ctx) const {
    std::string joined;
    for (const std::string& item : p.items) joined += (joined.empty() ? "" : ", ") + item;
    return fmt::formatter<std::string>::format(joined, ctx);
  }
};
