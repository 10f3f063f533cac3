// Resumable, rank-sharded batches of token sequences from one dataset or a weighted mixture of
// several (SPEC §4); a dataset is a list of token files read as one stream (data/shard_set.h).
//
// Rank r of W owns the contiguous token range [N*r/W, N*(r+1)/W) of every dataset's stream of N
// tokens; ranks never read each other's tokens. Every sequence is T+1 consecutive tokens (inputs
// and shifted targets; it may run from one file into the next) that start at a position drawn
// uniformly from the rank's range of its dataset with a Philox stream (seed, stream = rank). Row j
// of the rank (j = k*B + b for batch k) uses the random words [2j, 2j+2), so a batch is a pure
// function of (datasets, seed, rank, world size, B, T, k): the cursor only needs k, and a
// background thread can prepare batch k+1 without changing anything.
//
// In a mixture, row j reads dataset d where x_j = frac(phase + j * golden ratio) falls in d's
// share of [0, 1) (a Weyl sequence, phase from (seed, rank)): no random draw, and over any n rows
// each dataset's count is within O(log n) of n x its weight, so the realized mixture matches the
// weights already within a few batches. One dataset reads exactly as the single-shard loader did.
//
// With a retrieval mix (data.retrieval_mix) source spans and their repeats are written over about
// that fraction of each row's tokens (data/source_span.h, plan_source_spans; the pool is the first
// training file's). The draws come from a second Philox stream per rank, keyed by the row's index:
// the rows' start positions are those of the unmixed loader, and a batch is still a function of k.
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
#include "data/shard_set.h"
#include "data/source_span.h"

namespace hylo::data {

class DataLoader {
 public:
  // `what` names the datasets in errors (the config key: data.train, data.mix, data.val).
  DataLoader(const std::vector<DatasetSpec>& datasets, int batch_size, int seq_len, int rank, int world_size,
             uint64_t seed, bool prefetch = true, double retrieval_mix = 0, const std::string& what = "data.train");
  // One token file (or glob).
  DataLoader(const std::string& shard_path, int batch_size, int seq_len, int rank, int world_size, uint64_t seed,
             bool prefetch = true, double retrieval_mix = 0);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // batch_size rows of seq_len+1 tokens, row-major (B, T+1).
  std::vector<int32_t> next();

  // Saved in checkpoints: {format version (2), epoch, position in epoch, rng counter, seed, rank,
  // world size, batch size, seq len, tokens of all datasets, dataset count, fingerprint of the
  // datasets' files and weights}. An epoch is as many batches as it takes to draw about as many
  // tokens as the rank's slices hold.
  std::vector<uint64_t> cursor() const;
  // Continues exactly where the loader that produced `cursor` stopped. Throws when the cursor
  // came from other data, seed, rank layout or batch shape. A version-1 cursor (10 fields, saved
  // by the single-shard loader) restores into a loader of that one shard.
  void restore(const std::vector<uint64_t>& cursor);
  // Continues as if `batches_done` batches had been drawn (a resume on another world size, whose
  // cursors belong to other ranks).
  void skip_to(uint64_t batches_done);

  // The source spans written into row `row` of batch `batch_index` (none without a retrieval mix).
  std::vector<SpanPlacement> source_spans(uint64_t batch_index, int row) const;

  // The dataset row `row` of batch `batch_index` reads.
  size_t dataset_of_row(uint64_t batch_index, int row) const;
  // Rows of batches [0, batches) per dataset: the mixture this rank's run will realize.
  std::vector<uint64_t> rows_per_dataset(uint64_t batches) const;

  uint64_t vocab_size() const { return vocab_size_; }  // the largest of the datasets'
  size_t dataset_count() const { return datasets_.size(); }
  const ShardSet& dataset(size_t d) const { return datasets_[d].set; }
  uint64_t batches_per_epoch() const { return batches_per_epoch_; }
  // This rank's token range of dataset d's stream.
  uint64_t slice_begin(size_t d = 0) const { return datasets_[d].slice_begin; }
  uint64_t slice_end(size_t d = 0) const { return datasets_[d].slice_end; }

 private:
  std::vector<int32_t> make_batch(uint64_t batch_index) const;
  void start_prefetch(uint64_t batch_index);
  void stop_prefetch();
  void prefetch_loop();

  struct Dataset {
    ShardSet set;
    uint64_t slice_begin = 0, slice_end = 0;
    uint64_t start_count = 0;  // number of valid sequence starts in the slice
    uint64_t threshold = 0;    // rows with x below it (and above the previous one's) read this dataset
  };
  std::vector<Dataset> datasets_;
  int batch_size_, seq_len_, rank_, world_size_;
  uint64_t seed_;
  uint64_t vocab_size_ = 0, total_tokens_ = 0, fingerprint_ = 0, phase_ = 0;
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

// check_vocab (data/shard_set.h) for every file of every dataset of the loader.
void check_vocab(const DataLoader& loader, uint64_t model_vocab);

}  // namespace hylo::data
