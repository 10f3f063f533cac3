#include "train/flops.h"

#include "nn/transformer.h"

namespace hylo {

std::vector<ParamCount> count_parameters(const ModelConfig& c) {
  const int64_t D = c.d_model, hd = c.head_dim(), H = c.n_heads, Hkv = c.kv_heads();
  const int64_t L = c.n_layers, V = c.vocab_size, F = c.ffn_hidden_size();
  const int64_t attn = L * (2 * H * hd * D + 2 * Hkv * hd * D) + (c.qk_norm ? L * 2 * hd : 0);
  const int64_t ffn = L * 3 * F * D;
  const int64_t norms = (2 * L + 1) * D;
  std::vector<ParamCount> rows{{"embedding", V * D, V * D}, {"attention", attn, attn}, {"ffn", ffn, ffn},
                               {"norms", norms, norms}};
  if (!c.tie_embeddings) rows.push_back({"lm_head", V * D, V * D});
  ParamCount total{"total"};
  for (const auto& r : rows) {
    total.stored += r.stored;
    total.active += r.active;
  }
  rows.push_back(total);
  return rows;
}

double mean_visited_keys(const AttnMask& mask, int64_t T) {
  double keys = 0;
  for (int64_t t = 0; t < T; ++t) keys += double(t - mask.lowest_key(t) + 1);
  return T ? keys / double(T) : 0.0;
}

double train_flops_per_token(const ModelConfig& c, int64_t seq_len) {
  const int64_t D = c.d_model, hd = c.head_dim(), H = c.n_heads, Hkv = c.kv_heads();
  const double matmul = double(c.n_layers) * double(2 * H * hd * D + 2 * Hkv * hd * D + 3 * c.ffn_hidden_size() * D) +
                        double(c.vocab_size) * double(D);
  double attention = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    const AttnMask mask = mask_for(c.layer_attn(l));
    attention += 12.0 * double(H * hd) * mean_visited_keys(mask, seq_len);
  }
  return 6.0 * matmul + attention;
}

double peak_flops(bool cuda) { return cuda ? 989.4e12 : 0.0; }  // H100/H200 SXM dense bf16

}  // namespace hylo
