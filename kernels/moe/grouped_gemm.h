// Grouped expert GEMMs over variable-size row groups (oracle: cpu::grouped_linear_*): group e is
// rows [offsets[e], offsets[e+1]) of the permuted buffer and multiplies expert e's weight.
// bf16 operands, fp32 accumulation, row-major. Legend: E experts, A rows, I/O input/output width.
//
// Group sizes come from the HOST copy of the offsets (cuBLAS takes problem sizes on the host; the
// MoE plan reads its E+1 offsets back once per layer forward and the backward reuses them);
// pointers are formed on the device from the DEVICE copy, so nothing else crosses the bus.
// Experts with no rows are fine: their outputs have no rows, and their weight gradient is zeroed
// (or left as it was when accumulating).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace hylo {
struct bf16;
}

namespace hylo::cuda {

// How the E products are issued: one cuBLASLt call per non-empty expert through kernels/gemm,
// consecutive experts on four side streams (default), or one cublasGemmGroupedBatchedEx call for
// all experts. `hylo bench moe` and `hylo bench train --expert-gemm` compare them. The loop wins in
// whole steps (moe-8e-pbb 131.8 vs 163.6 ms, moe-2b-pbb 220.9 vs 238.1 on one stream; 128.8 and
// 206.1 ms with the side streams) once kernels/gemm plans a bucket of row counts instead of every
// exact size (before that the loop queried the cuBLASLt heuristic for every expert of every layer
// each step and lost in training). In isolation: 8 experts 0.88 vs 0.40 of dense forward; 64 small
// experts at d 1024 (~5 us products) are bound by the host issuing them, 0.33 vs 0.37
// (experiments/results/moe/RECORD.md, 2026-11-30).
enum class GroupedGemmPath { cublas_grouped, lt_loop };
void set_grouped_gemm_path(GroupedGemmPath path);
GroupedGemmPath grouped_gemm_path();

// y_AO[group e] = x_AI[group e] @ w_EOI[e]^T
void grouped_linear_forward(int E, int I, int O, const int32_t* offsets_host_E1, const int32_t* offsets_dev_E1,
                            const bf16* x_AI, const bf16* w_EOI, bf16* y_AO, cudaStream_t stream);
// dx_AI[group e] = dy_AO[group e] @ w_EOI[e]   (overwritten)
void grouped_linear_backward_input(int E, int I, int O, const int32_t* offsets_host_E1,
                                   const int32_t* offsets_dev_E1, const bf16* dy_AO, const bf16* w_EOI, bf16* dx_AI,
                                   cudaStream_t stream);
// dw_EOI[e] (+)= dy_AO[group e]^T @ x_AI[group e]
void grouped_linear_backward_weight(int E, int I, int O, const int32_t* offsets_host_E1,
                                    const int32_t* offsets_dev_E1, const bf16* dy_AO, const bf16* x_AI, bf16* dw_EOI,
                                    bool accumulate, cudaStream_t stream);

}  // namespace hylo::cuda
