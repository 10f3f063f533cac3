// Token embedding forward (gather) and deterministic backward (sort, then segmented sums).
#include <cub/device/device_radix_sort.cuh>

#include "core/cuda/allocator.h"
#include "kernels/common/common.cuh"
#include "kernels/embedding/embedding.h"

namespace hylo::cuda {
namespace {

constexpr int kThreads = 128;

// ---- forward: one thread per VEC consecutive channels ----------------------------------------
template <int VEC>
__global__ void embedding_forward_kernel(int N, int V, int D, const int32_t* ids_N, const nv_bf16* table_VD,
                                         nv_bf16* out_ND) {
  int64_t chunks = D / VEC;
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(N) * chunks) return;
  int64_t n = i / chunks, d = (i % chunks) * VEC;
  int32_t id = ids_N[n];
  nv_bf16* out = out_ND + n * D + d;
  if (id < 0 || id >= V) {
#pragma unroll
    for (int k = 0; k < VEC; ++k) out[k] = __ushort_as_bfloat16(0x7fff);  // NaN marks the bad id
    return;
  }
  const nv_bf16* row = table_VD + int64_t(id) * D + d;
  if constexpr (VEC == 8) {
    store_pack(out, load_pack(row));
  } else {
    out[0] = row[0];
  }
}

// ---- backward ------------------------------------------------------------------------------
// Sort inputs: keys = ids with any invalid id mapped to the sentinel V (so the sort's bit range
// covers every key and equal ids stay contiguous), values = positions 0..N-1.
__global__ void sort_inputs_kernel(int N, int V, const int32_t* ids_N, uint32_t* keys_N, int32_t* order_N) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= N) return;
  int32_t id = ids_N[i];
  keys_N[i] = (id >= 0 && id < V) ? uint32_t(id) : uint32_t(V);
  order_N[i] = i;
}

// Block (i, y): if sorted position i starts a run of equal ids, sum that run's dout rows over the
// channel slice y (VEC channels per thread) and add the sum to dtable. Other blocks exit at once.
template <int VEC>
__global__ void embedding_backward_kernel(int N, int V, int D, const uint32_t* sorted_ids_N, const int32_t* order_N,
                                          const nv_bf16* dout_ND, nv_bf16* dtable_VD) {
  int i = blockIdx.x;
  uint32_t id = sorted_ids_N[i];
  if (id >= uint32_t(V) || (i > 0 && sorted_ids_N[i - 1] == id)) return;  // invalid ids: no gradient
  int64_t d = (int64_t(blockIdx.y) * blockDim.x + threadIdx.x) * VEC;
  if (d >= D) return;
  float acc[VEC] = {};
  for (int j = i; j < N && sorted_ids_N[j] == id; ++j) {
    const nv_bf16* g = dout_ND + int64_t(order_N[j]) * D + d;
    if constexpr (VEC == 8) {
      Pack8 p = load_pack(g);
#pragma unroll
      for (int k = 0; k < 8; ++k) acc[k] += __bfloat162float(p.v[k]);
    } else {
      acc[0] += __bfloat162float(g[0]);
    }
  }
  nv_bf16* row = dtable_VD + int64_t(id) * D + d;
  if constexpr (VEC == 8) {
    Pack8 p = load_pack(row);
#pragma unroll
    for (int k = 0; k < 8; ++k) p.v[k] = __float2bfloat16_rn(__bfloat162float(p.v[k]) + acc[k]);
    store_pack(row, p);
  } else {
    row[0] = __float2bfloat16_rn(__bfloat162float(row[0]) + acc[0]);
  }
}

size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace

void embedding_forward(int N, int V, int D, const int32_t* ids_N, const bf16* table_VD, bf16* out_ND,
                       cudaStream_t stream) {
  HYLO_CUDA_REQUIRE(N >= 0 && V > 0 && D > 0, "embedding_forward: bad shape N=%d V=%d D=%d", N, V, D);
  if (N == 0) return;
  if (D % 8 == 0 && aligned16(table_VD) && aligned16(out_ND)) {
    int64_t work = int64_t(N) * (D / 8);
    embedding_forward_kernel<8><<<ceil_div(work, kThreads), kThreads, 0, stream>>>(N, V, D, ids_N, as_nv(table_VD),
                                                                                  as_nv(out_ND));
  } else {
    int64_t work = int64_t(N) * D;
    embedding_forward_kernel<1><<<ceil_div(work, kThreads), kThreads, 0, stream>>>(N, V, D, ids_N, as_nv(table_VD),
                                                                                  as_nv(out_ND));
  }
  HYLO_CUDA_LAUNCH_CHECK("embedding_forward_kernel");
}

void embedding_backward(int N, int V, int D, const int32_t* ids_N, const bf16* dout_ND, bf16* dtable_VD,
                        cudaStream_t stream) {
  HYLO_CUDA_REQUIRE(N >= 0 && V > 0 && D > 0, "embedding_backward: bad shape N=%d V=%d D=%d", N, V, D);
  if (N == 0) return;
  int end_bit = 1;  // sort only the bits a key <= V (the sentinel) can have
  while (end_bit < 32 && (uint32_t(V) >> end_bit)) ++end_bit;

  // Scratch layout: [keys in | sorted keys | order in | order out | CUB temp].
  size_t cub_bytes = 0;
  HYLO_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, cub_bytes, static_cast<const uint32_t*>(nullptr),
                                                  static_cast<uint32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                                  static_cast<int32_t*>(nullptr), N, 0, end_bit, stream));
  size_t arr = align256(size_t(N) * 4);
  char* scratch = static_cast<char*>(stream_scratch(4 * arr + cub_bytes, stream));
  auto* keys_in = reinterpret_cast<uint32_t*>(scratch);
  auto* sorted_ids = reinterpret_cast<uint32_t*>(scratch + arr);
  auto* order_in = reinterpret_cast<int32_t*>(scratch + 2 * arr);
  auto* order_out = reinterpret_cast<int32_t*>(scratch + 3 * arr);
  void* cub_temp = scratch + 4 * arr;

  sort_inputs_kernel<<<ceil_div(N, 256), 256, 0, stream>>>(N, V, ids_N, keys_in, order_in);
  HYLO_CUDA_LAUNCH_CHECK("sort_inputs_kernel");
  HYLO_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(cub_temp, cub_bytes, keys_in, sorted_ids, order_in, order_out, N,
                                                  0, end_bit, stream));

  if (D % 8 == 0 && aligned16(dout_ND) && aligned16(dtable_VD)) {
    dim3 grid(N, unsigned(ceil_div(D / 8, kThreads)));
    embedding_backward_kernel<8><<<grid, kThreads, 0, stream>>>(N, V, D, sorted_ids, order_out, as_nv(dout_ND),
                                                                as_nv(dtable_VD));
  } else {
    dim3 grid(N, unsigned(ceil_div(D, kThreads)));
    embedding_backward_kernel<1><<<grid, kThreads, 0, stream>>>(N, V, D, sorted_ids, order_out, as_nv(dout_ND),
                                                                as_nv(dtable_VD));
  }
  HYLO_CUDA_LAUNCH_CHECK("embedding_backward_kernel");
}

}  // namespace hylo::cuda
