// A training run's checkpoint (SPEC §7): the whole state of one job, saved by all its ranks
// together and restored on any layout. The file itself is one CheckpointState
// (checkpoint/checkpoint.h); this is what fills it from the live objects of a rank and gives it
// back to them: the parameters (fp32 masters) and buffers, the AdamW moments and updates taken,
// every rank's data cursor, the RNG, the step, the config's text and the meta, and with
// train.precision: fp8 the FP8 amax histories (/fp8; resuming in the other precision is an error).
#pragma once
#include <cstdint>
#include <string>

#include "config/config.h"
#include "data/loader.h"
#include "nn/transformer.h"
#include "optim/optimizer.h"
#include "parallel/layout.h"
#include "parallel/zero.h"

namespace hylo {

// One rank's training state, by reference to the objects that hold it.
struct TrainState {
  Transformer& model;            // parameters as the forward reads them; buffers (MoE router biases)
  AdamW& optimizer;              // fp32 masters, moments, updates taken
  const ZeroLayout* zero;        // ZeRO-1's sharding of the optimizer state, or null
  data::DataLoader& loader;      // this rank's data cursor
  const ParallelLayout& layout;  // the ranks, and the expert groups whose shards are gathered
  const Config& config;          // saved as /config; train.seed and the step make /rng
  Device device;                 // /meta/device
  int accumulation = 1;          // micro-batches per rank per step: where a new world size's streams start
  int64_t step = 0;              // steps done
};

// Every rank calls it at a step boundary. Checks that the replicas agree (a collective that gave
// ranks different bits would otherwise let rank 0's file speak for them silently), gathers the
// optimizer state and the data cursors onto rank 0, which writes checkpoint_path(run_dir,
// state.step) and keeps the newest train.keep_last.
void save_training_checkpoint(const std::string& run_dir, const TrainState& state);

// Every rank reads `path` and takes its share: its expert rows under expert parallelism, its data
// stream (the same ranks continue theirs exactly; another world size starts each rank's stream at
// the batch the step reached). Sets state.step; returns a note for the log: "" or what changed.
// A checkpoint that does not fit the model or the data fails with one line naming `path`.
std::string restore_training_checkpoint(const std::string& path, TrainState& state);

}  // namespace hylo
