// `hylo bench attention`: times the CUDA attention kernels (forward, backward, forward+backward)
// for one or more mask kinds, head dims and sequence lengths, and reports TFLOP/s counting the
// visited (allowed) pairs, as the PyTorch peers in shared/peers/torch_ref.py do: forward
// 4 * B * H * D * pairs, forward+backward 3.5x that. Also prints the dense-equivalent rate
// (T * T pairs) for comparison with dense kernels.
#pragma once
#include <string>
#include <vector>

namespace hylo {

// Flags: --kind pbb|swa|full (comma lists sweep) --block 512 --bridge 128 --window 512
// --T 4096 (comma list) --hd 128 (comma list) --B 4 --H 16 --Hkv 16 --iters 20 --warmup 3
// --json PATH. Returns 0 on success; throws hylo::Error on bad flags or a build without CUDA.
int run_bench_attention(const std::vector<std::string>& args);

}  // namespace hylo
