// `hylo bench decode`: one layer's decode attention core (one new token per sequence) on the CUDA
// decode kernels, for the three local-attention caches of the PBB-vs-SWA comparison (SPEC §1, §5):
//   Flash-PBB  b slots, slot t mod b; at offset r it reads r+1 + max(0, w-1-r) keys. Reported as
//              the mean over all b block offsets.
//   Flash-SWA  W-slot ring: W keys every step.
//   linear SWA 2W slots in position order (a FlashAttention-style cache): W keys every step plus a
//              compaction (W-1 rows moved) every W+1 steps, averaged over that period.
// Prints µs/step, tokens/s (batch / step time), allocated KV bytes per layer, PBB/SWA throughput
// ratio and achieved bandwidth counting the live KV bytes read.
#pragma once
#include <string>
#include <vector>

namespace hylo {

// Flags: --batch 16,64 --hd 64,128 (comma lists sweep) --block 512 --bridge 128 --window 512
// --H 16 --Hkv 16 --iters 10 --warmup 2 --json PATH. Returns 0 on success; throws hylo::Error on
// bad flags or a build without CUDA.
int run_bench_decode(const std::vector<std::string>& args);

}  // namespace hylo
