#include "core/cuda/cublas_library.h"

#include <dlfcn.h>

#include <string>

#include "core/error.h"

namespace hylo::cuda {
namespace {

// An opened library and its soname, for the errors that name it.
struct OpenedLibrary {
  void* handle;
  std::string soname;
};

// The soname of the major version hylo was built against, found the way the dynamic linker would
// find a linked one (LD_LIBRARY_PATH, the executable's run path, the system's cache), then in the
// toolkit's library folder of the build (HYLO_CUDA_LIBRARY_DIR, set by CMake).
OpenedLibrary open_library(const std::string& stem) {
  const std::string soname = stem + ".so." + std::to_string(CUBLAS_VER_MAJOR);
  if (void* handle = dlopen(soname.c_str(), RTLD_NOW | RTLD_GLOBAL)) return {handle, soname};
  const std::string first_error = dlerror();
  const std::string in_toolkit = std::string(HYLO_CUDA_LIBRARY_DIR) + "/" + soname;
  if (void* handle = dlopen(in_toolkit.c_str(), RTLD_NOW | RTLD_GLOBAL)) return {handle, soname};
  HYLO_FAIL("cannot open {} for CUDA GEMMs: {} (nor {}); add the CUDA toolkit's lib64 folder to LD_LIBRARY_PATH",
            soname, first_error, in_toolkit);
}

template <typename Function>
void resolve(const OpenedLibrary& library, const char* symbol, Function& into) {
  void* address = dlsym(library.handle, symbol);
  if (!address) HYLO_FAIL("{} has no {}: hylo was built against another cuBLAS", library.soname, symbol);
  into = reinterpret_cast<Function>(address);
}

// The symbol after cublas_v2.h's macros (cublasCreate is cublasCreate_v2).
#define HYLO_SYMBOL_NAME(name) HYLO_SYMBOL_NAME_EXPANDED(name)
#define HYLO_SYMBOL_NAME_EXPANDED(name) #name

CublasLibrary open_cublas() {
  CublasLibrary lib{};
  // Lt first: libcublas needs it, and opens the same copy.
  const OpenedLibrary lt = open_library("libcublasLt");
  resolve(lt, HYLO_SYMBOL_NAME(cublasLtCreate), lib.lt_create);
  resolve(lt, HYLO_SYMBOL_NAME(cublasLtMatmul), lib.lt_matmul);
  resolve(lt, HYLO_SYMBOL_NAME(cublasLtMatmulDescCreate), lib.lt_matmul_desc_create);
  resolve(lt, HYLO_SYMBOL_NAME(cublasLtMatmulDescInit_internal), lib.lt_matmul_desc_init_internal);
  resolve(lt, HYLO_SYMBOL_NAME(cublasLtMatmulDescSetAttribute), lib.lt_matmul_desc_set_attribute);
  resolve(lt, HYLO_SYMBOL_NAME(cublasLtMatrixLayoutInit_internal), lib.lt_matrix_layout_init_internal);
  resolve(lt, HYLO_SYMBOL_NAME(cublasLtMatrixLayoutSetAttribute), lib.lt_matrix_layout_set_attribute);
  resolve(lt, HYLO_SYMBOL_NAME(cublasLtMatmulPreferenceCreate), lib.lt_matmul_preference_create);
  resolve(lt, HYLO_SYMBOL_NAME(cublasLtMatmulPreferenceSetAttribute), lib.lt_matmul_preference_set_attribute);
  resolve(lt, HYLO_SYMBOL_NAME(cublasLtMatmulPreferenceDestroy), lib.lt_matmul_preference_destroy);
  resolve(lt, HYLO_SYMBOL_NAME(cublasLtMatmulAlgoGetHeuristic), lib.lt_matmul_algo_get_heuristic);
  const OpenedLibrary blas = open_library("libcublas");
  resolve(blas, HYLO_SYMBOL_NAME(cublasCreate), lib.create);
  resolve(blas, HYLO_SYMBOL_NAME(cublasSetStream), lib.set_stream);
  resolve(blas, HYLO_SYMBOL_NAME(cublasGetStatusString), lib.get_status_string);
  resolve(blas, HYLO_SYMBOL_NAME(cublasGemmEx), lib.gemm_ex);
  resolve(blas, HYLO_SYMBOL_NAME(cublasGemmStridedBatchedEx), lib.gemm_strided_batched_ex);
  resolve(blas, HYLO_SYMBOL_NAME(cublasGemmGroupedBatchedEx), lib.gemm_grouped_batched_ex);
  return lib;
}

}  // namespace

const CublasLibrary& cublas_library() {
  static const CublasLibrary library = open_cublas();
  return library;
}

}  // namespace hylo::cuda
