// fn(0) .. fn(n - 1) on up to `threads` threads (0: the hardware's). Items are handed out one at a
// time, so a result must depend only on its index, never on which thread ran it; the first
// exception a call throws is rethrown here once every thread has stopped.
#pragma once
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

namespace hylo {

// Names the calling thread (at most 15 characters), so that top -H, perf and /proc/PID/task show
// which part of a pipeline a thread is (scripts/thread_cpu.py sums CPU time by these names).
inline void name_this_thread(const char* name) { pthread_setname_np(pthread_self(), name); }

inline void parallel_for(size_t n, const std::function<void(size_t)>& fn, int threads = 0) {
  if (threads <= 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
  threads = int(std::min<size_t>(size_t(threads), n));
  if (threads <= 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<size_t> next{0};
  std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
  auto worker = [&](int t) {
    try {
      for (size_t i; (i = next.fetch_add(1)) < n;) fn(i);
    } catch (...) {
      errors[size_t(t)] = std::current_exception();
      next = n;  // the others stop at their next item
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker, t);
  worker(0);
  for (std::thread& thread : pool) thread.join();
  for (const std::exception_ptr& error : errors)
    if (error) std::rethrow_exception(error);
}

}  // namespace hylo
