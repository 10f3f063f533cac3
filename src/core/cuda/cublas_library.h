// cuBLAS and cuBLASLt, opened at the first GEMM instead of linked.
//
// Linking libcublasLt alone costs every process 0.31-0.40 s and ~217 MB of resident memory before
// main (its static initialisers: a program that only prints, linked against it, measured on the dev
// box), so every hylo command paid it, CPU-only ones included: `data prepare`, `eval --device cpu`,
// the hundreds of processes the CLI tests start. Opened here on first use, only CUDA GEMMs pay.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

namespace hylo::cuda {

// The entry points hylo calls, resolved from the cuBLAS of the toolkit hylo was built against.
// The names are the libraries' own with the prefix dropped (cublas_v2.h's macros map create and
// set_stream to their _v2 symbols). The two *_init_internal are what the headers' inline
// cublasLtMatrixLayoutInit / cublasLtMatmulDescInit call: pass sizeof the object as `size`.
struct CublasLibrary {
  decltype(&cublasCreate) create;
  decltype(&cublasSetStream) set_stream;
  decltype(&cublasGetStatusString) get_status_string;
  // The exported ones, taking cublasComputeType_t (C++ also sees inline overloads taking cudaDataType).
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  cublasStatus_t (*gemm_strided_batched_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                            const void*, const void*, cudaDataType, int, long long, const void*,
                                            cudaDataType, int, long long, const void*, void*, cudaDataType, int,
                                            long long, int, cublasComputeType_t, cublasGemmAlgo_t);
  decltype(&cublasGemmGroupedBatchedEx) gemm_grouped_batched_ex;
  decltype(&cublasLtCreate) lt_create;
  decltype(&cublasLtMatmul) lt_matmul;
  decltype(&cublasLtMatmulDescCreate) lt_matmul_desc_create;
  decltype(&cublasLtMatmulDescInit_internal) lt_matmul_desc_init_internal;
  decltype(&cublasLtMatmulDescSetAttribute) lt_matmul_desc_set_attribute;
  decltype(&cublasLtMatrixLayoutInit_internal) lt_matrix_layout_init_internal;
  decltype(&cublasLtMatrixLayoutSetAttribute) lt_matrix_layout_set_attribute;
  decltype(&cublasLtMatmulPreferenceCreate) lt_matmul_preference_create;
  decltype(&cublasLtMatmulPreferenceSetAttribute) lt_matmul_preference_set_attribute;
  decltype(&cublasLtMatmulPreferenceDestroy) lt_matmul_preference_destroy;
  decltype(&cublasLtMatmulAlgoGetHeuristic) lt_matmul_algo_get_heuristic;
};

// Opens libcublasLt and libcublas on the first call (thread-safe) and returns their entry points;
// throws hylo::Error naming the library and the loader's message when one cannot be opened or
// lacks an entry point.
const CublasLibrary& cublas_library();

}  // namespace hylo::cuda
