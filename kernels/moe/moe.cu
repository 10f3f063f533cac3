// MoE kernels (semantics in moe.h): router rows one warp each, the dispatch plan in three small
// passes (count, scan, scatter), row moves 8 bf16 at a time when widths and pointers allow.
#include "core/cuda/allocator.h"
#include "kernels/common/common.cuh"
#include "kernels/moe/moe.h"

namespace hylo::cuda {
namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kThreads = 256;
constexpr int kRowsPerBlock = kThreads / 32;  // router kernels: one warp per row
constexpr int kChunk = 1024;                  // plan kernels: one assignment per thread
constexpr int kAuxRows = 256;                 // aux loss: rows per partial sum
constexpr int kMaxTopkExperts = 64 * 32;      // router_topk's per-lane 64-bit "taken" mask
constexpr int kMaxPlanExperts = 8192;         // plan kernels keep E ints in shared memory

int router_blocks(int N) { return int(ceil_div(N, kRowsPerBlock)); }

// ---- router ----

__global__ void router_scores_forward_kernel(int N, int E, bool sigmoid, const float* logits_NE, float* scores_NE) {
  const int n = blockIdx.x * kRowsPerBlock + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (n >= N) return;  // whole warps leave together: the shuffles below see every lane
  const float* l = logits_NE + int64_t(n) * E;
  float* s = scores_NE + int64_t(n) * E;
  if (sigmoid) {
    for (int e = lane; e < E; e += 32) s[e] = 1.f / (1.f + expf(-l[e]));
    return;
  }
  float mx = -INFINITY, sum = 0.f;
  for (int e = lane; e < E; e += 32) mx = fmaxf(mx, l[e]);
  mx = warp_max(mx);
  for (int e = lane; e < E; e += 32) sum += expf(l[e] - mx);
  sum = warp_sum(sum);
  for (int e = lane; e < E; e += 32) s[e] = expf(l[e] - mx) / sum;
}

__global__ void router_scores_backward_kernel(int N, int E, bool sigmoid, const float* scores_NE,
                                              const float* dscores_NE, float* dlogits_NE) {
  const int n = blockIdx.x * kRowsPerBlock + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (n >= N) return;
  const float* s = scores_NE + int64_t(n) * E;
  const float* ds = dscores_NE + int64_t(n) * E;
  float* dl = dlogits_NE + int64_t(n) * E;  // may alias ds: each lane reads its elements before writing them
  if (sigmoid) {
    for (int e = lane; e < E; e += 32) dl[e] = ds[e] * s[e] * (1.f - s[e]);
    return;
  }
  float dot = 0.f;
  for (int e = lane; e < E; e += 32) dot += s[e] * ds[e];
  dot = warp_sum(dot);
  for (int e = lane; e < E; e += 32) dl[e] = s[e] * (ds[e] - dot);
}

// K rounds of a warp argmax. Lane l owns experts l, l+32, ...; bit j of `taken` marks l + 32 j.
__global__ void router_topk_kernel(int N, int E, int K, const float* scores_NE, const float* bias_E,
                                   int32_t* expert_NK) {
  const int n = blockIdx.x * kRowsPerBlock + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (n >= N) return;
  const float* s = scores_NE + int64_t(n) * E;
  uint64_t taken = 0;
  for (int k = 0; k < K; ++k) {
    int best = -1;
    double best_v = 0;
    for (int j = 0, e = lane; e < E; ++j, e += 32) {
      if ((taken >> j) & 1) continue;
      const double v = double(s[e]) + (bias_E ? double(bias_E[e]) : 0.0);
      if (best < 0 || v > best_v) best = e, best_v = v;  // e ascends: ties keep the lower index
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
      const int other = __shfl_xor_sync(kFull, best, offset);
      const double other_v = __shfl_xor_sync(kFull, best_v, offset);
      if (other >= 0 && (best < 0 || other_v > best_v || (other_v == best_v && other < best)))
        best = other, best_v = other_v;
    }
    if (lane == 0) expert_NK[int64_t(n) * K + k] = best;
    if ((best & 31) == lane) taken |= uint64_t(1) << (best >> 5);
  }
}

__global__ void gate_weights_forward_kernel(int N, int E, int K, const float* scores_NE, const int32_t* expert_NK,
                                            float* w_NK) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const float* s = scores_NE + int64_t(n) * E;
  const int32_t* ex = expert_NK + int64_t(n) * K;
  float sum = 0.f;
  for (int k = 0; k < K; ++k) sum += s[ex[k]];
  for (int k = 0; k < K; ++k) w_NK[int64_t(n) * K + k] = s[ex[k]] / sum;
}

__global__ void gate_weights_backward_kernel(int N, int E, int K, const float* scores_NE, const int32_t* expert_NK,
                                             const float* w_NK, const float* dw_NK, float* dscores_NE) {
  const int n = blockIdx.x * kRowsPerBlock + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (n >= N) return;
  const float* s = scores_NE + int64_t(n) * E;
  const int32_t* ex = expert_NK + int64_t(n) * K;
  const float* w = w_NK + int64_t(n) * K;
  const float* dw = dw_NK + int64_t(n) * K;
  float* ds = dscores_NE + int64_t(n) * E;
  // w_k = s_k / S  =>  ds_k = (dw_k - Σ_j w_j dw_j) / S; K is small, so every lane sums alone.
  float sum = 0.f, dot = 0.f;
  for (int k = 0; k < K; ++k) sum += s[ex[k]], dot += w[k] * dw[k];
  for (int e = lane; e < E; e += 32) ds[e] = 0.f;
  __syncwarp();  // the zeros land before the selected entries are written by other lanes
  for (int k = lane; k < K; k += 32) ds[ex[k]] = (dw[k] - dot) / sum;
}

// ---- dispatch plan ----

// Per-chunk counts per expert. Shared-memory atomics add integers: their order changes nothing.
__global__ void plan_count_kernel(int64_t NK, int E, const int32_t* expert_NK, int32_t* chunk_CE) {
  extern __shared__ int32_t count_E[];
  for (int e = threadIdx.x; e < E; e += blockDim.x) count_E[e] = 0;
  __syncthreads();
  const int64_t a = int64_t(blockIdx.x) * kChunk + threadIdx.x;
  if (a < NK) {
    const int e = expert_NK[a];
    if (0 <= e && e < E) atomicAdd(&count_E[e], 1);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) chunk_CE[int64_t(blockIdx.x) * E + e] = count_E[e];
}

// One block: chunk counts become chunk bases (how many earlier assignments chose the expert),
// then routed, offsets, dropped and bad. E and the chunk count are small (<= 8192, N K / 1024).
__global__ void plan_scan_kernel(int C, int E, int64_t NK, int64_t capacity, int32_t* chunk_CE, int32_t* counts) {
  int32_t* offsets = counts;
  int32_t* routed = counts + E + 1;
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int32_t running = 0;
    for (int c = 0; c < C; ++c) {
      const int32_t here = chunk_CE[int64_t(c) * E + e];
      chunk_CE[int64_t(c) * E + e] = running;
      running += here;
    }
    routed[e] = running;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  int64_t offset = 0, dropped = 0, total = 0;
  for (int e = 0; e < E; ++e) {
    const int64_t kept = capacity > 0 && routed[e] > capacity ? capacity : routed[e];
    offsets[e] = int32_t(offset);
    offset += kept;
    dropped += routed[e] - kept;
    total += routed[e];
  }
  offsets[E] = int32_t(offset);
  counts[2 * E + 1] = int32_t(dropped);
  counts[2 * E + 2] = int32_t(NK - total);  // assignments whose expert index was out of range
}

// Each assignment's rank among the chunk's earlier assignments to its expert: the rank within
// its warp from a match mask, plus what earlier warps of the chunk sent there (warps take turns).
__global__ void plan_scatter_kernel(int64_t NK, int E, int K, int64_t capacity, const int32_t* expert_NK,
                                    const int32_t* base_CE, const int32_t* counts, int32_t* token_A,
                                    int32_t* row_NK) {
  extern __shared__ int32_t seen_E[];
  for (int e = threadIdx.x; e < E; e += blockDim.x) seen_E[e] = 0;
  __syncthreads();
  const int64_t a = int64_t(blockIdx.x) * kChunk + threadIdx.x;
  int e = a < NK ? expert_NK[a] : -1;
  if (e >= E) e = -1;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const unsigned peers = __match_any_sync(kFull, e);
  const int rank = __popc(peers & ((1u << lane) - 1));
  int position = 0;
  for (int w = 0; w < kChunk / 32; ++w) {
    if (warp == w) {  // warp-uniform branch
      if (e >= 0) position = seen_E[e] + rank;
      __syncwarp();  // every peer has read seen_E[e] before the first one advances it
      if (e >= 0 && rank == 0) seen_E[e] += __popc(peers);
    }
    __syncthreads();
  }
  if (a >= NK) return;
  const int64_t p = e < 0 ? -1 : int64_t(base_CE[int64_t(blockIdx.x) * E + e]) + position;
  if (p < 0 || (capacity > 0 && p >= capacity)) {
    row_NK[a] = -1;
    return;
  }
  const int32_t row = counts[e] + int32_t(p);
  row_NK[a] = row;
  token_A[row] = int32_t(a / K);
}

// ---- row moves ----

template <int VEC>
__global__ void permute_forward_kernel(int A, int D, const int32_t* token_A, const nv_bf16* x_ND, nv_bf16* xs_AD) {
  const int chunks = D / VEC;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= int64_t(A) * chunks) return;
  const int64_t a = idx / chunks;
  const int d = int(idx % chunks) * VEC;
  const nv_bf16* src = x_ND + int64_t(token_A[a]) * D + d;
  nv_bf16* dst = xs_AD + a * D + d;
  if constexpr (VEC == 8)
    store_pack(dst, load_pack(src));
  else
    *dst = *src;
}

// combine_forward (weighted, w_NK != null) and permute_backward (unweighted): a token gathers its
// K rows, in slot order.
template <int VEC>
__global__ void gather_rows_kernel(int N, int K, int D, const int32_t* row_NK, const float* w_NK, const nv_bf16* in_AD,
                                   nv_bf16* out_ND) {
  const int chunks = D / VEC;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= int64_t(N) * chunks) return;
  const int64_t n = idx / chunks;
  const int d = int(idx % chunks) * VEC;
  float acc[VEC] = {};
  for (int k = 0; k < K; ++k) {
    const int32_t row = row_NK[n * K + k];
    if (row < 0) continue;
    const float w = w_NK ? w_NK[n * K + k] : 1.f;
    float v[VEC];
    load_floats<VEC>(in_AD + int64_t(row) * D + d, v);
#pragma unroll
    for (int i = 0; i < VEC; ++i) acc[i] += w * v[i];
  }
  store_floats<VEC>(out_ND + n * D + d, acc);
}

// One block per token: for each slot, dys[row] = w dy and dw = <dy, ys[row]> (a block sum).
template <int VEC>
__global__ void combine_backward_kernel(int K, int D, const int32_t* row_NK, const float* w_NK, const nv_bf16* ys_AD,
                                        const nv_bf16* dy_ND, nv_bf16* dys_AD, float* dw_NK) {
  __shared__ float shared[32];
  const int64_t n = blockIdx.x;
  const nv_bf16* dy = dy_ND + n * D;
  for (int k = 0; k < K; ++k) {
    const int32_t row = row_NK[n * K + k];  // the same for the whole block
    if (row < 0) {
      if (threadIdx.x == 0) dw_NK[n * K + k] = 0.f;
      continue;
    }
    const float w = w_NK[n * K + k];
    const nv_bf16* ys = ys_AD + int64_t(row) * D;
    nv_bf16* dys = dys_AD + int64_t(row) * D;
    float dot = 0.f;
    for (int d = threadIdx.x * VEC; d < D; d += blockDim.x * VEC) {
      float g[VEC], y[VEC], out[VEC];
      load_floats<VEC>(dy + d, g);
      load_floats<VEC>(ys + d, y);
#pragma unroll
      for (int i = 0; i < VEC; ++i) dot += g[i] * y[i], out[i] = w * g[i];
      store_floats<VEC>(dys + d, out);
    }
    dot = block_sum(dot, shared);
    if (threadIdx.x == 0) dw_NK[n * K + k] = dot;
  }
}

// ---- Switch aux loss ----

// partial_GE[g, e] = Σ over rows of group g of q[n, e] (q = s, or s / Σ_e s when normalize).
__global__ void aux_partial_kernel(int N, int E, bool normalize, const float* scores_NE, double* partial_GE) {
  __shared__ float inv_z[kAuxRows];
  const int n0 = blockIdx.x * kAuxRows, rows = min(kAuxRows, N - n0);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int r = warp; r < rows; r += warps) {
    float z = 1.f;
    if (normalize) {
      z = 0.f;
      for (int e = lane; e < E; e += 32) z += scores_NE[int64_t(n0 + r) * E + e];
      z = warp_sum(z);
    }
    if (lane == 0) inv_z[r] = 1.f / z;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    double acc = 0;
    for (int r = 0; r < rows; ++r) acc += double(scores_NE[int64_t(n0 + r) * E + e]) * inv_z[r];
    partial_GE[int64_t(blockIdx.x) * E + e] = acc;
  }
}

__global__ void aux_finish_kernel(int G, int N, int E, int K, const double* partial_GE, const int32_t* routed_E,
                                  double coef, float* loss_1) {
  __shared__ double acc_T[kThreads];
  double acc = 0;
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    double P = 0;
    for (int g = 0; g < G; ++g) P += partial_GE[int64_t(g) * E + e];
    acc += (double(routed_E[e]) / (double(N) * K)) * (P / N);
  }
  acc_T[threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.x != 0) return;
  double total = 0;
  for (int t = 0; t < blockDim.x; ++t) total += acc_T[t];
  *loss_1 = float(coef * E * total);
}

__global__ void aux_backward_kernel(int N, int E, int K, bool normalize, const float* scores_NE,
                                    const int32_t* routed_E, double coef, const float* dloss_1, float* dscores_NE) {
  const int n = blockIdx.x * kRowsPerBlock + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (n >= N) return;
  // d aux / d q[n, e] = c_e = scale * routed_e, the same for every token.
  const double scale = double(*dloss_1) * coef * E / (double(N) * K) / N;
  const float* s = scores_NE + int64_t(n) * E;
  float* ds = dscores_NE + int64_t(n) * E;
  if (!normalize) {
    for (int e = lane; e < E; e += 32) ds[e] = float(scale * routed_E[e]);
    return;
  }
  // q_i = s_i / Z  =>  ds_j = (c_j - Σ_i q_i c_i) / Z
  float z = 0.f, dot = 0.f;
  for (int e = lane; e < E; e += 32) z += s[e], dot += s[e] * float(scale * routed_E[e]);
  z = warp_sum(z);
  dot = warp_sum(dot) / z;
  for (int e = lane; e < E; e += 32) ds[e] = (float(scale * routed_E[e]) - dot) / z;
}

bool vec8(int D, const void* a, const void* b, const void* c = nullptr) {
  return D % 8 == 0 && aligned16(a) && aligned16(b) && (!c || aligned16(c));
}

}  // namespace

void router_scores_forward(int N, int E, bool sigmoid, const float* logits_NE, float* scores_NE, cudaStream_t stream) {
  HYLO_CUDA_REQUIRE(N >= 0 && E > 0, "router_scores_forward: bad shape N=%d E=%d", N, E);
  if (N == 0) return;
  router_scores_forward_kernel<<<router_blocks(N), kThreads, 0, stream>>>(N, E, sigmoid, logits_NE, scores_NE);
  HYLO_CUDA_LAUNCH_CHECK("router_scores_forward_kernel");
}

void router_scores_backward(int N, int E, bool sigmoid, const float* scores_NE, const float* dscores_NE,
                            float* dlogits_NE, cudaStream_t stream) {
  HYLO_CUDA_REQUIRE(N >= 0 && E > 0, "router_scores_backward: bad shape N=%d E=%d", N, E);
  if (N == 0) return;
  router_scores_backward_kernel<<<router_blocks(N), kThreads, 0, stream>>>(N, E, sigmoid, scores_NE, dscores_NE,
                                                                           dlogits_NE);
  HYLO_CUDA_LAUNCH_CHECK("router_scores_backward_kernel");
}

void router_topk(int N, int E, int K, const float* scores_NE, const float* bias_E, int32_t* expert_NK,
                 cudaStream_t stream) {
  HYLO_CUDA_REQUIRE(N >= 0 && 0 < K && K <= E && E <= kMaxTopkExperts,
                    "router_topk: need 0 < top_k=%d <= experts=%d <= %d", K, E, kMaxTopkExperts);
  if (N == 0) return;
  router_topk_kernel<<<router_blocks(N), kThreads, 0, stream>>>(N, E, K, scores_NE, bias_E, expert_NK);
  HYLO_CUDA_LAUNCH_CHECK("router_topk_kernel");
}

void gate_weights_forward(int N, int E, int K, const float* scores_NE, const int32_t* expert_NK, float* w_NK,
                          cudaStream_t stream) {
  HYLO_CUDA_REQUIRE(N >= 0 && E > 0 && K > 0, "gate_weights_forward: bad shape N=%d E=%d K=%d", N, E, K);
  if (N == 0) return;
  gate_weights_forward_kernel<<<int(ceil_div(N, kThreads)), kThreads, 0, stream>>>(N, E, K, scores_NE, expert_NK,
                                                                                   w_NK);
  HYLO_CUDA_LAUNCH_CHECK("gate_weights_forward_kernel");
}

void gate_weights_backward(int N, int E, int K, const float* scores_NE, const int32_t* expert_NK, const float* w_NK,
                           const float* dw_NK, float* dscores_NE, cudaStream_t stream) {
  HYLO_CUDA_REQUIRE(N >= 0 && E > 0 && K > 0, "gate_weights_backward: bad shape N=%d E=%d K=%d", N, E, K);
  if (N == 0) return;
  gate_weights_backward_kernel<<<router_blocks(N), kThreads, 0, stream>>>(N, E, K, scores_NE, expert_NK, w_NK, dw_NK,
                                                                          dscores_NE);
  HYLO_CUDA_LAUNCH_CHECK("gate_weights_backward_kernel");
}

void plan_dispatch(int N, int E, int K, const int32_t* expert_NK, int64_t capacity, int32_t* counts,
                   int32_t* token_A, int32_t* row_NK, cudaStream_t stream) {
  const int64_t NK = int64_t(N) * K;
  HYLO_CUDA_REQUIRE(N >= 0 && K > 0 && 0 < E && E <= kMaxPlanExperts && NK < (int64_t(1) << 31),
                    "plan_dispatch: bad shape N=%d E=%d K=%d (E <= %d)", N, E, K, kMaxPlanExperts);
  const int C = int(std::max<int64_t>(1, ceil_div(NK, kChunk)));  // one chunk even when empty: zero counts
  int32_t* chunk_CE = static_cast<int32_t*>(stream_scratch(size_t(C) * E * sizeof(int32_t), stream));
  const size_t shared = size_t(E) * sizeof(int32_t);
  plan_count_kernel<<<C, kChunk, shared, stream>>>(NK, E, expert_NK, chunk_CE);
  HYLO_CUDA_LAUNCH_CHECK("plan_count_kernel");
  plan_scan_kernel<<<1, kThreads, 0, stream>>>(C, E, NK, capacity, chunk_CE, counts);
  HYLO_CUDA_LAUNCH_CHECK("plan_scan_kernel");
  plan_scatter_kernel<<<C, kChunk, shared, stream>>>(NK, E, K, capacity, expert_NK, chunk_CE, counts, token_A,
                                                     row_NK);
  HYLO_CUDA_LAUNCH_CHECK("plan_scatter_kernel");
}

void permute_forward(int A, int D, const int32_t* token_A, const bf16* x_ND, bf16* xs_AD, cudaStream_t stream) {
  HYLO_CUDA_REQUIRE(A >= 0 && D > 0, "permute_forward: bad shape A=%d D=%d", A, D);
  if (A == 0) return;
  if (vec8(D, x_ND, xs_AD))
    permute_forward_kernel<8><<<int(ceil_div(int64_t(A) * D / 8, kThreads)), kThreads, 0, stream>>>(
        A, D, token_A, as_nv(x_ND), as_nv(xs_AD));
  else
    permute_forward_kernel<1><<<int(ceil_div(int64_t(A) * D, kThreads)), kThreads, 0, stream>>>(
        A, D, token_A, as_nv(x_ND), as_nv(xs_AD));
  HYLO_CUDA_LAUNCH_CHECK("permute_forward_kernel");
}

static void gather_rows(int N, int K, int D, const int32_t* row_NK, const float* w_NK, const bf16* in_AD,
                        bf16* out_ND, cudaStream_t stream) {
  if (N == 0) return;
  if (vec8(D, in_AD, out_ND))
    gather_rows_kernel<8><<<int(ceil_div(int64_t(N) * D / 8, kThreads)), kThreads, 0, stream>>>(
        N, K, D, row_NK, w_NK, as_nv(in_AD), as_nv(out_ND));
  else
    gather_rows_kernel<1><<<int(ceil_div(int64_t(N) * D, kThreads)), kThreads, 0, stream>>>(
        N, K, D, row_NK, w_NK, as_nv(in_AD), as_nv(out_ND));
  HYLO_CUDA_LAUNCH_CHECK("gather_rows_kernel");
}

void permute_backward(int N, int K, int D, const int32_t* row_NK, const bf16* dxs_AD, bf16* dx_ND,
                      cudaStream_t stream) {
  HYLO_CUDA_REQUIRE(N >= 0 && K > 0 && D > 0, "permute_backward: bad shape N=%d K=%d D=%d", N, K, D);
  gather_rows(N, K, D, row_NK, nullptr, dxs_AD, dx_ND, stream);
}

void combine_forward(int N, int K, int D, const int32_t* row_NK, const float* w_NK, const bf16* ys_AD, bf16* y_ND,
                     cudaStream_t stream) {
  HYLO_CUDA_REQUIRE(N >= 0 && K > 0 && D > 0, "combine_forward: bad shape N=%d K=%d D=%d", N, K, D);
  gather_rows(N, K, D, row_NK, w_NK, ys_AD, y_ND, stream);
}

void combine_backward(int N, int K, int D, const int32_t* row_NK, const float* w_NK, const bf16* ys_AD,
                      const bf16* dy_ND, bf16* dys_AD, float* dw_NK, cudaStream_t stream) {
  HYLO_CUDA_REQUIRE(N >= 0 && K > 0 && D > 0, "combine_backward: bad shape N=%d K=%d D=%d", N, K, D);
  if (N == 0) return;
  constexpr int kBlock = 128;  // D = 1024: one 8-wide pack per thread
  if (vec8(D, ys_AD, dy_ND, dys_AD))
    combine_backward_kernel<8><<<N, kBlock, 0, stream>>>(K, D, row_NK, w_NK, as_nv(ys_AD), as_nv(dy_ND),
                                                         as_nv(dys_AD), dw_NK);
  else
    combine_backward_kernel<1><<<N, kBlock, 0, stream>>>(K, D, row_NK, w_NK, as_nv(ys_AD), as_nv(dy_ND),
                                                         as_nv(dys_AD), dw_NK);
  HYLO_CUDA_LAUNCH_CHECK("combine_backward_kernel");
}

void aux_loss_forward(int N, int E, int K, bool normalize, const float* scores_NE, const int32_t* routed_E,
                      double coef, float* loss_1, cudaStream_t stream) {
  HYLO_CUDA_REQUIRE(N >= 0 && E > 0 && K > 0, "aux_loss_forward: bad shape N=%d E=%d K=%d", N, E, K);
  if (N == 0) {
    HYLO_CUDA_CHECK(cudaMemsetAsync(loss_1, 0, sizeof(float), stream));
    return;
  }
  const int G = int(ceil_div(N, kAuxRows));
  double* partial_GE = static_cast<double*>(stream_scratch(size_t(G) * E * sizeof(double), stream));
  aux_partial_kernel<<<G, kThreads, 0, stream>>>(N, E, normalize, scores_NE, partial_GE);
  HYLO_CUDA_LAUNCH_CHECK("aux_partial_kernel");
  aux_finish_kernel<<<1, kThreads, 0, stream>>>(G, N, E, K, partial_GE, routed_E, coef, loss_1);
  HYLO_CUDA_LAUNCH_CHECK("aux_finish_kernel");
}

void aux_loss_backward(int N, int E, int K, bool normalize, const float* scores_NE, const int32_t* routed_E,
                       double coef, const float* dloss_1, float* dscores_NE, cudaStream_t stream) {
  HYLO_CUDA_REQUIRE(N >= 0 && E > 0 && K > 0, "aux_loss_backward: bad shape N=%d E=%d K=%d", N, E, K);
  if (N == 0) return;
  aux_backward_kernel<<<router_blocks(N), kThreads, 0, stream>>>(N, E, K, normalize, scores_NE, routed_E, coef,
                                                                 dloss_1, dscores_NE);
  HYLO_CUDA_LAUNCH_CHECK("aux_backward_kernel");
}

}  // namespace hylo::cuda
