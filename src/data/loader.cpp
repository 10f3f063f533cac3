#include "data/loader.h"

#include <algorithm>

#include "core/error.h"

namespace hylo::data {
namespace {

constexpr uint64_t kCursorVersion = 1;
constexpr size_t kCursorFields = 10;
constexpr uint64_t kWordsPerStart = 2;  // Rng::below draws one 64-bit value = two 32-bit words
// The retrieval mix's stream is rank + 2^32 (the starts' is rank); each row's draws begin at
// row index x 2^20 words, far more than a row's spans ever take (~30 words a span).
constexpr uint64_t kSpanStream = uint64_t(1) << 32, kSpanWordsPerRow = uint64_t(1) << 20;

}  // namespace

void check_vocab(const ShardReader& shard, uint64_t model_vocab) {
  HYLO_CHECK(shard.vocab_size() <= model_vocab,
             "{}: shard vocab {} exceeds the model's vocab {} (set model.vocab_size >= {})", shard.path(),
             shard.vocab_size(), model_vocab, shard.vocab_size());
}

void check_vocab(const std::string& shard_path, uint64_t model_vocab) {
  check_vocab(ShardReader(shard_path, /*verify_payload_crc=*/false), model_vocab);
}

DataLoader::DataLoader(const std::string& shard_path, int batch_size, int seq_len, int rank, int world_size,
                       uint64_t seed, bool prefetch, double retrieval_mix)
    : shard_(shard_path),
      batch_size_(batch_size),
      seq_len_(seq_len),
      rank_(rank),
      world_size_(world_size),
      seed_(seed),
      retrieval_mix_(retrieval_mix),
      prefetch_(prefetch) {
  HYLO_CHECK(batch_size > 0 && seq_len > 0, "{}: batch size {} and sequence length {} must be positive", shard_path,
             batch_size, seq_len);
  HYLO_CHECK(world_size > 0 && rank >= 0 && rank < world_size, "{}: rank {} is not in [0, world size {})",
             shard_path, rank, world_size);
  const uint64_t n = shard_.size();
  // Products of two 64-bit counts stay exact: shards hold far fewer than 2^40 tokens.
  slice_begin_ = n * uint64_t(rank) / uint64_t(world_size);
  slice_end_ = n * uint64_t(rank + 1) / uint64_t(world_size);
  const uint64_t slice_tokens = slice_end_ - slice_begin_;
  const uint64_t row_tokens = uint64_t(seq_len) + 1;
  HYLO_CHECK(slice_tokens >= row_tokens,
             "{}: rank {} of {} gets {} tokens, fewer than one sequence of seq_len+1 = {} (shard holds {})",
             shard_path, rank, world_size, slice_tokens, row_tokens, n);
  start_count_ = slice_tokens - row_tokens + 1;
  batches_per_epoch_ = std::max<uint64_t>(1, slice_tokens / (row_tokens * uint64_t(batch_size)));
  if (retrieval_mix_ > 0) {
    HYLO_CHECK(row_tokens >= uint64_t(2 * kSpanTokens),
               "{}: sequences of {} tokens cannot hold a source span and its repeat", shard_path, row_tokens);
    span_pool_ = common_token_pool(shard_);
  }
  if (prefetch_) start_prefetch(0);
}

DataLoader::~DataLoader() { stop_prefetch(); }

std::vector<int32_t> DataLoader::make_batch(uint64_t batch_index) const {
  const auto row = size_t(seq_len_) + 1;
  std::vector<int32_t> batch(size_t(batch_size_) * row);  // (B, T+1)
  for (int b = 0; b < batch_size_; ++b) {
    Rng rng{seed_, uint64_t(rank_), (batch_index * uint64_t(batch_size_) + uint64_t(b)) * kWordsPerStart};
    uint64_t start = slice_begin_ + rng.below(start_count_);
    shard_.copy_tokens(start, row, batch.data() + size_t(b) * row);
    for (const SpanPlacement& p : source_spans(batch_index, b))
      write_source_span(p.span, p.source, p.distance, batch.data() + size_t(b) * row);
  }
  return batch;
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
          shard_.size()};
}

void DataLoader::restore(const std::vector<uint64_t>& cursor) {
  const std::string& path = shard_.path();
  HYLO_CHECK(cursor.size() == kCursorFields && cursor[0] == kCursorVersion,
             "{}: data cursor has {} fields (version {}), expected {} fields of version {}", path, cursor.size(),
             cursor.empty() ? 0 : cursor[0], kCursorFields, kCursorVersion);
  HYLO_CHECK(cursor[9] == shard_.size(), "{}: data cursor was saved for a shard of {} tokens, this one holds {}", path,
             cursor[9], shard_.size());
  HYLO_CHECK(cursor[4] == seed_, "{}: data cursor was saved with seed {}, this loader uses seed {}", path, cursor[4],
             seed_);
  HYLO_CHECK(cursor[5] == uint64_t(rank_) && cursor[6] == uint64_t(world_size_),
             "{}: data cursor was saved by rank {} of {}, this loader is rank {} of {}", path, cursor[5], cursor[6],
             rank_, world_size_);
  HYLO_CHECK(cursor[7] == uint64_t(batch_size_) && cursor[8] == uint64_t(seq_len_),
             "{}: data cursor was saved for batches of {}x{}, this loader makes {}x{}", path, cursor[7], cursor[8],
             batch_size_, seq_len_);
  HYLO_CHECK(cursor[2] < batches_per_epoch_, "{}: data cursor position {} is past the epoch length {}", path,
             cursor[2], batches_per_epoch_);
  const uint64_t batches = cursor[1] * batches_per_epoch_ + cursor[2];
  HYLO_CHECK(cursor[3] == batches * uint64_t(batch_size_) * kWordsPerStart,
             "{}: data cursor is inconsistent (rng counter {} after {} batches)", path, cursor[3], batches);
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
