// Return-code checks for the CUDA runtime, cuBLAS/cuBLASLt and kernel launches. Every failure
// throws hylo::Error whose message names the failing call, its source location and the library's
// own error string, e.g.
//   "cudaMalloc(&p, bytes) failed at kernels/gemm/gemm.cu:88: out of memory".
//
// This header deliberately pulls in no fmt and no core/error.h: nvcc 13 cannot compile fmt 9's
// consteval format strings, and kernels/*.cu must include it. The throwing functions live in
// check.cpp, which g++ compiles.
#pragma once
#include <cuda_runtime_api.h>

namespace hylo::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);
// `status` is a cublasStatus_t (cuBLAS and cuBLASLt share it); int keeps cublas headers out.
[[noreturn]] void throw_cublas_error(int status, const char* call, const char* file, int line);
// printf-style message for argument checks in code that nvcc compiles.
[[noreturn]] void throw_invalid_argument(const char* file, int line, const char* format, ...)
    __attribute__((format(printf, 3, 4)));

}  // namespace hylo::cuda

#define HYLO_CUDA_CHECK(call)                                                             \
  do {                                                                                    \
    cudaError_t hylo_cuda_err_ = (call);                                                  \
    if (hylo_cuda_err_ != cudaSuccess)                                                    \
      ::hylo::cuda::throw_cuda_error(hylo_cuda_err_, #call, __FILE__, __LINE__);          \
  } while (0)

#define HYLO_CUBLAS_CHECK(call)                                                           \
  do {                                                                                    \
    int hylo_cublas_status_ = static_cast<int>(call);                                     \
    if (hylo_cublas_status_ != 0)                                                         \
      ::hylo::cuda::throw_cublas_error(hylo_cublas_status_, #call, __FILE__, __LINE__);   \
  } while (0)

// After a <<<...>>> launch: a bad configuration is reported at the launch site, not at the next
// unrelated synchronising call. cudaGetLastError also clears non-sticky errors.
#define HYLO_CUDA_LAUNCH_CHECK(kernel_name)                                               \
  do {                                                                                    \
    cudaError_t hylo_cuda_err_ = cudaGetLastError();                                      \
    if (hylo_cuda_err_ != cudaSuccess)                                                    \
      ::hylo::cuda::throw_cuda_error(hylo_cuda_err_, "launch of " kernel_name, __FILE__,  \
                                     __LINE__);                                           \
  } while (0)

// HYLO_CUDA_REQUIRE(cond, "printf format", args...): argument checks in host code of .cu files.
#define HYLO_CUDA_REQUIRE(cond, ...)                                                      \
  do {                                                                                    \
    if (!(cond))                                                                          \
      ::hylo::cuda::throw_invalid_argument(__FILE__, __LINE__, __VA_ARGS__);              \
  } while (0)
