// Pre-norm decoder of SPEC §2: embedding -> N blocks -> RMSNorm -> LM head (tied by default).
// Block = x + Attn(RMSNorm(x)); x + FFN(RMSNorm(x)). Layer kinds come from the pattern string
// ('L' local: pbb/swa/full per config, 'G' global), repeated to the depth. Layers with
// config.layer_is_moe(l) use a mixture-of-experts FFN (nn/moe.h) instead of the dense SwiGLU.
//
// Shape legend: B batch, T time, N = B*T, D d_model, H heads, Hkv kv heads, hd head dim,
// F ffn hidden, V vocab.
#pragma once
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "nn/model_config.h"
#include "nn/moe.h"
#include "nn/parameter.h"
#include "ops/fp8_linear.h"
#include "attn/mask.h"

namespace hylo {

struct AttentionLayer {
  Var wq_QD, wk_KD, wv_KD, wo_DQ;  // Q = H*hd, K = Hkv*hd
  Var q_norm, k_norm;              // (hd), only with qk_norm
  AttnMask mask;
  double rope_theta = 10000;
  bool nope = false;
};

struct FeedForward {
  Var w_in_2FD;   // gate rows [0, F), up rows [F, 2F)
  Var w_out_DF;
};

struct Block {
  Var attn_norm, ffn_norm;
  AttentionLayer attn;
  FeedForward ffn;                      // dense layers
  std::unique_ptr<MoeFeedForward> moe;  // MoE layers (heap: buffers() hands out stable references)
};

class Transformer {
 public:
  Transformer(const ModelConfig& config, uint64_t seed);

  // ids_BT (B, T) int32 -> logits (B*T, V)
  Var forward(const Tensor& ids_BT) const;
  // Mean next-token cross-entropy; inputs (B, T) and targets (B*T) int32 on the model's device.
  // Under grad mode (training) the MoE aux losses and the z-loss (z_loss * mean lse^2) are added,
  // so backward() covers them; without grad (evaluation) it is the pure cross-entropy, comparable
  // with dense models' val_loss.
  Var loss(const Tensor& inputs_BT, const Tensor& targets_N, int vocab_valid, double z_loss = 0) const;

  // MoE bookkeeping; all empty / no-ops for a dense model.
  // Per MoE layer, what its last forward pass saw (loads, dropped assignments, aux loss).
  std::vector<MoeLayerStats> moe_stats() const;
  // Non-trained state that checkpoints must carry: the router biases (f32, CPU), in layer order.
  std::vector<NamedBufferRef> buffers();
  // After each applied optimizer step: bias_i += rate * sign(mean load - load_i) over the loads of
  // every training forward since the last call (all micro-batches). No-op when bias_update_rate == 0.
  void update_router_biases();
  // After a skipped step: forget the tallied loads without moving the biases.
  void discard_router_load();
  // Each MoE layer's load tally (MoeFeedForward::load_tally), in layer order.
  std::vector<std::span<int64_t>> router_load_tallies();
  // Expert parallelism: every MoE layer keeps this rank's experts and runs them through `exchange`
  // (MoeFeedForward::shard_experts; parallel/expert_dispatch.h makes it). Every rank of the group
  // must then run the same number of forward passes, in step.
  void shard_experts(const ExpertExchange& exchange);
  bool expert_parallel() const;

  // The pieces forward() is made of, public so that incremental decoding (nn/generate.h) runs
  // exactly the same arithmetic one position at a time; only the attention core differs (a KV
  // cache instead of the whole sequence).
  struct AttentionInputs {
    Var q, k, v;  // (B, T, H, hd), (B, T, Hkv, hd), (B, T, Hkv, hd)
  };
  // RMSNorm, q/k/v projections, QK-norm, RoPE at absolute positions pos_offset .. pos_offset+T-1.
  AttentionInputs attention_inputs(int layer, const Var& x_ND, int B, int T, int pos_offset) const;
  // x + a @ wo^T, a (N, H*hd) the attention output.
  Var attention_residual(int layer, const Var& x_ND, const Var& a_NQ) const;
  // x + FFN(RMSNorm(x)), dense SwiGLU or MoE; aux (optional) collects the MoE aux loss.
  Var ffn_residual(int layer, const Var& x_ND, std::vector<Var>* aux) const;
  // One whole block over full sequences, as forward() runs it; on_kv (optional) is shown the
  // layer's k and v (B, T, Hkv, hd) first: prefill writes them into the KV caches.
  Var block_forward(int layer, const Var& x_ND, int B, int T, std::vector<Var>* aux,
                    const std::function<void(const Var& k, const Var& v)>& on_kv = {}) const;
  Var embed(const Tensor& ids_N) const;  // (N) int32 -> (N, D)
  Var logits(const Var& x_ND) const;     // final RMSNorm + LM head: (N, D) -> (N, V)
  const AttnMask& layer_mask(int layer) const { return blocks_.at(size_t(layer)).attn.mask; }
  int n_layers() const { return int(blocks_.size()); }

  const ModelConfig& config() const { return config_; }
  // Recompute each dense block's activations in the backward pass instead of keeping them.
  void set_recompute(bool on) { recompute_ = on; }
  // train.precision: fp8 (ops/fp8_linear.h): from now on the blocks' q, k, v, o and dense FFN
  // linears run in FP8 with scaling state on `device`. Not the LM head, not the embedding, not the
  // MoE layers' expert and shared-expert GEMMs: they stay bf16 (the head and embedding are the
  // most precision-sensitive products; the grouped expert GEMMs have no FP8 path yet). Called by
  // the trainer; models loaded for evaluation, generation and export run in bf16.
  void enable_fp8(const Fp8Recipe& recipe, Device device);
  // The FP8 scaling state (train checkpoints carry it), or null in bf16.
  Fp8State* fp8() { return fp8_.get(); }
  ParamList& parameters() { return params_; }
  const ParamList& parameters() const { return params_; }

 private:
  // The final-normed hidden states (B*T, D); aux (optional) collects the MoE aux losses.
  Var hidden_states(const Tensor& ids_BT, std::vector<Var>* aux) const;
  // A block's linear: FP8 linear number fp8_linear_base_[layer] + slot under enable_fp8, else bf16.
  enum class BlockLinear { q, k, v, o, ffn_in, ffn_out };
  Var block_linear(int layer, BlockLinear slot, const Var& x, const Var& w) const;

  ModelConfig config_;
  bool recompute_ = false;
  ParamList params_;
  Var embed_VD, final_norm, head_VD;  // head_VD == embed_VD when tied
  std::vector<Block> blocks_;
  std::unique_ptr<Fp8State> fp8_;       // null in bf16; its casts change it under const forward()
  std::vector<int> fp8_linear_base_;    // per layer: its first FP8 linear number
};

AttnMask mask_for(const AttnKindConfig& kind);

}  // namespace hylo
