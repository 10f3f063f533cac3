// cuBLASLt wrapper for row-major bf16 products (semantics in gemm.h).
//
// Row-major to column-major: a row-major (R, C) buffer is the column-major (C, R) matrix, its
// transpose. So C = op(A) op(B) in row-major is C^T = op(B)^T op(A)^T in column-major: we ask
// cuBLAS for a product whose first operand is our B and second our A, with m = N, n = M, and the
// transposition flags carried over unchanged (op(B)^T of the column-major view of B is "no
// transpose" exactly when B was not transposed).
#include <cublasLt.h>
#include <cublas_v2.h>

#include <map>
#include <mutex>
#include <tuple>

#include "core/cuda/allocator.h"
#include "core/cuda/check.h"
#include "core/cuda/cublas_library.h"
#include "kernels/common/common.cuh"
#include "kernels/gemm/gemm.h"

namespace hylo::cuda {
namespace {

// NVIDIA's guidance for Hopper: 32 MiB lets cuBLASLt pick its fastest split strategies.
constexpr size_t kWorkspaceBytes = size_t(32) << 20;

struct PlanKey {
  int device;
  bool trans_a, trans_b;
  int M, N, K, batch;
  int64_t stride_a, stride_b, stride_c;
  cudaDataType_t c_type;
  int align_a, align_b, align_c;  // bytes, <= 16; the heuristic's choice is valid only for these
  cudaDataType_t a_type = CUDA_R_16BF, b_type = CUDA_R_16BF;  // FP8 codes in gemm_fp8
  auto tied() const {
    return std::tie(device, trans_a, trans_b, M, N, K, batch, stride_a, stride_b, stride_c, c_type, align_a, align_b,
                    align_c, a_type, b_type);
  }
  bool operator<(const PlanKey& o) const { return tied() < o.tied(); }  // C++17: no <=> under nvcc -std=c++17
};

struct Plan {
  bool use_lt = false;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

// An expert's row count changes every step, so a product whose M or K is not a leading dimension
// (M when A is not transposed; K when A is transposed and B is not) is planned for that size
// rounded up to a multiple of kPlanBucket: a new size inside a bucket costs no heuristic query and
// the cache stays small, and the choice depends on the bucket alone, so a run and its resume use
// the same algorithm for the same size. Dense shapes are multiples already and are planned exactly.
constexpr int kPlanBucket = 64;
PlanKey plan_key(PlanKey k) {
  if (k.a_type != CUDA_R_16BF) return k;  // FP8 GEMMs are dense and have no fallback: planned exactly
  auto bucket = [](int x) { return (x + kPlanBucket - 1) / kPlanBucket * kPlanBucket; };
  if (!k.trans_a) k.M = bucket(k.M);
  if (k.trans_a && !k.trans_b) k.K = bucket(k.K);
  return k;
}

// Process-lifetime state, never destroyed (handles must not be freed after the runtime shuts
// down at exit).
struct Context {
  std::mutex mutex;
  std::map<int, cublasLtHandle_t> lt;
  std::map<int, cublasHandle_t> blas;
  std::map<std::pair<int, cudaStream_t>, void*> workspace;
  std::map<PlanKey, Plan> plans;
  GemmStats stats;
  bool force_fallback = false;
};

Context& context() {
  static Context* c = new Context;
  return *c;
}

// Largest power of two <= 16 dividing the start of every matrix of the batch.
int alignment(const void* p, int64_t stride_elems, size_t elem_bytes, int batch) {
  uintptr_t bits = reinterpret_cast<uintptr_t>(p);
  if (batch > 1) bits |= uintptr_t(stride_elems) * elem_bytes;
  int align = 16;
  while (align > 1 && bits % align) align /= 2;
  return align;
}

void init_layout(cublasLtMatrixLayoutOpaque_t& layout, cudaDataType_t type, uint64_t rows, uint64_t cols, int64_t ld,
                 int batch, int64_t stride) {
  HYLO_CUBLAS_CHECK(cublas_library().lt_matrix_layout_init_internal(&layout, sizeof layout, type, rows, cols, ld));
  if (batch > 1) {
    int32_t count = batch;
    HYLO_CUBLAS_CHECK(
        cublas_library().lt_matrix_layout_set_attribute(&layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
    HYLO_CUBLAS_CHECK(cublas_library().lt_matrix_layout_set_attribute(&layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                       &stride, sizeof stride));
  }
}

// cuBLAS's A (our B), B (our A) and C for the shape in k, stored shapes in column-major terms: our
// B is (N, K) col-major when not transposed, etc. Built on the stack for every call (cheap).
struct Layouts {
  cublasLtMatrixLayoutOpaque_t a, b, c;
  explicit Layouts(const PlanKey& k) {
    init_layout(a, k.b_type, k.trans_b ? k.K : k.N, k.trans_b ? k.N : k.K, k.trans_b ? k.K : k.N, k.batch,
                k.stride_b);
    init_layout(b, k.a_type, k.trans_a ? k.M : k.K, k.trans_a ? k.K : k.M, k.trans_a ? k.M : k.K, k.batch,
                k.stride_a);
    init_layout(c, k.c_type, k.N, k.M, k.N, k.batch, k.stride_c);
  }
};

Plan make_plan(cublasLtHandle_t lt, const PlanKey& k) {
  Plan plan;
  HYLO_CUBLAS_CHECK(cublas_library().lt_matmul_desc_create(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t op_first = k.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;   // applies to our B
  cublasOperation_t op_second = k.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // applies to our A
  HYLO_CUBLAS_CHECK(
      cublas_library().lt_matmul_desc_set_attribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof op_first));
  HYLO_CUBLAS_CHECK(
      cublas_library().lt_matmul_desc_set_attribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof op_second));
  Layouts l(k);

  cublasLtMatmulPreference_t pref;
  HYLO_CUBLAS_CHECK(cublas_library().lt_matmul_preference_create(&pref));
  uint64_t workspace = kWorkspaceBytes;
  uint32_t align_first = k.align_b, align_second = k.align_a, align_c = k.align_c;
  // In-place split-K reductions accumulate with atomics: excluded so runs are bit-reproducible.
  uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_MASK & ~uint32_t(CUBLASLT_REDUCTION_SCHEME_INPLACE);
  auto prefer = [&](cublasLtMatmulPreferenceAttributes_t attribute, const auto& value) {
    HYLO_CUBLAS_CHECK(cublas_library().lt_matmul_preference_set_attribute(pref, attribute, &value, sizeof value));
  };
  prefer(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace);
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_first);
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_second);
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c);
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_c);
  prefer(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, reductions);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t status =
      cublas_library().lt_matmul_algo_get_heuristic(lt, plan.op, &l.a, &l.b, &l.c, &l.c, pref, 1, &result, &found);
  HYLO_CUBLAS_CHECK(cublas_library().lt_matmul_preference_destroy(pref));
  // NOT_SUPPORTED (or no result) is an answer, not an error: the shape takes the cublasGemmEx path.
  if (status == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
    plan.use_lt = true;
    plan.algo = result.algo;
  } else if (status != CUBLAS_STATUS_NOT_SUPPORTED && status != CUBLAS_STATUS_SUCCESS) {
    HYLO_CUBLAS_CHECK(status);
  }
  return plan;
}

// The plan of key's bucket, made on first use; the caller holds ctx.mutex. Plans are never erased,
// so the reference stays valid after the lock is released.
const Plan& cached_plan(Context& ctx, cublasLtHandle_t lt, const PlanKey& key) {
  const PlanKey planned = plan_key(key);
  auto it = ctx.plans.find(planned);
  if (it == ctx.plans.end()) {
    it = ctx.plans.emplace(planned, make_plan(lt, planned)).first;
    ++ctx.stats.plans;
  }
  return it->second;
}

// What a cublasLtMatmul of `key` on `stream` needs: the device's handle, the stream's workspace
// (both made on first use) and the key's plan. The caller holds ctx.mutex.
struct LtSetup {
  cublasLtHandle_t lt;
  void* workspace;
  const Plan& plan;
};
LtSetup lt_setup(Context& ctx, const PlanKey& key, cudaStream_t stream) {
  cublasLtHandle_t& lt = ctx.lt[key.device];
  if (!lt) HYLO_CUBLAS_CHECK(cublas_library().lt_create(&lt));
  void*& workspace = ctx.workspace[{key.device, stream}];
  if (!workspace) workspace = allocate(kWorkspaceBytes, "workspace: cublasLt");
  return {lt, workspace, cached_plan(ctx, lt, key)};
}

void run_gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const void* A, int64_t stride_a,
              const void* B, int64_t stride_b, float beta, void* C, int64_t stride_c, cudaDataType_t c_type,
              int batch, cudaStream_t stream) {
  HYLO_CUDA_REQUIRE(M >= 0 && N >= 0 && K >= 0 && batch >= 0, "gemm: negative shape M=%d N=%d K=%d batch=%d", M,
                    N, K, batch);
  if (M == 0 || N == 0 || batch == 0) return;
  size_t c_bytes = c_type == CUDA_R_32F ? 4 : 2;
  if (K == 0) {  // empty sum: C = beta * C; only the two values that occur (an empty expert) are handled
    HYLO_CUDA_REQUIRE(beta == 0.f || beta == 1.f, "gemm: K = 0 with beta = %g is not supported", beta);
    if (beta == 0.f)
      for (int i = 0; i < batch; ++i)
        HYLO_CUDA_CHECK(cudaMemsetAsync(static_cast<char*>(C) + i * stride_c * c_bytes, 0, size_t(M) * N * c_bytes,
                                        stream));
    return;
  }

  int device = 0;
  HYLO_CUDA_CHECK(cudaGetDevice(&device));
  PlanKey key{device,   trans_a,  trans_b,  M,      N,
              K,        batch,    batch > 1 ? stride_a : 0, batch > 1 ? stride_b : 0, batch > 1 ? stride_c : 0,
              c_type,   alignment(A, stride_a, 2, batch), alignment(B, stride_b, 2, batch),
              alignment(C, stride_c, c_bytes, batch)};

  Context& ctx = context();
  std::unique_lock lock(ctx.mutex);
  const auto [lt, workspace, plan] = lt_setup(ctx, key, stream);

  if (plan.use_lt && !ctx.force_fallback) {
    lock.unlock();  // plans are never erased, so `plan` stays valid
    Layouts l(key);
    const cublasStatus_t status = cublas_library().lt_matmul(lt, plan.op, &alpha, B, &l.a, A, &l.b, &beta, C, &l.c, C, &l.c,
                                                 &plan.algo, workspace, kWorkspaceBytes, stream);
    lock.lock();
    // A bucket's algorithm may refuse a smaller size inside it: that size takes the fallback.
    if (status != CUBLAS_STATUS_NOT_SUPPORTED) {
      HYLO_CUBLAS_CHECK(status);
      ++ctx.stats.lt_calls;
      return;
    }
  }

  // Fallback: classic cuBLAS takes any leading dimension and alignment.
  ++ctx.stats.fallback_calls;
  lock.unlock();
  const cublasOperation_t op_first = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int ld_first = trans_b ? K : N, ld_second = trans_a ? M : K;
  with_cublas_handle(stream, [&](cublasHandle_t blas) {
    if (batch == 1) {
      HYLO_CUBLAS_CHECK(cublas_library().gemm_ex(blas, op_first, op_second, N, M, K, &alpha, B, CUDA_R_16BF, ld_first, A,
                                     CUDA_R_16BF, ld_second, &beta, C, c_type, N, CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT));
    } else {
      HYLO_CUBLAS_CHECK(cublas_library().gemm_strided_batched_ex(blas, op_first, op_second, N, M, K, &alpha, B, CUDA_R_16BF,
                                                   ld_first, stride_b, A, CUDA_R_16BF, ld_second, stride_a, &beta,
                                                   C, c_type, N, stride_c, batch, CUBLAS_COMPUTE_32F,
                                                   CUBLAS_GEMM_DEFAULT));
    }
  });
}

}  // namespace

void with_cublas_handle(cudaStream_t stream, const std::function<void(cublasHandle_t)>& f) {
  Context& ctx = context();
  std::lock_guard lock(ctx.mutex);
  int device = 0;
  HYLO_CUDA_CHECK(cudaGetDevice(&device));
  cublasHandle_t& blas = ctx.blas[device];
  if (!blas) HYLO_CUBLAS_CHECK(cublas_library().create(&blas));
  HYLO_CUBLAS_CHECK(cublas_library().set_stream(blas, stream));
  f(blas);
}

void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const bf16* A, const bf16* B, float beta,
          bf16* C, cudaStream_t stream) {
  run_gemm(trans_a, trans_b, M, N, K, alpha, A, 0, B, 0, beta, C, 0, CUDA_R_16BF, 1, stream);
}

void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const bf16* A, const bf16* B, float beta,
          float* C, cudaStream_t stream) {
  run_gemm(trans_a, trans_b, M, N, K, alpha, A, 0, B, 0, beta, C, 0, CUDA_R_32F, 1, stream);
}

void gemm_strided_batched(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const bf16* A,
                          int64_t stride_a, const bf16* B, int64_t stride_b, float beta, bf16* C, int64_t stride_c,
                          int batch, cudaStream_t stream) {
  run_gemm(trans_a, trans_b, M, N, K, alpha, A, stride_a, B, stride_b, beta, C, stride_c, CUDA_R_16BF, batch,
           stream);
}

void gemm_fp8(int M, int N, int K, const uint8_t* A, Fp8Format a_format, const float* a_scale_inv, const uint8_t* B,
              Fp8Format b_format, const float* b_scale_inv, float beta, bf16* C, cudaStream_t stream) {
  auto type = [](Fp8Format f) { return f == Fp8Format::e4m3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; };
  HYLO_CUDA_REQUIRE(M % 16 == 0 && N % 16 == 0 && K % 16 == 0 && M > 0 && N > 0 && K > 0,
                    "gemm_fp8: M=%d N=%d K=%d must be positive multiples of 16 (cuBLASLt's FP8 GEMMs); "
                    "use train.precision=bf16 for this model or batch shape", M, N, K);
  HYLO_CUDA_REQUIRE(aligned16(A) && aligned16(B) && aligned16(C), "gemm_fp8: operands must be 16-byte aligned");
  HYLO_CUDA_REQUIRE(!(a_format == Fp8Format::e5m2 && b_format == Fp8Format::e5m2),
                    "gemm_fp8: e5m2 x e5m2 has no cuBLASLt kernel");
  int device = 0;
  HYLO_CUDA_CHECK(cudaGetDevice(&device));
  PlanKey key{device, false, true, M, N, K, 1, 0, 0, 0, CUDA_R_16BF, 16, 16, 16, type(a_format), type(b_format)};

  Context& ctx = context();
  std::unique_lock lock(ctx.mutex);
  const auto [lt, workspace, plan] = lt_setup(ctx, key, stream);
  HYLO_CUDA_REQUIRE(plan.use_lt, "gemm_fp8: cuBLASLt has no FP8 algorithm for M=%d N=%d K=%d", M, N, K);
  lock.unlock();

  // The plan's descriptor is shared; the scale pointers are this call's, so it gets its own.
  cublasLtMatmulDescOpaque_t desc;
  HYLO_CUBLAS_CHECK(cublas_library().lt_matmul_desc_init_internal(&desc, sizeof desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_first = CUBLAS_OP_T, op_second = CUBLAS_OP_N;  // cuBLAS's A is our B (N, K)
  auto set = [&](cublasLtMatmulDescAttributes_t attribute, const auto& value) {
    HYLO_CUBLAS_CHECK(cublas_library().lt_matmul_desc_set_attribute(&desc, attribute, &value, sizeof value));
  };
  set(CUBLASLT_MATMUL_DESC_TRANSA, op_first);
  set(CUBLASLT_MATMUL_DESC_TRANSB, op_second);
  set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, b_scale_inv);
  set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, a_scale_inv);
  Layouts l(key);
  const float alpha = 1.0f;
  const cublasStatus_t status = cublas_library().lt_matmul(lt, &desc, &alpha, B, &l.a, A, &l.b, &beta, C, &l.c, C, &l.c,
                                               &plan.algo, workspace, kWorkspaceBytes, stream);
  HYLO_CUDA_REQUIRE(status != CUBLAS_STATUS_NOT_SUPPORTED, "gemm_fp8: cuBLASLt refused M=%d N=%d K=%d", M, N, K);
  HYLO_CUBLAS_CHECK(status);
  lock.lock();
  ++ctx.stats.lt_calls;
}

void gemm_force_fallback(bool on) {
  Context& ctx = context();
  std::lock_guard lock(ctx.mutex);
  ctx.force_fallback = on;
}

GemmStats gemm_stats() {
  Context& ctx = context();
  std::lock_guard lock(ctx.mutex);
  return ctx.stats;
}

}  // namespace hylo::cuda
