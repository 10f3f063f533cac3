// What a one-key decode step's ~6 µs is made of (experiments/results/decode/LOG.md, "the per-step
// floor"): kernels that do a part of what decode_kernel does at the batch-64 shape (1024 blocks of
// 128 threads), timed as `hylo bench decode` times a step (an event pair around each launch, all
// launches queued behind a GPU-side delay, median) and as a run (512 launches under one event
// pair, per launch; plain and as programmatic dependent launches).
// A one-off probe, not part of the build (experiments/dev/README.md); its results:
// experiments/results/decode/decode_floor_h200.json. Build (the binary takes no arguments):
//   nvcc -O3 -std=c++20 -arch=sm_90 -o decode_floor experiments/dev/decode_floor_probe.cu
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#define CHECK(x)                                                                      \
  do {                                                                                \
    cudaError_t err_ = (x);                                                           \
    if (err_ != cudaSuccess) {                                                        \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(err_)); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

constexpr int kBatch = 64, kHeads = 16, kDim = 128, kThreads = 128;

__global__ void delay_kernel(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

__global__ void empty_kernel(const uint4*, const uint4*, uint4*) {}

// Waits on the previous grid, as a dependent launch's decode does, and nothing else.
__global__ void empty_pdl_kernel(const uint4*, const uint4*, uint4*) {
  cudaTriggerProgrammaticLaunchCompletion();
  cudaGridDependencySynchronize();
}

// Block (h, b): each of 16 lanes reads 16 bytes of one k row and of q, and writes 16 bytes of out:
// one trip to memory and one write, no merge.
__global__ void load_store_kernel(const uint4* kv, const uint4* q, uint4* out) {
  const int row = blockIdx.z * gridDim.y + blockIdx.y, lane = threadIdx.x;
  if (lane >= kDim / 8) return;
  const uint4 k = __ldg(kv + size_t(row) * 512 * (kDim / 8) + lane), x = __ldg(q + row * (kDim / 8) + lane);
  out[row * (kDim / 8) + lane] = make_uint4(k.x ^ x.x, k.y ^ x.y, k.z ^ x.z, k.w ^ x.w);
}

// The same plus what decode_kernel adds for one key: all 8 lane groups, a shared-memory merge and
// a barrier before the write.
__global__ void load_merge_store_kernel(const uint4* kv, const uint4* q, uint4* out) {
  __shared__ uint4 part[kThreads];
  const int row = blockIdx.z * gridDim.y + blockIdx.y, tid = threadIdx.x, lane = tid % 16, grp = tid / 16;
  uint4 k = make_uint4(0, 0, 0, 0);
  if (grp == 0) k = __ldg(kv + size_t(row) * 512 * (kDim / 8) + lane);
  const uint4 x = __ldg(q + row * (kDim / 8) + lane);
  part[tid] = make_uint4(k.x ^ x.x, k.y ^ x.y, k.z ^ x.z, k.w ^ x.w);
  __syncthreads();
  if (tid < 16) {
    uint4 r = part[tid];
    for (int g = 1; g < 8; ++g) r.x += part[g * 16 + tid].x;
    out[row * (kDim / 8) + tid] = r;
  }
}

using Kernel = void (*)(const uint4*, const uint4*, uint4*);

struct Buffers {
  std::vector<uint4*> kv;  // copies rotated so that each launch reads cold lines
  uint4 *q, *out;
};

void launch(Kernel k, dim3 grid, bool pdl, const Buffers& buf, int i, cudaStream_t s) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t c{};
  c.gridDim = grid;
  c.blockDim = dim3(kThreads);
  c.stream = s;
  c.attrs = attr;
  c.numAttrs = pdl ? 1 : 0;
  CHECK(cudaLaunchKernelEx(&c, k, (const uint4*)buf.kv[i % buf.kv.size()], (const uint4*)buf.q, buf.out));
}

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// µs per launch: per step (event pair around each) and per launch of a 512-launch run.
void time_kernel(const char* name, Kernel k, dim3 grid, bool pdl, const Buffers& buf, cudaStream_t s) {
  constexpr int kSteps = 50, kRun = 512;
  std::vector<cudaEvent_t> ev(2 * kSteps);
  for (auto& e : ev) CHECK(cudaEventCreate(&e));
  for (int i = 0; i < 4; ++i) launch(k, grid, pdl, buf, i, s);
  delay_kernel<<<1, 1, 0, s>>>(200000);
  for (int i = 0; i < kSteps; ++i) {
    CHECK(cudaEventRecord(ev[2 * i], s));
    launch(k, grid, pdl, buf, i, s);
    CHECK(cudaEventRecord(ev[2 * i + 1], s));
  }
  CHECK(cudaStreamSynchronize(s));
  std::vector<float> step(kSteps);
  for (int i = 0; i < kSteps; ++i) CHECK(cudaEventElapsedTime(&step[i], ev[2 * i], ev[2 * i + 1]));
  std::vector<float> run(5);
  for (int r = 0; r < 5; ++r) {
    delay_kernel<<<1, 1, 0, s>>>(3000000);
    CHECK(cudaEventRecord(ev[0], s));
    for (int i = 0; i < kRun; ++i) launch(k, grid, pdl, buf, i, s);
    CHECK(cudaEventRecord(ev[1], s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaEventElapsedTime(&run[r], ev[0], ev[1]));
  }
  std::printf("%-22s grid %5u  pdl %d   step %6.2f us   run %6.2f us/launch\n", name, grid.x * grid.y * grid.z,
              int(pdl), 1000.f * median(step), 1000.f * median(run) / kRun);
  for (auto& e : ev) CHECK(cudaEventDestroy(e));
}

int main() {
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  Buffers buf;
  const size_t kv_bytes = size_t(kBatch) * kHeads * 512 * kDim * 2;  // one 512-slot k cache, 134 MB
  for (int i = 0; i < 4; ++i) {
    uint4* p;
    CHECK(cudaMalloc(&p, kv_bytes));
    CHECK(cudaMemset(p, i + 1, kv_bytes));
    buf.kv.push_back(p);
  }
  CHECK(cudaMalloc(&buf.q, kBatch * kHeads * kDim * 2));
  CHECK(cudaMalloc(&buf.out, kBatch * kHeads * kDim * 2));
  CHECK(cudaMemset(buf.q, 3, kBatch * kHeads * kDim * 2));
  const dim3 decode_grid(1, kHeads, kBatch);
  for (unsigned blocks : {1u, 132u, 1024u, 4096u}) time_kernel("empty", empty_kernel, dim3(blocks), false, buf, s);
  time_kernel("empty, waits", empty_pdl_kernel, decode_grid, true, buf, s);
  time_kernel("load+store", load_store_kernel, decode_grid, false, buf, s);
  time_kernel("load+store", load_store_kernel, decode_grid, true, buf, s);
  time_kernel("load+merge+store", load_merge_store_kernel, decode_grid, false, buf, s);
  time_kernel("load+merge+store", load_merge_store_kernel, decode_grid, true, buf, s);
  return 0;
}
