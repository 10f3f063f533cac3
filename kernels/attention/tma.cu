// Host side of tma.cuh: tensor maps for the attention kernels' 64-row tile copies.
#include "kernels/attention/tma.cuh"

#if HYLO_WGMMA
#include <cudaTypedefs.h>

namespace hylo::cuda::attn {
namespace {

// cuTensorMapEncodeTiled lives in the driver library, which hylo does not link: the runtime hands
// out its entry point (once per process).
PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* entry = nullptr;
    cudaDriverEntryPointQueryResult found{};
    HYLO_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &entry, 12000, cudaEnableDefault,
                                                     &found));
    HYLO_CUDA_REQUIRE(found == cudaDriverEntryPointSuccess && entry != nullptr,
                      "attention (CUDA): the driver has no cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(entry);
  }();
  return fn;
}

}  // namespace

CUtensorMap make_head_tile_map(const void* base, int B, int T, int H, int D) {
  HYLO_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(base) % 16 == 0,
                    "attention (CUDA): tensor at %p is not 16-byte aligned (the tile copies need it)", base);
  const cuuint64_t dims[4] = {cuuint64_t(D), cuuint64_t(H), cuuint64_t(T), cuuint64_t(B)};
  const cuuint64_t strides[3] = {cuuint64_t(D) * 2, cuuint64_t(H) * D * 2, cuuint64_t(T) * H * D * 2};  // bytes
  const cuuint32_t box[4] = {64, 1, 64, 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  CUtensorMap map;
  const CUresult rc = encode_tiled()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, const_cast<void*>(base), dims,
                                     strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                     CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  HYLO_CUDA_REQUIRE(rc == CUDA_SUCCESS, "attention (CUDA): cuTensorMapEncodeTiled failed (%d) for B=%d T=%d H=%d D=%d",
                    int(rc), B, T, H, D);
  return map;
}

CUtensorMap make_row_map(const float* base, int rows, int row_len) {
  HYLO_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(base) % 16 == 0 && row_len % 4 == 0,
                    "attention (CUDA): rows at %p of %d floats are not 16-byte aligned", static_cast<const void*>(base),
                    row_len);
  const cuuint64_t dims[2] = {cuuint64_t(row_len), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(row_len) * 4};  // bytes
  const cuuint32_t box[2] = {64, 1};
  const cuuint32_t element_strides[2] = {1, 1};
  CUtensorMap map;
  const CUresult rc = encode_tiled()(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, const_cast<float*>(base), dims, strides,
                                     box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                     CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  HYLO_CUDA_REQUIRE(rc == CUDA_SUCCESS, "attention (CUDA): cuTensorMapEncodeTiled failed (%d) for %d rows of %d",
                    int(rc), rows, row_len);
  return map;
}

}  // namespace hylo::cuda::attn
#endif  // HYLO_WGMMA
