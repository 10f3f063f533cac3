// FP8 casts for train.precision: fp8 (oracle: the software codec of core/fp8.h and the CPU path
// of src/ops/fp8_linear.cpp). Legend: R rows, C columns of a row-major bf16 matrix.
//
//   fp8_amax           : *amax = max(*amax, max |x|); the caller zeroes *amax first (current scaling).
//   fp8_scale_from_amax: *scale = fp8_scale_for_amax(*amax, format, margin), one thread.
//   fp8_cast_transpose : out_RC = fp8(x * scale) and, when out_CR is not null, its transpose
//                        out_CR in the same pass (cuBLASLt's FP8 GEMMs take only K-contiguous
//                        operands, so dX and dW need transposed copies); *scale_inv = 1 / scale
//                        for the GEMM; *amax_record (when not null) = max(*amax_record, max |x|).
//   fp8_roll_history   : delayed scaling's step boundary for R roles of H slots each (history_RH,
//                        newest first): when `shift`, every history moves one slot older and
//                        takes step_amax_R as its newest, step_amax_R is zeroed; then
//                        scale_R = fp8_scale_for_amax(max of the history). Without `shift` only
//                        the scales are recomputed (after a checkpoint restored the histories).
//                        Role r's format: grad_format when r % 3 == 2 (the dY role of a linear's
//                        {x, w, dy} triple), e4m3 otherwise.
//
// amax is max |x| through atomicMax on the float's bits (non-negative floats order like their
// bit patterns), so a NaN (bits above infinity's) propagates. Conversion: __nv_cvt_float_to_fp8
// with __NV_SATFINITE (round to nearest even, saturating). Every result is deterministic.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/fp8.h"

namespace hylo {
struct bf16;
}

namespace hylo::cuda {

void fp8_amax(const bf16* x, int64_t n, float* amax, cudaStream_t stream);

void fp8_scale_from_amax(const float* amax, Fp8Format format, int margin, float* scale, cudaStream_t stream);

void fp8_cast_transpose(const bf16* x_RC, int64_t R, int64_t C, Fp8Format format, const float* scale,
                        uint8_t* out_RC, uint8_t* out_CR, float* scale_inv, float* amax_record, cudaStream_t stream);

void fp8_roll_history(float* history_RH, float* step_amax_R, float* scale_R, int R, int H, Fp8Format grad_format,
                      int margin, bool shift, cudaStream_t stream);

}  // namespace hylo::cuda
