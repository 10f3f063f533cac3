// Checkpoints: one HDF5 file per step (SPEC §7).
//
//   /model/<param>  /optim/m/<param>  /optim/v/<param>  /optim/step  /optim/updates  /buffers/<name>
//   /rng  /data/cursor  /config (YAML text)  /meta/<key> (strings)  /complete
//   /fp8/<name>  (train.precision: fp8 runs only: the FP8 scaling state, checkpoint/train_checkpoint.h)
//
// Every dataset carries a `crc32` attribute over its bytes; `/complete` (the number of
// checksummed datasets) is written last; a whole-file checksum in the HDF5 user block
// (file_sum.h) proves the bytes intact before libhdf5 parses any of them. The file is written
// under a temporary name of its writer's own (unique_temp_path), fsync'ed and renamed, so a crash
// at any point leaves either the previous checkpoints or a complete new one.
// Groups track creation order, so tensors load back in the order they were saved.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace hylo {

// Tensors are stored with their dtype (f32 master weights and moments in practice; f64, i32,
// i64 and bf16 also round-trip). Tensors on the GPU are copied to the host when saved; loaded
// tensors are on the CPU. Names are dataset names: any text without '/', dots welcome.
struct NamedTensor {
  std::string name;
  Tensor value;
};

struct CheckpointState {
  int64_t step = 0;
  // AdamW updates applied, its bias-correction step: `step` less the steps skipped as non-finite
  // (train.nan_policy: skip). Read as `step` from checkpoints written before it was saved.
  int64_t updates = 0;
  std::vector<NamedTensor> model, optim_m, optim_v, buffers /*non-trained state, e.g. MoE router bias*/;
  // FP8 scaling state (amax histories); empty, and no /fp8 group, for bf16 runs.
  std::vector<NamedTensor> fp8;
  std::vector<uint64_t> rng, data_cursor;
  std::string config_yaml;
  std::vector<std::pair<std::string, std::string>> meta;  // version, git revision, world size, layout
};

// Writes `path` atomically (via a unique_temp_path; parent directories are created). A failure
// (a full disk) removes the temporary file and leaves every earlier checkpoint as it was.
void save_checkpoint(const std::string& path, const CheckpointState& state);

// Checks the whole-file checksum, then reads and verifies every dataset's checksum and the
// completion marker. A file written before the whole-file checksum is first parsed by a child
// process (one warning line): a crash of libhdf5 on damaged metadata kills the child, not us.
// Errors are one line naming the file (and the dataset when one is at fault), e.g.
// "runs/x/checkpoints/step_20.h5: truncated or corrupt HDF5 file (whole-file checksum mismatch: ...)".
// Without `moments` the AdamW moments are verified but not kept (optim_m and optim_v stay empty):
// what evaluation, generation and export need, a third of the memory.
CheckpointState load_checkpoint(const std::string& path, bool moments = true);

// The same checks as load_checkpoint without keeping the tensors; a checksummed file is read once
// (its checksum), then only its structure is parsed.
void verify_checkpoint(const std::string& path);

// <run_dir>/checkpoints/step_<step>.h5
std::string checkpoint_path(const std::string& run_dir, int64_t step);

// The step number of a file named step_<N>.h5, if it is one (temporary ".tmp" files are not).
std::optional<int64_t> checkpoint_step(const std::string& path);

// The newest checkpoint that verifies; corrupt ones are skipped with a one-line warning on stderr,
// `.tmp` leftovers are ignored. nullopt when there is none.
std::optional<std::string> latest_valid_checkpoint(const std::string& run_dir);

// Keeps the `keep_last` newest step_<N>.h5 (all when keep_last <= 0) and removes `.tmp`
// leftovers of steps older than the newest checkpoint (writers that died).
void prune_checkpoints(const std::string& run_dir, int64_t keep_last);

// Moves every checkpoint of run_dir later than `step` into
// run_dir/checkpoints/superseded/, and returns their file names. A run that starts at `step` (a
// resume from an older checkpoint, or after the newest ones failed verification) writes its own
// history from there: left in place, the later files would outrank its new checkpoints when
// pruning and when `--resume auto` picks the newest. Moved rather than deleted: nothing is lost.
std::vector<std::string> set_aside_checkpoints_after(const std::string& run_dir, int64_t step);

}  // namespace hylo
