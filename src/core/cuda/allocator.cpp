// Caching device allocator: see allocator.h for the bucket scheme and stream semantics.
#include "core/cuda/allocator.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/cuda/check.h"
#include "core/error.h"

namespace hylo::cuda {
namespace {

constexpr size_t kSmallQuantum = 512;
constexpr size_t kSmallLimit = size_t(1) << 20;
constexpr int kStepsPerOctave = 8;

struct Block {
  size_t bucket = 0;
  int device = 0;
  std::string category;
};

struct DeviceStats {
  size_t current = 0, peak = 0, cached = 0;
  uint64_t mallocs = 0, allocations = 0;
  std::map<std::string, size_t> current_by_category, peak_by_category;
};

struct State {
  std::mutex mutex;
  std::unordered_map<void*, Block> live;
  // (device, bucket) -> free blocks; LIFO so the most recently used (cache-warm) block goes first.
  std::map<std::pair<int, size_t>, std::vector<void*>> free_lists;
  std::map<int, DeviceStats> stats;
  std::map<std::pair<int, cudaStream_t>, std::pair<void*, size_t>> scratch;
};

// Never destroyed: freeing device memory from a static destructor would run after the CUDA
// runtime has shut down.
State& state() {
  static State* s = new State;
  return *s;
}

std::string category_of(const char* what) {
  std::string_view w = what ? what : "unnamed";
  return std::string(w.substr(0, w.find(':')));
}

int current_device() {
  int device = 0;
  HYLO_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

// Frees every cached block; caller holds the mutex.
void empty_cache_locked(State& s) {
  int previous = current_device();
  for (auto& [key, blocks] : s.free_lists) {
    if (blocks.empty()) continue;
    HYLO_CUDA_CHECK(cudaSetDevice(key.first));
    for (void* p : blocks) {
      HYLO_CUDA_CHECK(cudaFree(p));
      s.stats[key.first].cached -= key.second;
    }
    blocks.clear();
  }
  HYLO_CUDA_CHECK(cudaSetDevice(previous));
}

}  // namespace

size_t bucket_size(size_t bytes) {
  if (bytes <= kSmallLimit) return std::max(kSmallQuantum, (bytes + kSmallQuantum - 1) / kSmallQuantum * kSmallQuantum);
  int octave = 63 - __builtin_clzll(bytes);  // 2^octave <= bytes < 2^(octave+1)
  size_t step = (size_t(1) << octave) / kStepsPerOctave;
  return (bytes + step - 1) / step * step;
}

void* allocate(size_t bytes, const char* what) {
  if (bytes == 0) return nullptr;
  State& s = state();
  std::lock_guard lock(s.mutex);
  int device = current_device();
  size_t bucket = bucket_size(bytes);
  DeviceStats& st = s.stats[device];

  void* ptr = nullptr;
  auto& free_list = s.free_lists[{device, bucket}];
  if (!free_list.empty()) {
    ptr = free_list.back();
    free_list.pop_back();
    st.cached -= bucket;
  } else {
    cudaError_t err = cudaMalloc(&ptr, bucket);
    if (err == cudaErrorMemoryAllocation) {
      // Cached blocks of other sizes may be what stands in the way: give them back and retry.
      (void)cudaGetLastError();
      empty_cache_locked(s);
      err = cudaMalloc(&ptr, bucket);
    }
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      HYLO_FAIL("out of memory allocating {} ({} bytes, {:.2f} GiB in use on GPU {}): try a smaller "
                "train.batch_size / micro-batch or train.recompute: true",
                what ? what : "unnamed", bytes, double(st.current) / double(1 << 30), device);
    }
    HYLO_CUDA_CHECK(err);
    ++st.mallocs;
  }

  std::string category = category_of(what);
  st.current += bucket;
  st.peak = std::max(st.peak, st.current);
  size_t& cat = st.current_by_category[category];
  cat += bucket;
  size_t& cat_peak = st.peak_by_category[category];
  cat_peak = std::max(cat_peak, cat);
  ++st.allocations;
  s.live.emplace(ptr, Block{bucket, device, std::move(category)});
  return ptr;
}

void release(void* ptr) {
  if (!ptr) return;
  State& s = state();
  std::lock_guard lock(s.mutex);
  auto it = s.live.find(ptr);
  HYLO_CHECK(it != s.live.end(), "cuda allocator: release of {} which it did not allocate (double free?)", ptr);
  Block& b = it->second;
  DeviceStats& st = s.stats[b.device];
  st.current -= b.bucket;
  st.current_by_category[b.category] -= b.bucket;
  st.cached += b.bucket;
  s.free_lists[{b.device, b.bucket}].push_back(ptr);
  s.live.erase(it);
}

void empty_cache() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  empty_cache_locked(s);
}

void* stream_scratch(size_t bytes, cudaStream_t stream) {
  State& s = state();
  std::pair<void*, size_t> old;
  {
    std::lock_guard lock(s.mutex);
    auto& slot = s.scratch[{current_device(), stream}];
    if (slot.second >= bytes) return slot.first;
    old = slot;
    slot = {nullptr, 0};
  }
  // Kernels queued earlier on this stream may still read the old buffer: wait before it can be
  // handed to someone else.
  if (old.first) {
    HYLO_CUDA_CHECK(cudaStreamSynchronize(stream));
    release(old.first);
  }
  size_t grown = std::max(bucket_size(bytes), 2 * old.second);
  void* fresh = allocate(grown, "scratch: kernel temporaries");
  std::lock_guard lock(s.mutex);
  s.scratch[{current_device(), stream}] = {fresh, grown};
  return fresh;
}

AllocatorStats allocator_stats() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  const DeviceStats& st = s.stats[current_device()];
  AllocatorStats out;
  out.current_bytes = st.current;
  out.peak_bytes = st.peak;
  out.cached_bytes = st.cached;
  out.device_mallocs = st.mallocs;
  out.allocations = st.allocations;
  out.current_by_category = st.current_by_category;
  out.peak_by_category = st.peak_by_category;
  return out;
}

}  // namespace hylo::cuda
