// Elementwise maps (one generic kernel + small functors) and deterministic reductions.
#include "core/cuda/allocator.h"
#include "kernels/common/common.cuh"
#include "kernels/elementwise/elementwise.h"

namespace hylo::cuda {
namespace {

constexpr int kThreads = 256;

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
template <int VEC>
__device__ __forceinline__ void store_f(nv_bf16* p, const float (&in)[VEC]) {
  store_floats<VEC>(p, in);
}
template <int VEC>
__device__ __forceinline__ void store_f(float* p, const float (&in)[VEC]) {
  if constexpr (VEC == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(in[0], in[1], in[2], in[3]);
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k) p[k] = in[k];
  }
}

// hylo::bf16 is incomplete here (see common.cuh): map it to __nv_bfloat16 before any sizeof.
template <class T> struct DeviceType { using type = T; };
template <> struct DeviceType<bf16> { using type = nv_bf16; };
template <class T> using dev_t = typename DeviceType<T>::type;

template <class T>
constexpr int kVec = 16 / sizeof(dev_t<T>);  // bf16: 8, float: 4

template <class T> const dev_t<T>* dev(const T* p) { return reinterpret_cast<const dev_t<T>*>(p); }
template <class T> dev_t<T>* dev(T* p) { return reinterpret_cast<dev_t<T>*>(p); }

// ---- maps: out[e] = op(a[e], b[e], e) -------------------------------------------------------
// Threads [0, chunks) take VEC elements each; the few threads after them take the < VEC tail.
template <int VEC, class In, class Out, class Op>
__global__ void map_kernel(int64_t n, int64_t chunks, const In* a, const In* b, Out* out, Op op) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < chunks) {
    int64_t e0 = i * VEC;
    float x[VEC], y[VEC] = {}, r[VEC];
    load_f<VEC>(a + e0, x);
    if (b) load_f<VEC>(b + e0, y);
#pragma unroll
    for (int k = 0; k < VEC; ++k) r[k] = op(x[k], y[k], e0 + k);
    store_f<VEC>(out + e0, r);
  } else {
    int64_t e = chunks * VEC + (i - chunks);
    if (e >= n) return;
    float x[1], y[1] = {0.f}, r[1];
    load_f<1>(a + e, x);
    if (b) load_f<1>(b + e, y);
    r[0] = op(x[0], y[0], e);
    store_f<1>(out + e, r);
  }
}

template <class In, class Out, class Op>
void launch_map(const char* name, int64_t n, const In* a, const In* b, Out* out, Op op, cudaStream_t stream) {
  HYLO_CUDA_REQUIRE(n >= 0, "%s: negative size %lld", name, static_cast<long long>(n));
  if (n == 0) return;
  constexpr int V = kVec<In> < kVec<Out> ? kVec<In> : kVec<Out>;  // cast: 4 lanes (float side)
  bool vec = aligned16(a) && (!b || aligned16(b)) && aligned16(out);
  if (vec) {
    int64_t chunks = n / V, threads = chunks + (n - chunks * V);
    map_kernel<V><<<ceil_div(threads, kThreads), kThreads, 0, stream>>>(n, chunks, dev(a), dev(b), dev(out), op);
  } else {
    map_kernel<1><<<ceil_div(n, kThreads), kThreads, 0, stream>>>(n, n, dev(a), dev(b), dev(out), op);
  }
  HYLO_CUDA_LAUNCH_CHECK("map_kernel");
}

struct AddOp {
  __device__ float operator()(float x, float y, int64_t) const { return x + y; }
};
struct MulOp {
  __device__ float operator()(float x, float y, int64_t) const { return x * y; }
};
struct ScaleOp {
  float alpha;
  __device__ float operator()(float x, float, int64_t) const { return alpha * x; }
};
struct CopyOp {
  __device__ float operator()(float x, float, int64_t) const { return x; }
};
struct AddVectorOp {
  const nv_bf16* v_C;
  int64_t C;
  __device__ float operator()(float x, float, int64_t e) const { return x + __bfloat162float(v_C[e % C]); }
};

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
  bool square;
};

// Block b sums (or sums the squares of) its kElemsPerBlock-slice of its buffer into partial[b].
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
    for (int k = 0; k < V; ++k) acc += batch.square ? v[k] * v[k] : v[k];
  }
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) partial[block] = acc;
}

// out = Σ partial[0..count) (sqrt of it when take_sqrt), added in a fixed order.
__global__ void __launch_bounds__(kFinalThreads) reduce_final_kernel(int64_t count, const float* partial, float* out,
                                                                    bool take_sqrt) {
  __shared__ float shared[32];
  float acc = 0.f;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) acc += partial[i];
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) *out = take_sqrt ? sqrtf(acc) : acc;
}

template <class T>
void reduce(const char* name, int count, const T* const* buffers, const int64_t* sizes, bool square, float* out,
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
    batch.square = square;
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
  reduce_final_kernel<<<1, kFinalThreads, 0, stream>>>(total_blocks, partial, out, square);
  HYLO_CUDA_LAUNCH_CHECK("reduce_final_kernel");
}

// Column sums: block (x, y) sums rows [y * kRowsPerSlice, ...) of columns [x * kThreads, ...) into
// partial[y, c]; a second kernel adds the row slices in order.
constexpr int64_t kRowsPerSlice = 256;

__global__ void column_partials_kernel(int64_t R, int64_t C, const nv_bf16* x_RC, float* partial_SC) {
  int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  int64_t r0 = int64_t(blockIdx.y) * kRowsPerSlice, r1 = min(R, r0 + kRowsPerSlice);
  float acc = 0.f;
  for (int64_t r = r0; r < r1; ++r) acc += __bfloat162float(x_RC[r * C + c]);
  partial_SC[int64_t(blockIdx.y) * C + c] = acc;
}

__global__ void column_final_kernel(int64_t S, int64_t C, const float* partial_SC, float* out_C) {
  int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float acc = 0.f;
  for (int64_t s = 0; s < S; ++s) acc += partial_SC[s * C + c];
  out_C[c] = acc;
}

}  // namespace

void add(int64_t n, const bf16* a, const bf16* b, bf16* out, cudaStream_t stream) {
  launch_map("add", n, a, b, out, AddOp{}, stream);
}
void add(int64_t n, const float* a, const float* b, float* out, cudaStream_t stream) {
  launch_map("add", n, a, b, out, AddOp{}, stream);
}
void add_broadcast(int64_t R, int64_t C, const bf16* x_RC, const bf16* v_C, bf16* out_RC, cudaStream_t stream) {
  HYLO_CUDA_REQUIRE(R >= 0 && C > 0, "add_broadcast: bad shape R=%lld C=%lld", static_cast<long long>(R),
                    static_cast<long long>(C));
  launch_map("add_broadcast", R * C, x_RC, static_cast<const bf16*>(nullptr), out_RC, AddVectorOp{as_nv(v_C), C},
             stream);
}
void mul(int64_t n, const bf16* a, const bf16* b, bf16* out, cudaStream_t stream) {
  launch_map("mul", n, a, b, out, MulOp{}, stream);
}
void scale(int64_t n, float alpha, const bf16* x, bf16* out, cudaStream_t stream) {
  launch_map("scale", n, x, static_cast<const bf16*>(nullptr), out, ScaleOp{alpha}, stream);
}
void scale(int64_t n, float alpha, const float* x, float* out, cudaStream_t stream) {
  launch_map("scale", n, x, static_cast<const float*>(nullptr), out, ScaleOp{alpha}, stream);
}
void cast(int64_t n, const float* in, bf16* out, cudaStream_t stream) {
  launch_map("cast", n, in, static_cast<const float*>(nullptr), out, CopyOp{}, stream);
}
void cast(int64_t n, const bf16* in, float* out, cudaStream_t stream) {
  launch_map("cast", n, in, static_cast<const bf16*>(nullptr), out, CopyOp{}, stream);
}

void sum(int64_t n, const bf16* x, float* sum_1, cudaStream_t stream) {
  reduce("sum", 1, &x, &n, false, sum_1, stream);
}

void sum_rows(int64_t R, int64_t C, const bf16* x_RC, float* out_C, cudaStream_t stream) {
  HYLO_CUDA_REQUIRE(R >= 0 && C >= 0, "sum_rows: bad shape R=%lld C=%lld", static_cast<long long>(R),
                    static_cast<long long>(C));
  if (C == 0) return;
  int64_t S = R > 0 ? ceil_div(R, kRowsPerSlice) : 0;
  float* partial_SC = static_cast<float*>(stream_scratch(size_t(S * C + 1) * sizeof(float), stream));
  if (S > 0) {
    column_partials_kernel<<<dim3(unsigned(ceil_div(C, kThreads)), unsigned(S)), kThreads, 0, stream>>>(
        R, C, as_nv(x_RC), partial_SC);
    HYLO_CUDA_LAUNCH_CHECK("column_partials_kernel");
  }
  column_final_kernel<<<ceil_div(C, kThreads), kThreads, 0, stream>>>(S, C, partial_SC, out_C);
  HYLO_CUDA_LAUNCH_CHECK("column_final_kernel");
}

void global_norm(int count, const bf16* const* buffers, const int64_t* sizes, float* norm_1, cudaStream_t stream) {
  reduce("global_norm", count, buffers, sizes, true, norm_1, stream);
}
void global_norm(int count, const float* const* buffers, const int64_t* sizes, float* norm_1, cudaStream_t stream) {
  reduce("global_norm", count, buffers, sizes, true, norm_1, stream);
}

}  // namespace hylo::cuda
