// CUDA decode attention (SPEC §1, §5): one query token per sequence against one layer's bf16 KV
// cache, fp32 softmax. One kernel per head layout serves every cache kind (Flash-PBB b slots, SWA
// ring, linear SWA, full): it reads only the live slots, given as at most two contiguous ranges
// (LiveSlots, nn/kv_cache.h computes them). MHA: one query head per thread block. GQA (and MHA at
// small batches): a block takes up to 8 query heads of a kv head on tensor cores, so a group of 8
// or fewer reads each cached row once per step. Split-KV on the smallest grids (decode.cu:
// partial (max, sum, acc) combined in a second pass). Head dims 64 and 128. Plain C++ declarations
// so that g++-compiled callers can include this header.
//
// Shape legend (as ops/cpu/decode_attention.h): q_BHD (B, Hq, D), k_BHSD / v_BHSD (B, Hkv, S, D),
// out_BHD (B, Hq, D), new tokens k_BHD / v_BHD (B, Hkv, D). All bf16, row-major, contiguous,
// 16-byte aligned.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "attn/shape.h"

namespace hylo {
struct bf16;  // core/dtype.h; only pointers here, so .cu files need not include fmt (core/error.h)
}

namespace hylo::cuda {

// True when the kernels handle this head dim (64 or 128).
bool decode_supports_head_dim(int D);

// KV splits decode_attention_forward uses for `keys` live keys on the current device (1: one pass).
int decode_num_splits(const DecodeShape& shape, int keys);

// Scratch for the split partials of any step with at most max_keys live keys (0 when never split).
size_t decode_workspace_bytes(const DecodeShape& shape, int max_keys);

// out_BHD <- softmax(q k^T / sqrt(D)) v over the live slots of every sequence (fp32 softmax).
// workspace: at least decode_workspace_bytes(shape, live.keys()) bytes (null when that is 0).
void decode_attention_forward(const DecodeShape& shape, const LiveSlots& live, const bf16* q_BHD,
                              const bf16* k_BHSD, const bf16* v_BHSD, bf16* out_BHD, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream);

// k_BHSD[:, :, slot] <- k_BHD and v likewise: one new position for every sequence (slot = t mod b
// for Flash-PBB, t mod W for the ring, from KvSlotMap::append in general).
void kv_cache_append(const DecodeShape& shape, int slot, const bf16* k_BHD, const bf16* v_BHD, bf16* k_BHSD,
                     bf16* v_BHSD, cudaStream_t stream);

// Linear-SWA compaction (KvSlotMap's SlotMove): rows [src, src + count) -> [dst, dst + count) of
// every (sequence, kv head), k and v; the ranges must not overlap.
void kv_cache_move(const DecodeShape& shape, int src, int dst, int count, bf16* k_BHSD, bf16* v_BHSD,
                   cudaStream_t stream);

// ids_B[b] <- the first index of the largest of logits_BV[b, 0 .. n_valid), NaN skipped (a row
// of NaN gives 0): the greedy tokens (ops/decode.h, first_argmax is the reference).
void greedy_tokens(const bf16* logits_BV, int B, int V, int n_valid, int32_t* ids_B, cudaStream_t stream);

// Which kernel decode_attention_forward runs for a shape on the current device (decode.cu, plan_for):
// lane groups, one query head per block (decode_mha.cuh), or tensor cores, every query head of a
// kv head per block (decode_gqa.cuh).
enum class DecodeKernel { lane_groups, tensor_cores };
DecodeKernel decode_kernel_for(const DecodeShape& shape);

// Benchmark helper: an empty kernel on the grid and block size of an unsplit decode step for
// `shape`, launched as the decode kernels are (a programmatic dependent launch that waits on the
// previous kernel): what a step costs before it reads anything.
void decode_launch_floor(const DecodeShape& shape, cudaStream_t stream);

// Benchmark helper: keeps `stream` busy for about `microseconds` (one thread waiting on the global
// timer, no memory traffic), so that the host can queue timed launches ahead of the GPU and the
// events measure kernel time, not host launch latency.
void stream_delay(cudaStream_t stream, int microseconds);

}  // namespace hylo::cuda
