// Token embedding on the GPU (oracle: src/ops/cpu/embedding.h). Legend: N tokens, V vocabulary
// rows, D width. bf16 table and activations, int32 ids, row-major.
//
//   embedding_forward : out_ND[n] = table_VD[ids_N[n]]. An id outside [0, V) yields a NaN row
//                       (visible as a NaN loss, which the trainer reports) instead of a wild read.
//   embedding_backward: dtable_VD[v] += Σ_{n: ids[n] = v} dout_ND[n]   (ACCUMULATES, bf16 += fp32 sum);
//                       rows of invalid ids contribute nothing.
//
// Backward is deterministic without float atomics: a stable radix sort (CUB) of (id, n) pairs
// groups each vocabulary row's tokens in increasing n; one thread block per distinct id then sums
// its rows in that fixed order in fp32 and does a single read-modify-write of dtable[v], so no two
// blocks touch the same row. Chosen over llm.c's host-side bucketing because the ids live on the
// device here. Cost: O(N) sort of log2(V)-bit keys plus one pass over dout; a very frequent token's
// rows are summed serially by one block (fine for natural text at N <= 1M).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace hylo {
struct bf16;
}

namespace hylo::cuda {

void embedding_forward(int N, int V, int D, const int32_t* ids_N, const bf16* table_VD, bf16* out_ND,
                       cudaStream_t stream);

void embedding_backward(int N, int V, int D, const int32_t* ids_N, const bf16* dout_ND, bf16* dtable_VD,
                        cudaStream_t stream);

}  // namespace hylo::cuda
