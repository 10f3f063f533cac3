#include "nn/transformer.h"

#include <algorithm>
#include <cmath>

#include "ops/ops.h"

namespace hylo {

AttnMask mask_for(const AttnKindConfig& kind) {
  if (kind.kind == "swa") return {MaskKind::swa, kind.window, 0, 0};
  if (kind.kind == "pbb") return {MaskKind::pbb, 0, kind.block, kind.bridge};
  HYLO_CHECK(kind.kind == "full", "unknown attention kind '{}' (expected full, swa or pbb)", kind.kind);
  return {};
}

Transformer::Transformer(const ModelConfig& c, uint64_t seed) : config_(c) {
  const int64_t D = c.d_model, hd = c.head_dim(), H = c.n_heads;
  const int64_t Hkv = c.kv_heads();
  const int64_t F = c.ffn_hidden_size();
  const double std = c.init_std;
  // GPT-2 style: projections that write into the residual stream are scaled down with depth.
  const double out_std = std / std::sqrt(2.0 * c.n_layers);

  embed_VD = make_parameter(params_, "embed", {c.vocab_size, D}, std, false, seed);
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "blocks." + std::to_string(l) + ".";
    Block b;
    const AttnKindConfig& kind = c.layer_attn(l);
    b.attn_norm = make_parameter(params_, p + "attn_norm", {D}, 0.0, false, seed);
    b.attn.wq_QD = make_parameter(params_, p + "attn.wq", {H * hd, D}, std, true, seed);
    b.attn.wk_KD = make_parameter(params_, p + "attn.wk", {Hkv * hd, D}, std, true, seed);
    b.attn.wv_KD = make_parameter(params_, p + "attn.wv", {Hkv * hd, D}, std, true, seed);
    b.attn.wo_DQ = make_parameter(params_, p + "attn.wo", {D, H * hd}, out_std, true, seed);
    if (c.qk_norm) {
      b.attn.q_norm = make_parameter(params_, p + "attn.q_norm", {hd}, 0.0, false, seed);
      b.attn.k_norm = make_parameter(params_, p + "attn.k_norm", {hd}, 0.0, false, seed);
    }
    b.attn.mask = mask_for(kind);
    b.attn.rope_theta = kind.rope_theta;
    b.attn.nope = kind.nope;
    b.ffn_norm = make_parameter(params_, p + "ffn_norm", {D}, 0.0, false, seed);
    if (c.layer_is_moe(l)) {
      b.moe = std::make_unique<MoeFeedForward>(params_, l, c, seed);
    } else {
      b.ffn.w_in_2FD = make_parameter(params_, p + "ffn.w_in", {2 * F, D}, std, true, seed);
      b.ffn.w_out_DF = make_parameter(params_, p + "ffn.w_out", {D, F}, out_std, true, seed);
    }
    blocks_.push_back(std::move(b));
  }
  final_norm = make_parameter(params_, "final_norm", {D}, 0.0, false, seed);
  head_VD = c.tie_embeddings ? embed_VD : make_parameter(params_, "head", {c.vocab_size, D}, std, true, seed);
}

Transformer::AttentionInputs Transformer::attention_inputs(int layer, const Var& x_ND, int B, int T,
                                                           int pos_offset) const {
  const Block& b = blocks_.at(size_t(layer));
  const ModelConfig& c = config_;
  const int64_t hd = c.head_dim(), H = c.n_heads, Hkv = c.kv_heads();
  const double eps = c.norm_eps;

  Var h_ND = rmsnorm(x_ND, b.attn_norm, eps);
  Var q = reshape(block_linear(layer, BlockLinear::q, h_ND, b.attn.wq_QD), {B, T, H, hd});
  Var k = reshape(block_linear(layer, BlockLinear::k, h_ND, b.attn.wk_KD), {B, T, Hkv, hd});
  Var v = reshape(block_linear(layer, BlockLinear::v, h_ND, b.attn.wv_KD), {B, T, Hkv, hd});
  if (c.qk_norm) {
    q = reshape(rmsnorm(reshape(q, {-1, hd}), b.attn.q_norm, eps), {B, T, H, hd});
    k = reshape(rmsnorm(reshape(k, {-1, hd}), b.attn.k_norm, eps), {B, T, Hkv, hd});
  }
  if (!b.attn.nope) {
    q = rope(q, b.attn.rope_theta, pos_offset);
    k = rope(k, b.attn.rope_theta, pos_offset);
  }
  return {q, k, v};
}

Var Transformer::attention_residual(int layer, const Var& x_ND, const Var& a_NQ) const {
  return residual_add(x_ND, block_linear(layer, BlockLinear::o, a_NQ, blocks_.at(size_t(layer)).attn.wo_DQ));
}

Var Transformer::ffn_residual(int layer, const Var& x, std::vector<Var>* aux) const {
  const Block& b = blocks_.at(size_t(layer));
  Var g = rmsnorm(x, b.ffn_norm, config_.norm_eps);
  if (b.moe) {
    Var layer_aux;
    Var y = b.moe->forward(g, aux ? &layer_aux : nullptr);
    if (aux && layer_aux.defined()) aux->push_back(layer_aux);
    return residual_add(x, y);  // no backward reads the combine output (see ops/moe.cpp)
  }
  Var hidden = swiglu(block_linear(layer, BlockLinear::ffn_in, g, b.ffn.w_in_2FD));
  return residual_add(x, block_linear(layer, BlockLinear::ffn_out, hidden, b.ffn.w_out_DF));
}

void Transformer::enable_fp8(const Fp8Recipe& recipe, Device device) {
  int linears = 0;
  fp8_linear_base_.clear();
  for (const Block& b : blocks_) {
    fp8_linear_base_.push_back(linears);
    linears += b.moe ? 4 : 6;  // q k v o (+ FFN in, out when dense)
  }
  fp8_ = std::make_unique<Fp8State>(recipe, linears, device);
  for (int base : fp8_linear_base_) fp8_->share_input(base + int(BlockLinear::q), 3);  // q, k, v read one normed x
}

Var Transformer::block_linear(int layer, BlockLinear slot, const Var& x, const Var& w) const {
  if (!fp8_) return linear(x, w);
  return fp8_linear(x, w, *fp8_, fp8_linear_base_.at(size_t(layer)) + int(slot));
}

Var Transformer::block_forward(int layer, const Var& x_ND, int B, int T, std::vector<Var>* aux,
                               const std::function<void(const Var& k, const Var& v)>& on_kv) const {
  const int64_t Q = int64_t(config_.n_heads) * config_.head_dim();
  const AttentionInputs in = attention_inputs(layer, x_ND, B, T, 0);
  if (on_kv) on_kv(in.k, in.v);
  Var a = reshape(attention(in.q, in.k, in.v, layer_mask(layer)), {int64_t(B) * T, Q});
  return ffn_residual(layer, attention_residual(layer, x_ND, a), aux);
}

Var Transformer::embed(const Tensor& ids_N) const { return embedding(ids_N, embed_VD); }

Var Transformer::logits(const Var& x_ND) const {
  return linear(rmsnorm(x_ND, final_norm, config_.norm_eps), head_VD);
}

Var Transformer::forward(const Tensor& ids_BT) const { return linear(hidden_states(ids_BT, nullptr), head_VD); }

Var Transformer::hidden_states(const Tensor& ids_BT, std::vector<Var>* aux) const {
  HYLO_CHECK(ids_BT.dim() == 2 && ids_BT.dtype() == DType::i32, "forward: ids must be (B, T) int32, got {} {}",
             dtype_name(ids_BT.dtype()), shape_str(ids_BT.shape()));
  const int B = int(ids_BT.size(0)), T = int(ids_BT.size(1));
  Var x = embed(ids_BT.view({-1}));
  for (int l = 0; l < n_layers(); ++l) {
    // MoE blocks are never recomputed: their aux losses must be taped in the forward pass.
    if (recompute_ && grad_enabled() && !blocks_.at(size_t(l)).moe)
      x = recompute({x}, [this, l, B, T](const std::vector<Var>& in) { return block_forward(l, in[0], B, T, nullptr); });
    else
      x = block_forward(l, x, B, T, aux);
  }
  return rmsnorm(x, final_norm, config_.norm_eps);
}

Var Transformer::loss(const Tensor& inputs_BT, const Tensor& targets_N, int vocab_valid, double z_loss) const {
  std::vector<Var> aux;
  Var hidden = hidden_states(inputs_BT, grad_enabled() ? &aux : nullptr);
  Var total = lm_head_cross_entropy(hidden, head_VD, targets_N, vocab_valid, grad_enabled() ? z_loss : 0.0);
  for (const Var& a : aux) total = add(total, a);
  return total;
}

std::vector<MoeLayerStats> Transformer::moe_stats() const {
  std::vector<MoeLayerStats> stats;
  for (const Block& b : blocks_)
    if (b.moe) stats.push_back(b.moe->stats());
  return stats;
}

std::vector<NamedBufferRef> Transformer::buffers() {
  std::vector<NamedBufferRef> refs;
  for (Block& b : blocks_)
    if (b.moe) refs.push_back({b.moe->bias_name(), b.moe->router_bias()});
  return refs;
}

void Transformer::update_router_biases() {
  for (Block& b : blocks_)
    if (b.moe) b.moe->update_router_bias();
}

std::vector<std::span<int64_t>> Transformer::router_load_tallies() {
  std::vector<std::span<int64_t>> tallies;
  for (Block& b : blocks_)
    if (b.moe) tallies.push_back(b.moe->load_tally());
  return tallies;
}

void Transformer::shard_experts(const ExpertExchange& exchange) {
  for (Block& b : blocks_)
    if (b.moe) b.moe->shard_experts(params_, exchange);
}

bool Transformer::expert_parallel() const {
  return std::any_of(blocks_.begin(), blocks_.end(), [](const Block& b) { return b.moe && b.moe->expert_parallel(); });
}

void Transformer::discard_router_load() {
  for (Block& b : blocks_)
    if (b.moe) b.moe->discard_router_load();
}

}  // namespace hylo
