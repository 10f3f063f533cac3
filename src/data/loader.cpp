#include "data/loader.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/rng.h"

namespace hylo::data {
namespace {

constexpr uint64_t kCursorVersion = 2;
constexpr size_t kCursorFields = 12, kCursorFieldsV1 = 10;
constexpr uint64_t kWordsPerStart = 2;  // Rng::below draws one 64-bit value = two 32-bit words
// The retrieval mix's stream is rank + 2^32 (the starts' is rank); each row's draws begin at
// row index x 2^20 words, far more than a row's spans ever take (~30 words a span).
constexpr uint64_t kSpanStream = uint64_t(1) << 32, kSpanWordsPerRow = uint64_t(1) << 20;
}  // namespace

DataLoader::DataLoader(const std::string& shard_path, int batch_size, int seq_len, int rank, int world_size,
                       uint64_t seed, bool prefetch, double retrieval_mix)
    : DataLoader(std::vector<DatasetSpec>{DatasetSpec{{shard_path}}}, batch_size, seq_len, rank, world_size, seed,
                 prefetch, retrieval_mix, shard_path) {}

DataLoader::DataLoader(const std::vector<DatasetSpec>& datasets, int batch_size, int seq_len, int rank,
                       int world_size, uint64_t seed, bool prefetch, double retrieval_mix, const std::string& what)
    : batch_size_(batch_size),
      seq_len_(seq_len),
      rank_(rank),
      world_size_(world_size),
      seed_(seed),
      retrieval_mix_(retrieval_mix),
      prefetch_(prefetch) {
  HYLO_CHECK(batch_size > 0 && seq_len > 0, "{}: batch size {} and sequence length {} must be positive", what,
             batch_size, seq_len);
  HYLO_CHECK(world_size > 0 && rank >= 0 && rank < world_size, "{}: rank {} is not in [0, world size {})", what,
             rank, world_size);
  HYLO_CHECK(!datasets.empty(), "{}: no datasets", what);
  double total_weight = 0;
  for (const DatasetSpec& spec : datasets) {
    HYLO_CHECK(spec.weight > 0 && std::isfinite(spec.weight), "{}: weight {} of {} must be positive", what,
               spec.weight, spec.paths.empty() ? "?" : spec.paths[0]);
    total_weight += spec.weight;
  }
  const uint64_t row_tokens = uint64_t(seq_len) + 1;
  uint64_t slice_tokens_all = 0;
  long double cumulative = 0;
  fingerprint_ = datasets.size() == 1 ? 0 : splitmix64(datasets.size());
  for (size_t d = 0; d < datasets.size(); ++d) {
    Dataset& ds = datasets_.emplace_back(Dataset{ShardSet(datasets[d], what)});
    const uint64_t n = ds.set.size();
    // Products of two 64-bit counts stay exact: datasets hold far fewer than 2^40 tokens.
    ds.slice_begin = n * uint64_t(rank) / uint64_t(world_size);
    ds.slice_end = n * uint64_t(rank + 1) / uint64_t(world_size);
    const uint64_t slice_tokens = ds.slice_end - ds.slice_begin;
    HYLO_CHECK(slice_tokens >= row_tokens,
               "{}: rank {} of {} gets {} tokens of {}, fewer than one sequence of seq_len+1 = {} (it holds {})", what,
               rank, world_size, slice_tokens, ds.set.describe(), row_tokens, n);
    ds.start_count = slice_tokens - row_tokens + 1;
    slice_tokens_all += slice_tokens;
    cumulative += datasets[d].weight;
    const long double share = cumulative / total_weight * 18446744073709551616.0L;
    ds.threshold = share >= 18446744073709551615.0L ? UINT64_MAX : uint64_t(share);
    vocab_size_ = std::max(vocab_size_, ds.set.vocab_size());
    total_tokens_ += n;
    if (datasets.size() == 1) {
      fingerprint_ = ds.set.fingerprint();
    } else {
      uint64_t weight_bits;
      std::memcpy(&weight_bits, &datasets[d].weight, sizeof weight_bits);
      fingerprint_ = splitmix64(fingerprint_ ^ ds.set.fingerprint()) ^ splitmix64(weight_bits + d);
    }
  }
  phase_ = splitmix64(seed ^ splitmix64(uint64_t(rank) + 0x6d6978));
  batches_per_epoch_ = std::max<uint64_t>(1, slice_tokens_all / (row_tokens * uint64_t(batch_size)));
  if (retrieval_mix_ > 0) {
    HYLO_CHECK(row_tokens >= uint64_t(2 * kSpanTokens), "{}: sequences of {} tokens cannot hold a source span and its repeat",
               what, row_tokens);
    span_pool_ = common_token_pool(datasets_[0].set.shards()[0]);
  }
  if (prefetch_) start_prefetch(0);
}

DataLoader::~DataLoader() { stop_prefetch(); }

std::vector<int32_t> DataLoader::make_batch(uint64_t batch_index) const {
  const auto row = size_t(seq_len_) + 1;
  std::vector<int32_t> batch(size_t(batch_size_) * row);  // (B, T+1)
  for (int b = 0; b < batch_size_; ++b) {
    const Dataset& ds = datasets_[dataset_of_row(batch_index, b)];
    Rng rng{seed_, uint64_t(rank_), (batch_index * uint64_t(batch_size_) + uint64_t(b)) * kWordsPerStart};
    const uint64_t start = ds.slice_begin + rng.below(ds.start_count);
    ds.set.copy_tokens(start, row, batch.data() + size_t(b) * row);
    for (const SpanPlacement& p : source_spans(batch_index, b))
      write_source_span(p.span, p.source, p.distance, batch.data() + size_t(b) * row);
  }
  return batch;
}

void check_vocab(const DataLoader& loader, uint64_t model_vocab) {
  for (size_t d = 0; d < loader.dataset_count(); ++d) check_vocab(loader.dataset(d), model_vocab);
}

size_t DataLoader::dataset_of_row(uint64_t batch_index, int row) const {
  if (datasets_.size() == 1) return 0;
  const uint64_t x = phase_ + (batch_index * uint64_t(batch_size_) + uint64_t(row)) * kGoldenGamma;
  for (size_t d = 0; d + 1 < datasets_.size(); ++d)
    if (x < datasets_[d].threshold) return d;
  return datasets_.size() - 1;
}

std::vector<uint64_t> DataLoader::rows_per_dataset(uint64_t batches) const {
  std::vector<uint64_t> rows(datasets_.size(), 0);
  for (uint64_t k = 0; k < batches; ++k)
    for (int b = 0; b < batch_size_; ++b) ++rows[dataset_of_row(k, b)];
  return rows;
}

std::vector<SpanPlacement> DataLoader::source_spans(uint64_t batch_index, int row) const {
  if (retrieval_mix_ == 0) return {};
  const uint64_t row_index = batch_index * uint64_t(batch_size_) + uint64_t(row);
  Rng rng{seed_, kSpanStream + uint64_t(rank_), row_index * kSpanWordsPerRow};
  return plan_source_spans(rng, seq_len_ + 1, retrieval_mix_, span_pool_);
}

std::vector<int32_t> DataLoader::next() {
  std::vector<int32_t> batch;
  if (!prefetch_) {
    batch = make_batch(batches_done_);
  } else {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return worker_error_ || (have_ready_ && ready_index_ == batches_done_); });
    if (worker_error_) std::rethrow_exception(worker_error_);
    batch = std::move(ready_);
    have_ready_ = false;
    wanted_index_ = batches_done_ + 1;
    changed_.notify_all();
  }
  ++batches_done_;
  return batch;
}

std::vector<uint64_t> DataLoader::cursor() const {
  return {kCursorVersion,
          batches_done_ / batches_per_epoch_,
          batches_done_ % batches_per_epoch_,
          batches_done_ * uint64_t(batch_size_) * kWordsPerStart,
          seed_,
          uint64_t(rank_),
          uint64_t(world_size_),
          uint64_t(batch_size_),
          uint64_t(seq_len_),
          total_tokens_,
          uint64_t(datasets_.size()),
          fingerprint_};
}

void DataLoader::restore(const std::vector<uint64_t>& cursor) {
  const std::string name = datasets_[0].set.describe() + (datasets_.size() > 1 ? " (and the mixture's others)" : "");
  const uint64_t version = cursor.empty() ? 0 : cursor[0];
  const bool v1 = version == 1 && cursor.size() == kCursorFieldsV1;
  HYLO_CHECK(v1 || (version == kCursorVersion && cursor.size() == kCursorFields),
             "{}: data cursor has {} fields (version {}), expected {} fields of version {}", name, cursor.size(),
             version, kCursorFields, kCursorVersion);
  if (v1) {
    HYLO_CHECK(datasets_.size() == 1 && datasets_[0].set.shards().size() == 1 && cursor[9] == total_tokens_,
               "{}: data cursor (version 1) was saved for one shard of {} tokens; this loader reads {} file(s) of {} "
               "tokens in {} dataset(s): resume with the run's original data.train", name, cursor[9],
               datasets_[0].set.shards().size(), total_tokens_, datasets_.size());
  } else {
    HYLO_CHECK(cursor[9] == total_tokens_ && cursor[10] == datasets_.size(),
               "{}: data cursor was saved for {} dataset(s) of {} tokens, this loader reads {} of {}", name,
               cursor[10], cursor[9], datasets_.size(), total_tokens_);
    HYLO_CHECK(cursor[11] == fingerprint_,
               "{}: data cursor was saved for other token files or weights (same sizes, other contents or order)",
               name);
  }
  HYLO_CHECK(cursor[4] == seed_, "{}: data cursor was saved with seed {}, this loader uses seed {}", name, cursor[4],
             seed_);
  HYLO_CHECK(cursor[5] == uint64_t(rank_) && cursor[6] == uint64_t(world_size_),
             "{}: data cursor was saved by rank {} of {}, this loader is rank {} of {}", name, cursor[5], cursor[6],
             rank_, world_size_);
  HYLO_CHECK(cursor[7] == uint64_t(batch_size_) && cursor[8] == uint64_t(seq_len_),
             "{}: data cursor was saved for batches of {}x{}, this loader makes {}x{}", name, cursor[7], cursor[8],
             batch_size_, seq_len_);
  HYLO_CHECK(cursor[2] < batches_per_epoch_, "{}: data cursor position {} is past the epoch length {}", name,
             cursor[2], batches_per_epoch_);
  const uint64_t batches = cursor[1] * batches_per_epoch_ + cursor[2];
  HYLO_CHECK(cursor[3] == batches * uint64_t(batch_size_) * kWordsPerStart,
             "{}: data cursor is inconsistent (rng counter {} after {} batches)", name, cursor[3], batches);
  skip_to(batches);
}

void DataLoader::skip_to(uint64_t batches_done) {
  if (!prefetch_) {
    batches_done_ = batches_done;
    return;
  }
  std::lock_guard lock(mutex_);
  batches_done_ = batches_done;
  wanted_index_ = batches_done;
  have_ready_ = false;
  changed_.notify_all();
}

void DataLoader::start_prefetch(uint64_t batch_index) {
  wanted_index_ = batch_index;
  worker_ = std::thread([this] { prefetch_loop(); });
}

void DataLoader::stop_prefetch() {
  if (!worker_.joinable()) return;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  worker_.join();
}

void DataLoader::prefetch_loop() {
  std::unique_lock lock(mutex_);
  while (true) {
    changed_.wait(lock, [&] { return stopping_ || !have_ready_; });
    if (stopping_) return;
    const uint64_t index = wanted_index_;
    lock.unlock();
    std::vector<int32_t> batch;
    std::exception_ptr error;
    try {
      batch = make_batch(index);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    if (error) {
      worker_error_ = error;
      changed_.notify_all();
      return;
    }
    if (index != wanted_index_ || have_ready_) continue;  // restore() moved on meanwhile: recompute
    ready_ = std::move(batch);
    ready_index_ = index;
    have_ready_ = true;
    changed_.notify_all();
  }
}

}  // namespace hylo::data
