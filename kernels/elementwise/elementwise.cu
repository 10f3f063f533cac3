// Deterministic global norm: a two-pass sum of squares over many buffers, then sqrt.
#include "core/cuda/allocator.h"
#include "kernels/common/common.cuh"
#include "kernels/elementwise/elementwise.h"

namespace hylo::cuda {
namespace {

// ---- typed loads: VEC elements of T as floats (16-byte accesses when VEC * sizeof(T) == 16) ----
template <int VEC>
__device__ __forceinline__ void load_f(const nv_bf16* p, float (&out)[VEC]) {
  load_floats<VEC>(p, out);
}
template <int VEC>
__device__ __forceinline__ void load_f(const float* p, float (&out)[VEC]) {
  if constexpr (VEC == 4) {
    float4 v = *reinterpret_cast<const float4*>(p);
    out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k) out[k] = p[k];
  }
}

// hylo::bf16 is incomplete here (see common.cuh): map it to __nv_bfloat16 before any sizeof.
template <class T> struct DeviceType { using type = T; };
template <> struct DeviceType<bf16> { using type = nv_bf16; };
template <class T> using dev_t = typename DeviceType<T>::type;

template <class T>
constexpr int kVec = 16 / sizeof(dev_t<T>);  // bf16: 8, float: 4

// ---- reductions -----------------------------------------------------------------------------
constexpr int kReduceThreads = 256;
constexpr int64_t kElemsPerBlock = 16384;  // fixed: the partial-sum layout depends on sizes only
constexpr int kFinalThreads = 1024;

// One reduction input: a buffer whose blocks are [first_block, first_block + ceil(size / kElemsPerBlock)).
struct ReduceBatch {
  static constexpr int kMax = 64;
  int count;
  const void* ptr[kMax];
  int64_t size[kMax];
  int64_t first_block[kMax + 1];
};

// Block b sums the squares of its kElemsPerBlock-slice of its buffer into partial[b].
template <class T>
__global__ void __launch_bounds__(kReduceThreads) reduce_partials_kernel(ReduceBatch batch, float* partial) {
  __shared__ float shared[32];
  int64_t block = blockIdx.x + batch.first_block[0];
  int buf = 0;
  while (buf + 1 < batch.count && batch.first_block[buf + 1] <= block) ++buf;
  const dev_t<T>* x = static_cast<const dev_t<T>*>(batch.ptr[buf]);
  int64_t start = (block - batch.first_block[buf]) * kElemsPerBlock;
  int64_t end = min(batch.size[buf], start + kElemsPerBlock);
  constexpr int V = kVec<T>;
  bool vec = aligned16(x);  // start is a multiple of kElemsPerBlock, so every pack is aligned
  float acc = 0.f;
  for (int64_t i = start + int64_t(threadIdx.x) * V; i < end; i += int64_t(blockDim.x) * V) {
    float v[V];
    if (vec && i + V <= end) {
      load_f<V>(x + i, v);
    } else {
#pragma unroll
      for (int k = 0; k < V; ++k) {
        float one[1] = {0.f};
        if (i + k < end) load_f<1>(x + i + k, one);
        v[k] = one[0];
      }
    }
#pragma unroll
    for (int k = 0; k < V; ++k) acc += v[k] * v[k];
  }
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) partial[block] = acc;
}

// out = sqrt(Σ partial[0..count)), added in a fixed order.
__global__ void __launch_bounds__(kFinalThreads) reduce_final_kernel(int64_t count, const float* partial, float* out) {
  __shared__ float shared[32];
  float acc = 0.f;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) acc += partial[i];
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) *out = sqrtf(acc);
}

template <class T>
void reduce(const char* name, int count, const T* const* buffers, const int64_t* sizes, float* out,
            cudaStream_t stream) {
  HYLO_CUDA_REQUIRE(count >= 0, "%s: negative buffer count %d", name, count);
  int64_t total_blocks = 0;
  for (int i = 0; i < count; ++i) {
    HYLO_CUDA_REQUIRE(sizes[i] >= 0, "%s: buffer %d has negative size", name, i);
    total_blocks += ceil_div(sizes[i], kElemsPerBlock);
  }
  float* partial = static_cast<float*>(stream_scratch(size_t(total_blocks + 1) * sizeof(float), stream));
  int64_t next_block = 0;
  for (int first = 0; first < count; first += ReduceBatch::kMax) {
    ReduceBatch batch{};
    batch.first_block[0] = next_block;
    for (int j = 0; j < ReduceBatch::kMax && first + j < count; ++j) {
      batch.ptr[j] = buffers[first + j];
      batch.size[j] = sizes[first + j];
      batch.first_block[j + 1] = batch.first_block[j] + ceil_div(sizes[first + j], kElemsPerBlock);
      batch.count = j + 1;
    }
    int64_t blocks = batch.first_block[batch.count] - next_block;
    if (blocks > 0) {
      reduce_partials_kernel<T><<<blocks, kReduceThreads, 0, stream>>>(batch, partial);
      HYLO_CUDA_LAUNCH_CHECK("reduce_partials_kernel");
    }
    next_block += blocks;
  }
  reduce_final_kernel<<<1, kFinalThreads, 0, stream>>>(total_blocks, partial, out);
  HYLO_CUDA_LAUNCH_CHECK("reduce_final_kernel");
}

}  // namespace

void global_norm(int count, const bf16* const* buffers, const int64_t* sizes, float* norm_1, cudaStream_t stream) {
  reduce("global_norm", count, buffers, sizes, norm_1, stream);
}
void global_norm(int count, const float* const* buffers, const int64_t* sizes, float* norm_1, cudaStream_t stream) {
  reduce("global_norm", count, buffers, sizes, norm_1, stream);
}

}  // namespace hylo::cuda
