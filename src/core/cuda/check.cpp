// Out-of-line throwers for core/cuda/check.h (compiled by g++, so fmt is available here).
#include "core/cuda/check.h"

#include <cstdarg>
#include <cstdio>

#include "core/cuda/cublas_library.h"
#include "core/error.h"

namespace hylo::cuda {

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  throw Error(fmt::format("{} failed at {}:{}: {} ({})", call, file, line, cudaGetErrorString(err),
                          cudaGetErrorName(err)),
              file, line);
}

void throw_cublas_error(int status, const char* call, const char* file, int line) {
  throw Error(fmt::format("{} failed at {}:{}: {} (cublasStatus {})", call, file, line,
                          cublas_library().get_status_string(static_cast<cublasStatus_t>(status)), status),
              file, line);
}

void throw_invalid_argument(const char* file, int line, const char* format, ...) {
  char message[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(message, sizeof message, format, args);
  va_end(args);
  throw Error(message, file, line);
}

}  // namespace hylo::cuda
