// Grouped expert GEMMs (semantics in grouped_gemm.h). Row-major to column-major exactly as in
// kernels/gemm/gemm.cu: our C = op(A) op(B) is cuBLAS's C^T = op(B)^T op(A)^T, so cuBLAS's first
// operand is our B, its m is our N and its n our M, transposition flags carried over.
#include <cublas_v2.h>

#include <atomic>
#include <vector>

#include "core/cuda/allocator.h"
#include "core/cuda/check.h"
#include "core/cuda/cublas_library.h"
#include "kernels/common/common.cuh"
#include "kernels/gemm/gemm.h"
#include "kernels/moe/grouped_gemm.h"

namespace hylo::cuda {
namespace {

std::atomic<GroupedGemmPath> g_path{GroupedGemmPath::lt_loop};

// Where an operand of expert e starts: base + per_row * offsets[e] + per_expert * e (elements).
struct Operand {
  const nv_bf16* base;
  int64_t per_row, per_expert;
  __host__ __device__ const nv_bf16* at(int64_t row_begin, int e) const {
    return base + per_row * row_begin + per_expert * e;
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

// Pointer arrays for the non-empty experts, in expert order: [our B | our A | C], each `count`
// long. E is small, so each thread counts the non-empty experts before its own.
__global__ void group_pointers_kernel(int E, int count, const int32_t* offsets_E1, Operand a, Operand b, Operand c,
                                      const void** out) {
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= E || offsets_E1[e + 1] == offsets_E1[e]) return;
  int slot = 0;
  for (int j = 0; j < e; ++j) slot += offsets_E1[j + 1] != offsets_E1[j];
  const int64_t begin = offsets_E1[e];
  out[slot] = b.at(begin, e);
  out[count + slot] = a.at(begin, e);
  out[2 * count + slot] = c.at(begin, e);
}

void run_cublas_grouped(const Family& f, int E, const int32_t* off_host, const int32_t* off_dev,
                        cudaStream_t stream) {
  std::vector<int> m, n, k, lda, ldb, ldc, group_size;
  std::vector<float> alpha, beta;
  std::vector<cublasOperation_t> op_first, op_second;
  for (int e = 0; e < E; ++e) {
    const int rows = off_host[e + 1] - off_host[e];
    if (rows == 0) continue;
    const int M = f.m(rows), K = f.k(rows);
    m.push_back(f.N);
    n.push_back(M);
    k.push_back(K);
    lda.push_back(f.trans_b ? K : f.N);
    ldb.push_back(f.trans_a ? M : K);
    ldc.push_back(f.N);
    alpha.push_back(1.f);
    beta.push_back(f.beta);
    op_first.push_back(f.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
    op_second.push_back(f.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
    group_size.push_back(1);
  }
  const int count = int(m.size());
  if (count == 0) return;
  // Released at once: the next user of the block is ordered after this call on the same stream.
  auto** ptrs = static_cast<const void**>(allocate(3 * size_t(count) * sizeof(void*), "moe: grouped gemm pointers"));
  group_pointers_kernel<<<int(ceil_div(E, 128)), 128, 0, stream>>>(E, count, off_dev, f.a, f.b, f.c, ptrs);
  HYLO_CUDA_LAUNCH_CHECK("group_pointers_kernel");
  with_cublas_handle(stream, [&](cublasHandle_t h) {
    HYLO_CUBLAS_CHECK(cublas_library().gemm_grouped_batched_ex(
        h, op_first.data(), op_second.data(), m.data(), n.data(), k.data(), alpha.data(), ptrs, CUDA_R_16BF,
        lda.data(), ptrs + count, CUDA_R_16BF, ldb.data(), beta.data(), const_cast<void* const*>(ptrs + 2 * count),
        CUDA_R_16BF, ldc.data(), count, group_size.data(), CUBLAS_COMPUTE_32F));
  });
  release(ptrs);
}

// Side streams for the per-expert loop. A fine-grained expert's product is too small to fill the
// GPU (64 experts at d 1024: a 704 x 1024 weight gradient is ~44 output tiles for 132 SMs), so
// consecutive experts go to kSideStreams streams that run concurrently, forked from and joined back
// to the caller's stream by events. Each product is the same call on any stream: results do not
// depend on the interleaving. Created once and kept (hylo drives one GPU per process).
constexpr int kSideStreams = 4;
struct SideStreams {
  cudaStream_t stream[kSideStreams];
  cudaEvent_t fork, join[kSideStreams];
  SideStreams() {
    for (int i = 0; i < kSideStreams; ++i) {
      HYLO_CUDA_CHECK(cudaStreamCreateWithFlags(&stream[i], cudaStreamNonBlocking));
      HYLO_CUDA_CHECK(cudaEventCreateWithFlags(&join[i], cudaEventDisableTiming));
    }
    HYLO_CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  }
};

void run_lt_loop(const Family& f, int E, const int32_t* off_host, cudaStream_t stream) {
  static SideStreams* side = new SideStreams;  // never destroyed: streams must outlive exit-time users
  HYLO_CUDA_CHECK(cudaEventRecord(side->fork, stream));
  for (int i = 0; i < kSideStreams; ++i) HYLO_CUDA_CHECK(cudaStreamWaitEvent(side->stream[i], side->fork));
  int issued = 0;
  for (int e = 0; e < E; ++e) {
    const int64_t begin = off_host[e];
    const int rows = off_host[e + 1] - off_host[e];
    if (rows == 0) continue;
    gemm(f.trans_a, f.trans_b, f.m(rows), f.N, f.k(rows), 1.f, reinterpret_cast<const bf16*>(f.a.at(begin, e)),
         reinterpret_cast<const bf16*>(f.b.at(begin, e)), f.beta,
         reinterpret_cast<bf16*>(const_cast<nv_bf16*>(f.c.at(begin, e))), side->stream[issued++ % kSideStreams]);
  }
  for (int i = 0; i < kSideStreams; ++i) {
    HYLO_CUDA_CHECK(cudaEventRecord(side->join[i], side->stream[i]));
    HYLO_CUDA_CHECK(cudaStreamWaitEvent(stream, side->join[i]));
  }
}

void run_family(const Family& f, int E, const int32_t* off_host, const int32_t* off_dev, cudaStream_t stream) {
  // cuBLAS wants 16-byte aligned bf16 matrices in its grouped call; row starts are aligned when
  // every width is a multiple of 8 and the buffers start aligned (all real shapes). Odd test shapes take the per-expert path,
  // whose kernels/gemm fallback accepts anything.
  const bool aligned = f.N % 8 == 0 && (f.rows_are_k ? f.M : f.K) % 8 == 0 && aligned16(f.a.base) &&
                       aligned16(f.b.base) && aligned16(f.c.base);
  if (g_path.load() == GroupedGemmPath::cublas_grouped && aligned)
    run_cublas_grouped(f, E, off_host, off_dev, stream);
  else
    run_lt_loop(f, E, off_host, stream);
}

Operand operand(const bf16* p, int64_t per_row, int64_t per_expert) { return {as_nv(p), per_row, per_expert}; }

void check_offsets(const char* op, int E, int I, int O, const int32_t* off_host) {
  HYLO_CUDA_REQUIRE(E > 0 && I > 0 && O > 0 && off_host && off_host[0] == 0, "%s: bad shape E=%d I=%d O=%d", op, E,
                    I, O);
  for (int e = 0; e < E; ++e)
    HYLO_CUDA_REQUIRE(off_host[e + 1] >= off_host[e], "%s: offsets decrease at expert %d", op, e);
}

}  // namespace

void set_grouped_gemm_path(GroupedGemmPath path) { g_path.store(path); }
GroupedGemmPath grouped_gemm_path() { return g_path.load(); }

void grouped_linear_forward(int E, int I, int O, const int32_t* offsets_host_E1, const int32_t* offsets_dev_E1,
                            const bf16* x_AI, const bf16* w_EOI, bf16* y_AO, cudaStream_t stream) {
  check_offsets("grouped_linear_forward", E, I, O, offsets_host_E1);
  const Family f{false, true, 0, O, I, false,
                 operand(x_AI, I, 0), operand(w_EOI, 0, int64_t(O) * I), operand(y_AO, O, 0), 0.f};
  run_family(f, E, offsets_host_E1, offsets_dev_E1, stream);
}

void grouped_linear_backward_input(int E, int I, int O, const int32_t* offsets_host_E1,
                                   const int32_t* offsets_dev_E1, const bf16* dy_AO, const bf16* w_EOI, bf16* dx_AI,
                                   cudaStream_t stream) {
  check_offsets("grouped_linear_backward_input", E, I, O, offsets_host_E1);
  const Family f{false, false, 0, I, O, false,
                 operand(dy_AO, O, 0), operand(w_EOI, 0, int64_t(O) * I), operand(dx_AI, I, 0), 0.f};
  run_family(f, E, offsets_host_E1, offsets_dev_E1, stream);
}

void grouped_linear_backward_weight(int E, int I, int O, const int32_t* offsets_host_E1,
                                    const int32_t* offsets_dev_E1, const bf16* dy_AO, const bf16* x_AI, bf16* dw_EOI,
                                    bool accumulate, cudaStream_t stream) {
  check_offsets("grouped_linear_backward_weight", E, I, O, offsets_host_E1);
  const int64_t slice = int64_t(O) * I;
  // An expert without rows still owns a gradient slot: zero, not garbage (the products skip it).
  if (!accumulate)
    for (int e = 0; e < E; ++e)
      if (offsets_host_E1[e + 1] == offsets_host_E1[e])
        HYLO_CUDA_CHECK(cudaMemsetAsync(as_nv(dw_EOI) + e * slice, 0, size_t(slice) * 2, stream));
  const Family f{true, false, O, I, 0, true,
                 operand(dy_AO, O, 0), operand(x_AI, I, 0), operand(dw_EOI, 0, slice), accumulate ? 1.f : 0.f};
  run_family(f, E, offsets_host_E1, offsets_dev_E1, stream);
}

}  // namespace hylo::cuda
