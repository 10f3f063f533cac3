#include "data/prepare_pipeline.h"

#include <fmt/format.h>

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "core/parallel_for.h"
#include "data/json_line.h"

namespace hylo::data {
namespace {

// Each worker's scratch: a batch is tokenized into it, then handed on.
void tokenize_batch(TokenizedBatch& batch, const CorpusReader& reader, TokenEncoder& encoder, JsonLineParser& json,
                    const std::string& text_key) {
  batch.ids.clear();
  batch.part_tokens.assign(batch.raw.parts.size(), 0);
  batch.text_bytes.assign(batch.raw.parts.size(), 0);
  for (size_t k = 0; k < batch.raw.parts.size(); ++k) {
    const DocumentPart& part = batch.raw.parts[k];
    const std::string_view bytes(batch.raw.bytes.data() + part.offset, part.size);
    const std::string& path = reader.files()[part.file].path;
    std::string_view body = bytes;
    if (part.json) {
      try {
        body = json.text(bytes, text_key);
      } catch (const Error& e) {
        HYLO_FAIL("{}:{}: {}", path, part.where, e.what());
      }
    }
    const size_t before = batch.ids.size();
    const size_t bad = encoder.encode_ordinary(body, batch.ids);
    if (bad != std::string_view::npos) {
      if (part.json) HYLO_FAIL("{}:{}: text is not valid UTF-8 (byte {} of the text)", path, part.where, bad);
      HYLO_FAIL("{}: not valid UTF-8 at byte {}; documents must be UTF-8", path, part.where + bad);
    }
    batch.part_tokens[k] = batch.ids.size() - before;
    batch.text_bytes[k] = body.size();
  }
}

}  // namespace

void run_tokenize_pipeline(CorpusReader& reader, const Tokenizer& tokenizer, const PipelineOptions& options,
                           const std::function<void(const TokenizedBatch&)>& consume) {
  const int workers = options.workers > 0 ? options.workers : int(std::max(1u, std::thread::hardware_concurrency()));
  // Room for the reader to run ahead while finished batches wait behind a slower one for their
  // turn: with 2 x workers the 16-worker pipeline's workers sat idle 18% of the time (data SUMMARY).
  const size_t capacity = size_t(4 * workers + 4);

  // One condition per waiter, so that an event wakes only whom it concerns: one worker per batch
  // read, the reader per batch consumed, the consumer per batch tokenized. (A single shared one
  // woke all 16 workers on every event, each preempting a busy thread to find nothing to do.)
  std::mutex mutex;
  std::condition_variable slot_free, work_ready, batch_done;
  auto wake_all = [&] {
    slot_free.notify_all();
    work_ready.notify_all();
    batch_done.notify_all();
  };
  std::deque<std::unique_ptr<TokenizedBatch>> todo, spare;
  std::map<uint64_t, std::unique_ptr<TokenizedBatch>> done;
  // A batch that failed to tokenize waits here for its turn, so that the error reported is the
  // first in input order whatever the workers' timing (a later batch can fail first).
  std::map<uint64_t, std::exception_ptr> done_failed;
  std::exception_ptr read_error;  // raised once every batch read before it is consumed
  std::deque<uint64_t> todo_index;
  size_t live = 0;  // batches handed out by the reader and not yet consumed
  uint64_t batches = 0;
  bool reading = true, failed = false;
  std::exception_ptr error;
  auto fail = [&](std::exception_ptr e) {
    std::lock_guard lock(mutex);
    if (!failed) error = e;
    failed = true;
    wake_all();
  };

  std::thread read_thread([&] {
    name_this_thread("prepare-read");
    try {
      while (true) {
        std::unique_ptr<TokenizedBatch> batch;
        {
          std::unique_lock lock(mutex);
          slot_free.wait(lock, [&] { return failed || live < capacity; });
          if (failed) break;
          ++live;
          if (!spare.empty()) batch = std::move(spare.front()), spare.pop_front();
        }
        if (!batch) batch = std::make_unique<TokenizedBatch>();
        const bool more = reader.next(batch->raw, options.batch_bytes);
        std::lock_guard lock(mutex);
        if (!more) {
          --live;
          break;
        }
        todo.push_back(std::move(batch));
        todo_index.push_back(batches++);
        work_ready.notify_one();
      }
    } catch (...) {
      std::lock_guard lock(mutex);
      read_error = std::current_exception();
    }
    std::lock_guard lock(mutex);
    reading = false;
    wake_all();  // idle workers end, and the consumer learns the batch count
  });

  std::vector<std::thread> pool;
  for (int w = 0; w < workers; ++w) {
    pool.emplace_back([&] {
      name_this_thread("prepare-tokens");
      try {
        TokenEncoder encoder(tokenizer);
        JsonLineParser json;
        while (true) {
          std::unique_ptr<TokenizedBatch> batch;
          uint64_t index;
          {
            std::unique_lock lock(mutex);
            work_ready.wait(lock, [&] { return failed || !todo.empty() || !reading; });
            if (failed || todo.empty()) return;
            batch = std::move(todo.front());
            index = todo_index.front();
            todo.pop_front();
            todo_index.pop_front();
          }
          std::exception_ptr batch_error;
          try {
            tokenize_batch(*batch, reader, encoder, json, options.text_key);
          } catch (...) {
            batch_error = std::current_exception();
          }
          std::lock_guard lock(mutex);
          if (batch_error)
            done_failed.emplace(index, batch_error);
          else
            done.emplace(index, std::move(batch));
          batch_done.notify_one();  // only the consumer waits for it
        }
      } catch (...) {
        fail(std::current_exception());
      }
    });
  }

  try {
    for (uint64_t next = 0;; ++next) {
      std::unique_ptr<TokenizedBatch> batch;
      {
        std::unique_lock lock(mutex);
        batch_done.wait(lock, [&] {
          return failed || done.count(next) || done_failed.count(next) || (!reading && next == batches);
        });
        if (failed) break;
        if (done_failed.count(next)) std::rethrow_exception(done_failed.at(next));
        if (!done.count(next)) {
          if (read_error) std::rethrow_exception(read_error);
          break;
        }
        batch = std::move(done.at(next));
        done.erase(next);
      }
      consume(*batch);
      std::lock_guard lock(mutex);
      --live;
      spare.push_back(std::move(batch));
      slot_free.notify_one();
    }
  } catch (...) {
    fail(std::current_exception());
  }
  read_thread.join();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace hylo::data
