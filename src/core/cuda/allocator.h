// Caching device allocator. cudaMalloc/cudaFree synchronise the device and cost tens of
// microseconds, so every device buffer of a training step comes from here and goes back to a
// free list on release; after the first step a steady-state loop makes no cudaMalloc at all.
//
// Sizes are rounded to buckets and a request is served only from its own bucket's free list
// (no splitting, no coalescing): the reuse pattern of a training step repeats exactly, so exact
// buckets are enough and the allocator stays small and deterministic.
//   <= 1 MiB : multiples of 512 B
//   >  1 MiB : 8 steps per power of two (2^k * {1, 1.125, ..., 1.875}), waste < 12.5%
//
// Stream semantics: a released block may be handed out again at once. That is safe for work
// ordered on one stream (the next user's kernels run after the previous user's); a caller that
// releases a buffer still read by another stream must synchronise first.
//
// `what` names the allocation in errors and statistics: "category: detail" (e.g.
// "activations: block3.attn.q"); the text before the first ':' is the statistics category.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

namespace hylo::cuda {

// Throws hylo::Error "out of memory allocating <what> (<bytes> bytes): try a smaller
// train.batch_size / micro-batch or train.recompute: true" when cudaMalloc fails even after the
// cache has been emptied. Returns nullptr for bytes == 0. Memory is uninitialised.
void* allocate(size_t bytes, const char* what);
// Returns the block to its bucket's free list; nullptr is ignored; a pointer this allocator did
// not hand out throws.
void release(void* ptr);
// cudaFree every cached (free) block of every device; live blocks are untouched.
void empty_cache();

struct AllocatorStats {
  size_t current_bytes = 0;   // live blocks (bucket sizes) on the current device
  size_t peak_bytes = 0;      // max of current_bytes since the start
  size_t cached_bytes = 0;    // free blocks held for reuse
  uint64_t device_mallocs = 0;  // cudaMalloc calls so far (reuse tests watch this)
  uint64_t allocations = 0;     // allocate() calls that returned a block
  std::map<std::string, size_t> current_by_category;
  std::map<std::string, size_t> peak_by_category;
};
AllocatorStats allocator_stats();  // for the current device

// Per-(device, stream) scratch for kernels' temporaries (partial sums, sort buffers): at least
// `bytes`, valid until the next stream_scratch call for the same stream. Work queued on one stream
// runs in order, so consecutive ops on a stream can share it. Growing it synchronises the stream
// (first step only; don't let it first grow during graph capture).
void* stream_scratch(size_t bytes, cudaStream_t stream);

// The bucket a request of `bytes` is served from (exposed for tests and memory planning).
size_t bucket_size(size_t bytes);

}  // namespace hylo::cuda
