// Decode attention (one query token per sequence against a layer's KV cache) and the cache's
// append and compaction copies. The two attention kernels:
//   decode_kernel (decode_mha.cuh): MHA, one query head per block, lane groups in registers;
//   decode_mma_kernel (decode_gqa.cuh): every head of a kv head per block, on tensor cores: GQA
//   groups, and MHA at small batches (plan_for below).
// Grid = (splits, kv heads * head chunks, batch): a split takes a contiguous share of the live
// keys; with splits > 1 the block writes an unnormalised partial and decode_combine_kernel
// merges the splits (second pass). All are programmatic dependent launches (Hopper PDL) and let
// the next kernel launch before they end: the combine's blocks are scheduled while the split
// blocks merge and wait on the GPU for their results; and a decode kernel that follows a decode
// step (the next layer or token) issues its first key loads while the previous step drains, so
// back-to-back steps do not each pay a kernel-boundary gap and a cold memory pipe. What a decode
// kernel reads before its griddepcontrol.wait is only k and v of its first round of keys; it is a
// dependent launch only when no first round holds the last live key, whose slot the stream's
// previous kernel (the append) may be writing. q, out and the workspace wait.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/common/common.cuh"
#include "kernels/decode/decode.h"
#include "kernels/decode/decode_gqa.cuh"
#include "kernels/decode/decode_mha.cuh"

namespace hylo::cuda {
namespace decode {
namespace {

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

__global__ void floor_kernel() {
  cudaTriggerProgrammaticLaunchCompletion();
  cudaGridDependencySynchronize();
}

__global__ void delay_kernel(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

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

// Split-KV: decode_mma_kernel only, and only on tiny grids: sm_count / (2 blocks) splits where that
// is at least kMinSplits (on 132 SMs: grids of at most 16 blocks, e.g. batch 1 at H 16), none
// elsewhere; decode_combine_kernel merges them. Splitting in 2 cost about 1.5 µs a step at 64
// blocks (PBB ran that much faster unsplit), and at 16 blocks 2 splits lost to both 4 and none.
// Against the former target of one block per SM (experiments/results/decode/LOG.md), PBB + SWA per
// step fell by 2-17% at every batch from 1 to 16 tried (H 16 and Hkv 4); SWA alone was 6-7% slower
// unsplit at 32 blocks and hd128, where PBB was 10-11% faster. decode_kernel takes only grids of
// more than 4 blocks per SM: it never splits.
constexpr int kMinSplits = 4, kMaxSplits = 32;  // kMaxSplits bounds the workspace

// Which kernel serves a shape and how it divides the work (experiments/results/decode/LOG.md):
// - a GQA group: decode_mma_kernel, blocks of up to 8 of its heads (1.03-2.15x faster at batch 64
//   than two heads per block of decode_kernel, group 2 included);
// - MHA with at most 4 (sequence, head) slices per SM (batch 32 at H 16): decode_mma_kernel too.
//   Its cp.async stages keep 96 KB in flight per block at hd128, so it fills the memory pipe with
//   fewer blocks than decode_kernel needs. Since its products were transposed it is 1.08-1.14x
//   faster than decode_kernel at batch 32 (H 16, hd 64 and 128; decode_kernel then split in 2); at
//   batch 64 within 2% either way, with a lower PBB/SWA ratio;
// - other MHA: decode_kernel, one head per block.
struct Plan {
  bool mma;
  int chunks;         // blocks per (sequence, kv head, split)
  int keys_per_step;  // live keys a block covers per round of all its warps or lane groups
};

Plan plan_for(const DecodeShape& s) {
  const int group = s.Hq / s.Hkv;
  if (group > 1 || int64_t(s.B) * s.Hkv <= 4 * int64_t(sm_count()))
    return {true, (group + kMmaHeads - 1) / kMmaHeads, kMmaKeysPerStep};
  return {false, 1, s.D == 64 ? kMhaKeysPerStep<64> : kMhaKeysPerStep<128>};
}

// Splits asked for before empty ones are dropped (the policy above), at least one block round of
// keys per split. Non-decreasing in keys, so it bounds the workspace.
int requested_splits(const DecodeShape& shape, const Plan& plan, int keys) {
  if (!plan.mma || keys <= 0) return 1;
  const int64_t blocks = int64_t(shape.B) * shape.Hkv * plan.chunks;
  const int64_t splits = std::min<int64_t>({sm_count() / (2 * blocks), keys / plan.keys_per_step, kMaxSplits});
  return splits >= kMinSplits ? int(splits) : 1;
}

// For the public split and workspace queries, which may be asked about shapes that
// decode_attention_forward refuses: those get no split.
int requested_splits_unchecked(const DecodeShape& shape, int keys) {
  if (!decode_supports_head_dim(shape.D) || shape.Hkv <= 0) return 1;
  return requested_splits(shape, plan_for(shape), keys);
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

// kernel<<<grid, threads, smem>>>(args...) on `stream`, a programmatic dependent launch if
// `dependent`. A failed launch is left to the caller's HYLO_CUDA_LAUNCH_CHECK, which names the kernel.
template <class... KernelParams, class... Args>
void launch(void (*kernel)(KernelParams...), bool dependent, dim3 grid, int threads, int smem, cudaStream_t stream,
            Args... args) {
  cudaLaunchAttribute pdl[1];
  pdl[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  pdl[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = dim3(unsigned(threads));
  config.dynamicSmemBytes = size_t(smem);
  config.stream = stream;
  config.attrs = pdl;
  config.numAttrs = dependent ? 1 : 0;
  (void)cudaLaunchKernelEx(&config, kernel, args...);  // its error is also cudaGetLastError's
}

template <int D, int Stages>
void launch_mma(const Params& p, bool dependent, dim3 grid, cudaStream_t stream) {
  using L = MmaLayout<D, Stages>;
  attn::reserve_smem<decode_mma_kernel<D, Stages>>(L::kBytes);  // above the 48 KB default
  launch(decode_mma_kernel<D, Stages>, dependent, grid, kMmaThreads, L::kBytes, stream, p);
  HYLO_CUDA_LAUNCH_CHECK("decode_mma_kernel");
}

template <int D>
void launch_for_dim(const Params& p, const Plan& plan, dim3 grid, cudaStream_t stream) {
  // The last split is one round, whose loads go out before the wait, when it has at most a step's keys.
  const bool dependent = p.keys - (p.splits - 1) * p.keys_per_split > plan.keys_per_step;
  if (plan.mma) {
    if (int64_t(grid.x) * grid.y * grid.z <= sm_count())
      launch_mma<D, kMmaStagesOneWave>(p, dependent, grid, stream);
    else
      launch_mma<D, kMmaStages>(p, dependent, grid, stream);
  } else {
    launch(decode_kernel<D>, dependent, grid, kThreads, 0, stream, p);
    HYLO_CUDA_LAUNCH_CHECK("decode_kernel");
  }
  if (p.splits > 1) {
    launch(decode_combine_kernel<D>, true, dim3(unsigned(p.Hq) * grid.z), D, 0, stream,
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

DecodeKernel decode_kernel_for(const DecodeShape& shape) {
  check_shape(shape);
  return plan_for(shape).mma ? DecodeKernel::tensor_cores : DecodeKernel::lane_groups;
}

int decode_num_splits(const DecodeShape& shape, int keys) {
  int splits = requested_splits_unchecked(shape, keys), per = 0;
  if (keys > 0) split_keys(keys, splits, per);
  return splits;
}

size_t decode_workspace_bytes(const DecodeShape& shape, int max_keys) {
  const int splits = requested_splits_unchecked(shape, max_keys);
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
  const int group = shape.Hq / shape.Hkv;
  const Plan plan = plan_for(shape);
  int splits = requested_splits(shape, plan, keys), per = 0;
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
  p.chunks = plan.chunks;
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
    launch_for_dim<64>(p, plan, grid, stream);
  else
    launch_for_dim<128>(p, plan, grid, stream);
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

void decode_launch_floor(const DecodeShape& shape, cudaStream_t stream) {
  check_shape(shape);
  const Plan plan = plan_for(shape);
  launch(floor_kernel, true, dim3(1, unsigned(shape.Hkv * plan.chunks), unsigned(shape.B)),
         plan.mma ? kMmaThreads : kThreads, 0, stream);
  HYLO_CUDA_LAUNCH_CHECK("decode floor_kernel");
}

void stream_delay(cudaStream_t stream, int microseconds) {
  delay_kernel<<<1, 1, 0, stream>>>(1000ull * unsigned(std::max(microseconds, 0)));
  HYLO_CUDA_LAUNCH_CHECK("delay_kernel");
}

}  // namespace hylo::cuda
