// Parameter and FLOP accounting shared by `hylo params`, progress lines and benchmarks.
//
// Training FLOPs per token = 6 * (matmul parameters touched per token, LM head included; in MoE
//                               layers the router, top_k routed experts and the shared experts)
//                          + 12 * sum over layers of (H * hd * mean visited keys per query),
// i.e. forward 2 FLOPs per multiply-add, backward twice the forward. MFU divides achieved
// FLOP/s by the device's dense bf16 peak.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "nn/model_config.h"
#include "attn/mask.h"

namespace hylo {

struct ParamCount {
  std::string component;
  int64_t stored = 0;
  int64_t active = 0;  // per token (MoE: routed experts only)
};

// By component, then a final "total" row. Components: embedding, attention, ffn (dense layers),
// moe_router, moe_experts (active = top_k of E), moe_shared, norms, lm_head (untied only); rows
// that would be zero are left out.
std::vector<ParamCount> count_parameters(const ModelConfig& config);
// What one rank stores under expert parallelism over `ep_ranks`: 1 / ep_ranks of the experts and
// all the rest.
int64_t parameters_per_rank(const ModelConfig& config, int ep_ranks);
// Bytes of CUDA training state per rank on `ranks` ranks with experts over groups of `ep_ranks`:
// the bf16 weights and gradients of what the rank holds (4 bytes per parameter) and the fp32
// master and AdamW moments of what it updates (12 bytes per parameter): everything it holds, or
// under ZeRO-1 its 1 / ranks of the replicated parameters and 1 / (ranks / ep_ranks) of its
// experts. ZeRO-1's padding (parallel/zero.h) is left out.
double training_state_bytes_per_rank(const ModelConfig& config, int ranks, int ep_ranks, bool zero1);
// Mean number of keys a query attends over a sequence of length T.
double mean_visited_keys(const AttnMask& mask, int64_t T);
double train_flops_per_token(const ModelConfig& config, int64_t seq_len);
// Dense bf16 tensor-core peak of the device we run on, or 0 when unknown (CPU).
double peak_flops(bool cuda);

}  // namespace hylo
