// Host-side facts about the device that kernels' launches read (common.cuh).
#include "kernels/common/common.cuh"

namespace hylo::cuda {

int sm_count() {
  static const int sms = [] {
    int device = 0, count = 0;
    HYLO_CUDA_CHECK(cudaGetDevice(&device));
    HYLO_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
    return count;
  }();
  return sms;
}

}  // namespace hylo::cuda
