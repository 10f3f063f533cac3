#include "nn/flops.h"

#include "nn/transformer.h"

namespace hylo {

namespace {

// Per-layer FFN parameter counts: what is stored and what one token multiplies through.
struct FfnParams {
  int64_t dense = 0, router = 0, experts_stored = 0, experts_active = 0, shared = 0;
};

FfnParams ffn_params(const ModelConfig& c) {
  const int64_t D = c.d_model;
  FfnParams p;
  for (int l = 0; l < c.n_layers; ++l) {
    if (!c.layer_is_moe(l)) {
      p.dense += 3 * int64_t(c.ffn_hidden_size()) * D;
      continue;
    }
    const int64_t expert = 3 * int64_t(c.expert_hidden_size()) * D;  // w_in (2F, D) + w_out (D, F)
    p.router += int64_t(c.moe.experts) * D;
    p.experts_stored += c.moe.experts * expert;
    p.experts_active += c.moe.top_k * expert;
    p.shared += c.moe.shared_experts * expert;
  }
  return p;
}

}  // namespace

std::vector<ParamCount> count_parameters(const ModelConfig& c) {
  const int64_t D = c.d_model, hd = c.head_dim(), H = c.n_heads, Hkv = c.kv_heads();
  const int64_t L = c.n_layers, V = c.vocab_size;
  const int64_t attn = L * (2 * H * hd * D + 2 * Hkv * hd * D) + (c.qk_norm ? L * 2 * hd : 0);
  const FfnParams f = ffn_params(c);
  const int64_t norms = (2 * L + 1) * D;
  std::vector<ParamCount> rows{{"embedding", V * D, V * D}, {"attention", attn, attn}};
  if (f.dense) rows.push_back({"ffn", f.dense, f.dense});
  // MoE rows: every token runs the router, its top_k routed experts and all shared experts.
  if (f.router) rows.push_back({"moe_router", f.router, f.router});
  if (f.experts_stored) rows.push_back({"moe_experts", f.experts_stored, f.experts_active});
  if (f.shared) rows.push_back({"moe_shared", f.shared, f.shared});
  rows.push_back({"norms", norms, norms});
  if (!c.tie_embeddings) rows.push_back({"lm_head", V * D, V * D});
  ParamCount total{"total"};
  for (const auto& r : rows) {
    total.stored += r.stored;
    total.active += r.active;
  }
  rows.push_back(total);
  return rows;
}

namespace {

int64_t expert_parameters(const std::vector<ParamCount>& rows) {
  for (const ParamCount& row : rows)
    if (row.component == "moe_experts") return row.stored;
  return 0;
}

}  // namespace

int64_t parameters_per_rank(const ModelConfig& config, int ep_ranks) {
  const std::vector<ParamCount> rows = count_parameters(config);
  const int64_t experts = expert_parameters(rows);
  return rows.back().stored - experts + experts / ep_ranks;
}

double training_state_bytes_per_rank(const ModelConfig& config, int ranks, int ep_ranks, bool zero1) {
  const double held = double(parameters_per_rank(config, ep_ranks));
  const double experts = double(expert_parameters(count_parameters(config))) / ep_ranks, replicated = held - experts;
  // Under ZeRO-1 the replicated parameters are shared out over all ranks, the experts over their replicas.
  const double updated = zero1 ? replicated / ranks + experts / (double(ranks) / ep_ranks) : held;
  return 4 * held + 12 * updated;
}

double mean_visited_keys(const AttnMask& mask, int64_t T) {
  return T ? double(visited_pairs(mask, int(T))) / double(T) : 0.0;
}

double train_flops_per_token(const ModelConfig& c, int64_t seq_len) {
  const int64_t D = c.d_model, hd = c.head_dim(), H = c.n_heads, Hkv = c.kv_heads();
  // MoE layers count only the parameters a token actually multiplies (router, top_k experts, shared).
  const FfnParams f = ffn_params(c);
  const double matmul = double(c.n_layers) * double(2 * H * hd * D + 2 * Hkv * hd * D) +
                        double(f.dense + f.router + f.experts_active + f.shared) + double(c.vocab_size) * double(D);
  double attention = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    const AttnMask mask = mask_for(c.layer_attn(l));
    attention += 12.0 * double(H * hd) * mean_visited_keys(mask, seq_len);
  }
  return 6.0 * matmul + attention;
}

double peak_flops(bool cuda) { return cuda ? 989.4e12 : 0.0; }  // H100/H200 SXM dense bf16

}  // namespace hylo
