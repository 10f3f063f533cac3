// Decode attention: memory-bound (each live k/v row is read once per step and used for one dot
// product and one axpy per query head), so the kernel is built around the loads.
//
// Thread block = 128 threads = kGroups lane groups of D/8 lanes; a lane group owns one key row at a
// time, each lane 8 dims (one 16-byte load of k, one of v). Per iteration (a round) every group
// issues up to U = KeysPerGroup<D> k and v loads before using any, and the block covers up to
// kStep = kGroups * U consecutive live keys (consecutive rows within a range: coalesced). A block's
// keys are cut into the fewest rounds of at most kStep and spread evenly over them: a round costs
// about its bytes at the memory's rate, but a last round of a few keys would cost a whole memory
// round trip for almost nothing (129 keys as 32+32+32+32+1 took 2.3 µs more than 128).
// Scores are reduced across the group with shuffles; each group keeps its own online softmax (max,
// sum, acc) for the GT query heads of its kv head; groups are merged through shared memory at the
// end.
// Grid = (splits, kv heads * head chunks, batch): a split takes a contiguous share of the live
// keys; with splits > 1 the block writes an unnormalised partial and decode_combine_kernel
// merges the splits (second pass). Both kernels are programmatic dependent launches (Hopper PDL)
// and let the next kernel launch before they end: the combine's blocks are scheduled while the
// split blocks merge and wait on the GPU for their results; and a decode kernel that follows a
// decode step (the next layer or token) issues its first key loads while the previous step
// drains, so back-to-back steps do not each pay a kernel-boundary gap and a cold memory pipe.
// What a decode kernel reads before its griddepcontrol.wait is only k and v of its first round of
// keys; it is a dependent launch only when no first round holds the last live key, whose slot the
// stream's previous kernel (the append) may be writing. q, out and the workspace wait.
//
// Legend: GT query heads per block (1 or 2, a divisor of the GQA group), U keys per lane group per
// iteration.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/common/common.cuh"
#include "kernels/decode/decode.h"

namespace hylo::cuda {
namespace decode {
namespace {

// Defaults from the sweep in experiments/results/decode.md; sweeps rebuild with the macros set.
#ifndef HYLO_DECODE_KEYS64
#define HYLO_DECODE_KEYS64 2
#endif
#ifndef HYLO_DECODE_KEYS128
#define HYLO_DECODE_KEYS128 4
#endif
#ifndef HYLO_DECODE_BLOCKS_PER_SM
#define HYLO_DECODE_BLOCKS_PER_SM 8
#endif
constexpr int kThreads = 128;
// Keys per lane group per iteration: the k and v loads each lane has in flight.
template <int D> constexpr int kKeysPerGroup = D == 64 ? HYLO_DECODE_KEYS64 : HYLO_DECODE_KEYS128;
constexpr int kMaxSplits = 32;
constexpr int kBlocksPerSm = HYLO_DECODE_BLOCKS_PER_SM;  // split until about this many blocks per SM

struct Params {
  const __nv_bfloat16 *q, *k, *v;
  __nv_bfloat16* out;
  float* part_acc;  // (B, Hq, splits, D): unnormalised sums, in units of exp2(s - max)
  float2* part_ml;  // (B, Hq, splits): (max of the scaled log2 scores, sum of exp2(s - max))
  LiveSlots live;
  int Hq, Hkv, group, chunks, slots, keys, splits, keys_per_split;
  float scale_log2;  // log2(e) / sqrt(D): scores in log2 units, exp2 instead of exp
};

__device__ __forceinline__ uint4 load16(const __nv_bfloat16* p) {
  return __ldg(reinterpret_cast<const uint4*>(p));  // ld.global.nc.v4: read-only path
}

__device__ __forceinline__ void to_float8(const uint4& raw, float (&f)[8]) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    // bf16 -> f32 is a 16-bit shift: low half is element 2i, high half element 2i+1.
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

// One query head per block is held to the registers of kBlocksPerSm resident blocks (64 at 128
// threads), which the split choice assumes; unheld, the even rounds' bounds took it to 72 at hd128.
template <int D, int GT>
__global__ void __launch_bounds__(kThreads, GT == 1 ? kBlocksPerSm : 0) decode_kernel(const Params p) {
  constexpr int kLanes = D / 8, kGroups = kThreads / kLanes, U = kKeysPerGroup<D>, kStep = kGroups * U;
  __shared__ float red_m[kGroups][GT], red_l[kGroups][GT];
  __shared__ __align__(16) float red_acc[kGroups][GT][D];

  const int tid = threadIdx.x, grp = tid / kLanes, lane = tid % kLanes;
  const int split = blockIdx.x, b = blockIdx.z;
  const int hk = blockIdx.y / p.chunks, h0 = hk * p.group + (blockIdx.y % p.chunks) * GT;
  const int j0 = split * p.keys_per_split, j1 = min(p.keys, j0 + p.keys_per_split);
  const int rounds = max(1, (j1 - j0 + kStep - 1) / kStep), step = (j1 - j0 + rounds - 1) / rounds;

  const size_t head_row = (size_t(b) * p.Hkv + hk) * p.slots;  // first cache row of (b, hk)
  const __nv_bfloat16* k_S = p.k + head_row * D + lane * 8;
  const __nv_bfloat16* v_S = p.v + head_row * D + lane * 8;
  // This group's k and v rows of the round from jb on (zeros past the round's end).
  uint4 kr[U], vr[U];
  auto load_keys = [&](int jb) {
    const int n = min(step, j1 - jb);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int j = jb + u * kGroups + grp;
      if (u * kGroups + grp < n) {
        const size_t row = size_t(p.live.slot(j)) * D;
        kr[u] = load16(k_S + row);
        vr[u] = load16(v_S + row);
      } else {
        kr[u] = vr[u] = make_uint4(0, 0, 0, 0);
      }
    }
  };

  // The first keys' loads go out before the wait on the previous kernel (see the top), q's after
  // it. Converting q then waits for its loads, not for the keys'.
  load_keys(j0);
  cudaGridDependencySynchronize();
  uint4 q_raw[GT];
#pragma unroll
  for (int g = 0; g < GT; ++g) q_raw[g] = load16(p.q + (size_t(b) * p.Hq + h0 + g) * D + lane * 8);
  float q[GT][8];
#pragma unroll
  for (int g = 0; g < GT; ++g) {
    to_float8(q_raw[g], q[g]);
#pragma unroll
    for (int i = 0; i < 8; ++i) q[g][i] *= p.scale_log2;
  }
  float m[GT], l[GT], acc[GT][8];
#pragma unroll
  for (int g = 0; g < GT; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.f;
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[g][i] = 0.f;
  }

  for (int jb = j0; jb < j1; jb += step) {
    const int n = min(step, j1 - jb);
    float s[GT][U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float kf[8];
      to_float8(kr[u], kf);
#pragma unroll
      for (int g = 0; g < GT; ++g) {
        float dot = 0.f;
#pragma unroll
        for (int i = 0; i < 8; ++i) dot = fmaf(q[g][i], kf[i], dot);
        s[g][u] = dot;
      }
    }
#pragma unroll
    for (int off = kLanes / 2; off > 0; off >>= 1)
#pragma unroll
      for (int g = 0; g < GT; ++g)
#pragma unroll
        for (int u = 0; u < U; ++u) s[g][u] += __shfl_xor_sync(0xffffffffu, s[g][u], off);

    float pw[GT][U];
#pragma unroll
    for (int g = 0; g < GT; ++g) {
      float m_new = m[g];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (u * kGroups + grp >= n) s[g][u] = -INFINITY;
        m_new = fmaxf(m_new, s[g][u]);
      }
      // While nothing is valid yet m_new is -inf: use 0 so that exp2 gives 0, never NaN.
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      const float corr = exp2f(m[g] - m_use);
      float sum = 0.f;
#pragma unroll
      for (int u = 0; u < U; ++u) sum += (pw[g][u] = exp2f(s[g][u] - m_use));
      l[g] = l[g] * corr + sum;
      m[g] = m_new;
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[g][i] *= corr;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float vf[8];
      to_float8(vr[u], vf);
#pragma unroll
      for (int g = 0; g < GT; ++g)
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[g][i] = fmaf(pw[g][u], vf[i], acc[g][i]);
    }
    if (jb + step < j1) load_keys(jb + step);
  }

  // No loads left: the next kernel (the combine, or the next step's decode) may be scheduled now,
  // its first loads overlapping this grid's merges; its griddepcontrol.wait still waits for this
  // whole grid to finish and its writes to be visible. (Triggered at the block's start instead,
  // the next step's blocks take the SM slots and memory queues early: slower, experiments/results/
  // decode.md.) A no-op without a dependent launch.
  cudaTriggerProgrammaticLaunchCompletion();

  // Merge the groups: rescale each to the block's max and sum.
#pragma unroll
  for (int g = 0; g < GT; ++g) {
    if (lane == 0) {
      red_m[grp][g] = m[g];
      red_l[grp][g] = l[g];
    }
    float4* dst = reinterpret_cast<float4*>(&red_acc[grp][g][lane * 8]);
    dst[0] = make_float4(acc[g][0], acc[g][1], acc[g][2], acc[g][3]);
    dst[1] = make_float4(acc[g][4], acc[g][5], acc[g][6], acc[g][7]);
  }
  __syncthreads();
  for (int idx = tid; idx < GT * D; idx += kThreads) {
    const int g = idx / D, d = idx % D;
    float M = -INFINITY;
#pragma unroll
    for (int r = 0; r < kGroups; ++r) M = fmaxf(M, red_m[r][g]);
    float L = 0.f, A = 0.f;
#pragma unroll
    for (int r = 0; r < kGroups; ++r) {
      const float w = exp2f(red_m[r][g] - M);  // 0 for a group that saw no key (M is finite)
      L = fmaf(red_l[r][g], w, L);
      A = fmaf(red_acc[r][g][d], w, A);
    }
    const size_t bh = size_t(b) * p.Hq + h0 + g;
    if (p.splits == 1) {
      p.out[bh * D + d] = __float2bfloat16(A / L);
    } else {
      const size_t row = bh * p.splits + split;
      p.part_acc[row * D + d] = A;
      if (d == 0) p.part_ml[row] = make_float2(M, L);
    }
  }
}

// Second pass of split-KV: one block of D threads per (b, query head).
template <int D>
__global__ void __launch_bounds__(D) decode_combine_kernel(const float* part_acc, const float2* part_ml,
                                                           __nv_bfloat16* out, int splits) {
  const size_t bh = blockIdx.x;
  const int d = threadIdx.x;
  cudaTriggerProgrammaticLaunchCompletion();  // the next step's decode may start its key loads
  cudaGridDependencySynchronize();            // the partials of decode_kernel, complete and visible
  float M = -INFINITY;
  for (int s = 0; s < splits; ++s) M = fmaxf(M, part_ml[bh * splits + s].x);
  float L = 0.f, A = 0.f;
  for (int s = 0; s < splits; ++s) {
    const float2 ml = part_ml[bh * splits + s];
    const float w = exp2f(ml.x - M);
    L = fmaf(ml.y, w, L);
    A = fmaf(part_acc[(bh * splits + s) * D + d], w, A);
  }
  out[bh * D + d] = __float2bfloat16(A / L);
}

// One 16-byte vector per thread: rows (b, kv head) of the new token go to `slot`; k then v.
__global__ void append_kernel(const uint4* k_new, const uint4* v_new, uint4* k_cache, uint4* v_cache, int rows,
                              int vecs, int slots, int slot) {
  // The decode after it may start its first keys' loads now: it is a dependent launch only when
  // those do not include the last live key, the one slot written here.
  cudaTriggerProgrammaticLaunchCompletion();
  const int64_t total = int64_t(rows) * vecs;
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool is_v = i >= total;
  if (is_v) i -= total;
  if (i >= total) return;
  const int64_t row = i / vecs, c = i % vecs;
  const int64_t dst = (row * slots + slot) * vecs + c;
  if (is_v)
    v_cache[dst] = v_new[i];
  else
    k_cache[dst] = k_new[i];
}

__global__ void move_kernel(uint4* k_cache, uint4* v_cache, int rows, int vecs, int slots, int src, int dst,
                            int count) {
  const int64_t per_row = int64_t(count) * vecs, total = int64_t(rows) * per_row;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / per_row, off = i % per_row;
    const int64_t base = row * slots * vecs;
    k_cache[base + dst * int64_t(vecs) + off] = k_cache[base + src * int64_t(vecs) + off];
    v_cache[base + dst * int64_t(vecs) + off] = v_cache[base + src * int64_t(vecs) + off];
  }
}

__global__ void delay_kernel(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

// Query heads per block: 2 for an even GQA group, else 1. More would read each k/v row fewer times
// from L2, but every head holds q and an accumulator in registers: 4 heads took 161 registers at
// hd128 (3 blocks per SM), 8 took 245 (2). With 2, GQA steps ran up to 25% faster; one of the 16
// measured cases, 10% slower (experiments/results/decode.md).
int heads_per_block(int group) { return group % 2 == 0 ? 2 : 1; }

int keys_per_step(int D) { return (kThreads / (D / 8)) * (D == 64 ? kKeysPerGroup<64> : kKeysPerGroup<128>); }

// Read once: the split choice asks for it at every decode step (hylo drives one GPU per process).
int sm_count() {
  static const int sms = [] {
    int device = 0, count = 0;
    HYLO_CUDA_CHECK(cudaGetDevice(&device));
    HYLO_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
    return count;
  }();
  return sms;
}

// Splits asked for before empty ones are dropped: about kBlocksPerSm blocks per SM, at least one
// block iteration of keys per split. Non-decreasing in keys, so it bounds the workspace.
int requested_splits(const DecodeShape& shape, int keys) {
  if (!decode_supports_head_dim(shape.D) || shape.Hkv <= 0 || keys <= 0) return 1;
  const int group = shape.Hq / shape.Hkv;
  const int64_t blocks = int64_t(shape.B) * shape.Hkv * (group / heads_per_block(group));
  const int64_t splits = std::min<int64_t>(
      {int64_t(sm_count()) * kBlocksPerSm / std::max<int64_t>(blocks, 1), keys / keys_per_step(shape.D), kMaxSplits});
  return int(std::max<int64_t>(splits, 1));
}

// Workspace of `splits` partials per (batch, query head): D sums plus (max, sum), fp32.
size_t partials_bytes(const DecodeShape& shape, int splits) {
  return size_t(shape.B) * shape.Hq * splits * (size_t(shape.D) + 2) * sizeof(float);
}

// Keys per split for `splits` requested splits, and the splits that then remain non-empty.
void split_keys(int keys, int& splits, int& keys_per_split) {
  keys_per_split = (keys + splits - 1) / splits;
  splits = (keys + keys_per_split - 1) / keys_per_split;
}

// Append and move copy whole 16-byte vectors: any head dim that is a multiple of 8.
void check_cache_shape(const DecodeShape& s) {
  HYLO_CUDA_REQUIRE(s.B > 0 && s.Hkv > 0 && s.slots > 0 && s.D > 0 && s.D % 8 == 0,
                    "kv cache: need positive sizes and D %% 8 == 0, got B=%d Hkv=%d slots=%d D=%d", s.B, s.Hkv,
                    s.slots, s.D);
}

// kernel<<<grid, threads>>>(args...) on `stream`, a programmatic dependent launch if `dependent`.
// A failed launch is left to the caller's HYLO_CUDA_LAUNCH_CHECK, which names the kernel.
template <class... KernelParams, class... Args>
void launch(void (*kernel)(KernelParams...), bool dependent, dim3 grid, int threads, cudaStream_t stream,
            Args... args) {
  cudaLaunchAttribute pdl[1];
  pdl[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  pdl[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = dim3(unsigned(threads));
  config.stream = stream;
  config.attrs = pdl;
  config.numAttrs = dependent ? 1 : 0;
  (void)cudaLaunchKernelEx(&config, kernel, args...);  // its error is also cudaGetLastError's
}

template <int D>
void launch_for_dim(const Params& p, int gt, dim3 grid, cudaStream_t stream) {
  // The last split is one round, whose loads go out before the wait, when it has at most a step's keys.
  const bool dependent = p.keys - (p.splits - 1) * p.keys_per_split > keys_per_step(D);
  if (gt == 2)
    launch(decode_kernel<D, 2>, dependent, grid, kThreads, stream, p);
  else
    launch(decode_kernel<D, 1>, dependent, grid, kThreads, stream, p);
  HYLO_CUDA_LAUNCH_CHECK("decode_kernel");
  if (p.splits > 1) {
    launch(decode_combine_kernel<D>, true, dim3(unsigned(p.Hq) * grid.z), D, stream,
           static_cast<const float*>(p.part_acc), static_cast<const float2*>(p.part_ml), p.out, p.splits);
    HYLO_CUDA_LAUNCH_CHECK("decode_combine_kernel");
  }
}

void check_shape(const DecodeShape& s) {
  HYLO_CUDA_REQUIRE(s.B > 0 && s.Hq > 0 && s.Hkv > 0 && s.slots > 0,
                    "decode: sizes must be positive, got B=%d Hq=%d Hkv=%d slots=%d", s.B, s.Hq, s.Hkv, s.slots);
  HYLO_CUDA_REQUIRE(decode_supports_head_dim(s.D), "decode: head dim %d not supported (64 or 128)", s.D);
  HYLO_CUDA_REQUIRE(s.Hq % s.Hkv == 0, "decode: query heads %d not a multiple of kv heads %d", s.Hq, s.Hkv);
  HYLO_CUDA_REQUIRE(s.B <= 65535 && s.Hq <= 65535, "decode: batch %d or heads %d above 65535", s.B, s.Hq);
}

}  // namespace
}  // namespace decode

using namespace decode;

bool decode_supports_head_dim(int D) { return D == 64 || D == 128; }

int decode_num_splits(const DecodeShape& shape, int keys) {
  int splits = requested_splits(shape, keys), per = 0;
  if (keys > 0) split_keys(keys, splits, per);
  return splits;
}

size_t decode_workspace_bytes(const DecodeShape& shape, int max_keys) {
  const int splits = requested_splits(shape, max_keys);
  return splits <= 1 ? 0 : partials_bytes(shape, splits);
}

void decode_attention_forward(const DecodeShape& shape, const LiveSlots& live, const bf16* q_BHD,
                              const bf16* k_BHSD, const bf16* v_BHSD, bf16* out_BHD, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
  check_shape(shape);
  const int keys = live.keys();
  HYLO_CUDA_REQUIRE(keys > 0, "decode: no live key (a query always attends itself)");
  HYLO_CUDA_REQUIRE((live.older.size() == 0 || (live.older.begin >= 0 && live.older.end <= shape.slots)) &&
                        (live.newer.size() == 0 || (live.newer.begin >= 0 && live.newer.end <= shape.slots)),
                    "decode: live slots [%d, %d) + [%d, %d) outside the cache's %d slots", live.older.begin,
                    live.older.end, live.newer.begin, live.newer.end, shape.slots);
  HYLO_CUDA_REQUIRE(aligned16(q_BHD) && aligned16(k_BHSD) && aligned16(v_BHSD) && aligned16(out_BHD),
                    "decode: q, k, v and out must be 16-byte aligned");
  const int group = shape.Hq / shape.Hkv, gt = heads_per_block(group);
  int splits = requested_splits(shape, keys), per = 0;
  split_keys(keys, splits, per);

  Params p{};
  p.q = reinterpret_cast<const __nv_bfloat16*>(q_BHD);
  p.k = reinterpret_cast<const __nv_bfloat16*>(k_BHSD);
  p.v = reinterpret_cast<const __nv_bfloat16*>(v_BHSD);
  p.out = reinterpret_cast<__nv_bfloat16*>(out_BHD);
  p.live = live;
  p.Hq = shape.Hq;
  p.Hkv = shape.Hkv;
  p.group = group;
  p.chunks = group / gt;
  p.slots = shape.slots;
  p.keys = keys;
  p.splits = splits;
  p.keys_per_split = per;
  p.scale_log2 = kLog2e / std::sqrt(float(shape.D));
  if (splits > 1) {
    const size_t partials = size_t(shape.B) * shape.Hq * splits;
    HYLO_CUDA_REQUIRE(workspace != nullptr && workspace_bytes >= partials_bytes(shape, splits),
                      "decode: workspace of %zu bytes too small for %d splits (decode_workspace_bytes)",
                      workspace_bytes, splits);
    p.part_acc = static_cast<float*>(workspace);
    p.part_ml = reinterpret_cast<float2*>(p.part_acc + partials * shape.D);
  }
  const dim3 grid(splits, shape.Hkv * p.chunks, shape.B);
  if (shape.D == 64)
    launch_for_dim<64>(p, gt, grid, stream);
  else
    launch_for_dim<128>(p, gt, grid, stream);
}

void kv_cache_append(const DecodeShape& shape, int slot, const bf16* k_BHD, const bf16* v_BHD, bf16* k_BHSD,
                     bf16* v_BHSD, cudaStream_t stream) {
  check_cache_shape(shape);
  HYLO_CUDA_REQUIRE(slot >= 0 && slot < shape.slots, "kv cache append: slot %d outside [0, %d)", slot, shape.slots);
  HYLO_CUDA_REQUIRE(aligned16(k_BHD) && aligned16(v_BHD) && aligned16(k_BHSD) && aligned16(v_BHSD),
                    "kv cache append: buffers must be 16-byte aligned");
  const int rows = shape.B * shape.Hkv, vecs = shape.D / 8;
  const int64_t threads = 2 * int64_t(rows) * vecs;
  append_kernel<<<unsigned((threads + 255) / 256), 256, 0, stream>>>(
      reinterpret_cast<const uint4*>(k_BHD), reinterpret_cast<const uint4*>(v_BHD), reinterpret_cast<uint4*>(k_BHSD),
      reinterpret_cast<uint4*>(v_BHSD), rows, vecs, shape.slots, slot);
  HYLO_CUDA_LAUNCH_CHECK("kv append_kernel");
}

void kv_cache_move(const DecodeShape& shape, int src, int dst, int count, bf16* k_BHSD, bf16* v_BHSD,
                   cudaStream_t stream) {
  check_cache_shape(shape);
  if (count == 0) return;
  HYLO_CUDA_REQUIRE(count > 0 && src >= 0 && dst >= 0 && src + count <= shape.slots && dst + count <= shape.slots &&
                        (src + count <= dst || dst + count <= src),
                    "kv cache move: rows [%d, %d) -> [%d, %d) invalid for %d slots", src, src + count, dst,
                    dst + count, shape.slots);
  HYLO_CUDA_REQUIRE(aligned16(k_BHSD) && aligned16(v_BHSD), "kv cache move: buffers must be 16-byte aligned");
  const int rows = shape.B * shape.Hkv, vecs = shape.D / 8;
  const int64_t total = int64_t(rows) * count * vecs;
  const int blocks = int(std::min<int64_t>((total + 255) / 256, int64_t(sm_count()) * 16));
  move_kernel<<<blocks, 256, 0, stream>>>(reinterpret_cast<uint4*>(k_BHSD), reinterpret_cast<uint4*>(v_BHSD), rows,
                                          vecs, shape.slots, src, dst, count);
  HYLO_CUDA_LAUNCH_CHECK("kv move_kernel");
}

void stream_delay(cudaStream_t stream, int microseconds) {
  delay_kernel<<<1, 1, 0, stream>>>(1000ull * unsigned(std::max(microseconds, 0)));
  HYLO_CUDA_LAUNCH_CHECK("delay_kernel");
}

}  // namespace hylo::cuda
