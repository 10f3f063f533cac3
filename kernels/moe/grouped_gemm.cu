// Grouped expert GEMMs (semantics in grouped_gemm.h) as row-major products through kernels/gemm.
#include "kernels/moe/grouped_gemm.h"

#include "kernels/common/common.cuh"
#include "kernels/gemm/gemm.h"

namespace hylo::cuda {
namespace {

// Where an operand of expert e starts: base + per_row * offsets[e] + per_expert * e (elements).
struct Operand {
  const bf16* base;
  int64_t per_row, per_expert;
  const bf16* at(int64_t row_begin, int e) const {
    return reinterpret_cast<const bf16*>(as_nv(base) + per_row * row_begin + per_expert * e);
  }
};

// One product per expert, C(M, N) = op(A)(M, K) op(B)(K, N) (row-major), where M (forward, dx)
// or K (dw) is the expert's row count and the other sizes are fixed.
struct Family {
  bool trans_a, trans_b;
  int M, N, K;      // the varying one is ignored
  bool rows_are_k;  // false: M = rows; true: K = rows
  Operand a, b, c;
  float beta;
  int m(int rows) const { return rows_are_k ? M : rows; }
  int k(int rows) const { return rows_are_k ? rows : K; }
};

// One cuBLASLt call per non-empty expert (kernels/gemm: cached heuristic, deterministic). On the
// H200 this beat a single cublasGemmGroupedBatchedEx call for every expert shape measured, by
// 1.2-2.4x (experiments/results/moe_gemm_h200.json), so it is the only path.
void run_family(const Family& f, int E, const int32_t* off_host, cudaStream_t stream) {
  for (int e = 0; e < E; ++e) {
    const int64_t begin = off_host[e];
    const int rows = off_host[e + 1] - off_host[e];
    if (rows == 0) continue;
    gemm(f.trans_a, f.trans_b, f.m(rows), f.N, f.k(rows), 1.f, f.a.at(begin, e), f.b.at(begin, e), f.beta,
         const_cast<bf16*>(f.c.at(begin, e)), stream);
  }
}

void check_offsets(const char* op, int E, int I, int O, const int32_t* off_host) {
  HYLO_CUDA_REQUIRE(E > 0 && I > 0 && O > 0 && off_host && off_host[0] == 0, "%s: bad shape E=%d I=%d O=%d", op, E,
                    I, O);
  for (int e = 0; e < E; ++e)
    HYLO_CUDA_REQUIRE(off_host[e + 1] >= off_host[e], "%s: offsets decrease at expert %d", op, e);
}

}  // namespace

void grouped_linear_forward(int E, int I, int O, const int32_t* offsets_host_E1, const bf16* x_AI, const bf16* w_EOI,
                            bf16* y_AO, cudaStream_t stream) {
  check_offsets("grouped_linear_forward", E, I, O, offsets_host_E1);
  const Family f{false, true, 0, O, I, false, {x_AI, I, 0}, {w_EOI, 0, int64_t(O) * I}, {y_AO, O, 0}, 0.f};
  run_family(f, E, offsets_host_E1, stream);
}

void grouped_linear_backward_input(int E, int I, int O, const int32_t* offsets_host_E1, const bf16* dy_AO,
                                   const bf16* w_EOI, bf16* dx_AI, cudaStream_t stream) {
  check_offsets("grouped_linear_backward_input", E, I, O, offsets_host_E1);
  const Family f{false, false, 0, I, O, false, {dy_AO, O, 0}, {w_EOI, 0, int64_t(O) * I}, {dx_AI, I, 0}, 0.f};
  run_family(f, E, offsets_host_E1, stream);
}

void grouped_linear_backward_weight(int E, int I, int O, const int32_t* offsets_host_E1, const bf16* dy_AO,
                                    const bf16* x_AI, bf16* dw_EOI, bool accumulate, cudaStream_t stream) {
  check_offsets("grouped_linear_backward_weight", E, I, O, offsets_host_E1);
  const int64_t slice = int64_t(O) * I;
  // An expert without rows still owns a gradient slot: zero, not garbage (the products skip it).
  if (!accumulate)
    for (int e = 0; e < E; ++e)
      if (offsets_host_E1[e + 1] == offsets_host_E1[e])
        HYLO_CUDA_CHECK(cudaMemsetAsync(as_nv(dw_EOI) + e * slice, 0, size_t(slice) * 2, stream));
  const Family f{true, false, O, I, 0, true, {dy_AO, O, 0}, {x_AI, I, 0}, {dw_EOI, 0, slice}, accumulate ? 1.f : 0.f};
  run_family(f, E, offsets_host_E1, stream);
}

}  // namespace hylo::cuda
