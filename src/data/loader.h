// Resumable, rank-sharded batches of token sequences from one shard (SPEC §4).
//
// Rank r of W owns the contiguous token range [N*r/W, N*(r+1)/W) of the shard; ranks never read
// each other's tokens. Every sequence is T+1 consecutive tokens (inputs and shifted targets) that
// start at a position drawn uniformly from the rank's range with a Philox stream (seed, stream =
// rank). Batch k always uses the random words [2*B*k, 2*B*(k+1)), so a batch is a pure function
// of (shard, seed, rank, world size, B, T, k): the cursor only needs k, and a background thread
// can prepare batch k+1 without changing anything.
//
// With a retrieval mix (data.retrieval_mix) source spans and their repeats are written over about
// that fraction of each row's tokens (data/source_span.h, plan_source_spans). The draws come from
// a second Philox stream per rank, keyed by the row's index: the rows' start positions are those
// of the unmixed loader, and a batch is still a function of k.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/rng.h"
#include "data/shard.h"
#include "data/source_span.h"

namespace hylo::data {

// Throws a one-line error at start-up when a shard's ids may not fit the model's embedding.
// A model vocab padded above the shard's (50304 >= 50257) is fine.
void check_vocab(const ShardReader& shard, uint64_t model_vocab);
void check_vocab(const std::string& shard_path, uint64_t model_vocab);

class DataLoader {
 public:
  DataLoader(const std::string& shard_path, int batch_size, int seq_len, int rank, int world_size, uint64_t seed,
             bool prefetch = true, double retrieval_mix = 0);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // batch_size rows of seq_len+1 tokens, row-major (B, T+1).
  std::vector<int32_t> next();

  // Saved in checkpoints: {format version, epoch, position in epoch, rng counter, seed, rank,
  // world size, batch size, seq len, shard tokens}. An epoch is as many batches as it takes to
  // draw about as many tokens as the rank's slice holds.
  std::vector<uint64_t> cursor() const;
  // Continues exactly where the loader that produced `cursor` stopped. Throws when the cursor
  // came from a different shard, seed, rank layout or batch shape.
  void restore(const std::vector<uint64_t>& cursor);
  // Continues as if `batches_done` batches had been drawn (a resume on another world size, whose
  // cursors belong to other ranks).
  void skip_to(uint64_t batches_done);

  // The source spans written into row `row` of batch `batch_index` (none without a retrieval mix).
  std::vector<SpanPlacement> source_spans(uint64_t batch_index, int row) const;

  uint64_t vocab_size() const { return shard_.vocab_size(); }
  const ShardReader& shard() const { return shard_; }
  uint64_t batches_per_epoch() const { return batches_per_epoch_; }
  uint64_t slice_begin() const { return slice_begin_; }
  uint64_t slice_end() const { return slice_end_; }

 private:
  std::vector<int32_t> make_batch(uint64_t batch_index) const;
  void start_prefetch(uint64_t batch_index);
  void stop_prefetch();
  void prefetch_loop();

  ShardReader shard_;
  int batch_size_, seq_len_, rank_, world_size_;
  uint64_t seed_;
  uint64_t slice_begin_ = 0, slice_end_ = 0;
  uint64_t start_count_ = 0;  // number of valid sequence starts in the slice
  uint64_t batches_per_epoch_ = 1;
  uint64_t batches_done_ = 0;
  double retrieval_mix_;
  std::vector<int32_t> span_pool_;  // the shard's common tokens, when retrieval_mix_ > 0

  // Prefetch: the worker fills `ready_` with batch `ready_index_` when `wanted_index_` changes.
  bool prefetch_;
  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool stopping_ = false;
  uint64_t wanted_index_ = 0;
  bool have_ready_ = false;
  uint64_t ready_index_ = 0;
  std::vector<int32_t> ready_;
  std::exception_ptr worker_error_;
};

}  // namespace hylo::data
