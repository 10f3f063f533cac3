// modeling_hylo.py, written by `hylo export --format hf` next to config.json for the remote-code
// classes (checkpoint/hf_format.h). Kept here as text so that the binary carries it.
#include "checkpoint/hf_format.h"

namespace hylo {

const char* hf_modeling_py() {
  return R"py("""hylo's PBB attention and mixture-of-experts FFN on transformers' own models.

`hylo export --format hf` writes this file next to config.json for models with PBB layers or MoE
FFNs; load them with AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True). The rest
is the base class's: SmolLM3 (per-layer sliding/full masks, NoPE layers) or, with QK-norm, Qwen3.

PBB(block b, bridge w): query t attends key s <= t when s // b == t // b or t - s < w. PBB layers
are sliding layers (layer_types "sliding_attention") with sliding_window = b: every key a PBB query
attends is among the last b, so the sliding cache keeps what they need, and their mask is the
sliding one narrowed by the PBB rule (the and_mask_function of transformers'
create_sliding_window_causal_mask). FlashAttention would apply the bare window, so these classes
refuse it: use attn_implementation "sdpa" (the default), "eager" or "flex_attention".

MoE (hylo_moe in config.json, every every-th layer): scores = softmax (or sigmoid) of the router
logits; the top_k experts by scores + e_score_correction_bias (the aux-loss-free bias, selection
only); weights = the chosen scores over their sum; expert e: down_proj[e](silu(gate) * up) with
gate, up = the first and second half of gate_up_proj[e] x; plus one always-on SwiGLU of hidden
shared_experts * expert_hidden (weight 1).
"""
import torch
from torch import nn
from transformers.masking_utils import and_masks
from transformers.models.qwen3 import configuration_qwen3, modeling_qwen3
from transformers.models.smollm3 import configuration_smollm3, modeling_smollm3


class HyloConfig(configuration_smollm3.SmolLM3Config):
    model_type = "hylo"


class HyloQkNormConfig(configuration_qwen3.Qwen3Config):
    model_type = "hylo_qk_norm"


def pbb_overlay(block, bridge):
    """The PBB rule over absolute positions (causality comes from the mask it narrows)."""

    def inner_mask(batch_idx, head_idx, q_idx, kv_idx):
        return (q_idx // block == kv_idx // block) | (q_idx - kv_idx < bridge)

    return inner_mask


def _narrowed_by_pbb(create_sliding_window_causal_mask):
    def create(config, *args, **kwargs):
        pbb = getattr(config, "hylo_pbb", None)  # only hylo's configs have it
        if pbb:
            overlay = pbb_overlay(pbb["block"], pbb["bridge"])
            given = kwargs.get("and_mask_function")
            kwargs["and_mask_function"] = overlay if given is None else and_masks(overlay, given)
        return create_sliding_window_causal_mask(config, *args, **kwargs)

    create.hylo_pbb = True
    return create


# The base models build their sliding masks through this module-level name at every forward.
for _module in (modeling_smollm3, modeling_qwen3):
    if not getattr(_module.create_sliding_window_causal_mask, "hylo_pbb", False):
        _module.create_sliding_window_causal_mask = _narrowed_by_pbb(_module.create_sliding_window_causal_mask)


class HyloSwiGLU(nn.Module):
    def __init__(self, hidden, inner):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inner, bias=False)
        self.up_proj = nn.Linear(hidden, inner, bias=False)
        self.down_proj = nn.Linear(inner, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class HyloRouter(nn.Module):
    def __init__(self, hidden, experts):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(experts, hidden))
        self.register_buffer("e_score_correction_bias", torch.zeros(experts))


class HyloExperts(nn.Module):
    def __init__(self, experts, hidden, inner):
        super().__init__()
        self.gate_up_proj = nn.Parameter(torch.empty(experts, 2 * inner, hidden))
        self.down_proj = nn.Parameter(torch.empty(experts, hidden, inner))


class HyloMoe(nn.Module):
    def __init__(self, config):
        super().__init__()
        moe = config.hylo_moe
        self.top_k, self.router = moe["top_k"], moe["router"]
        self.gate = HyloRouter(config.hidden_size, moe["experts"])
        self.experts = HyloExperts(moe["experts"], config.hidden_size, moe["expert_hidden"])
        shared = moe["shared_experts"] * moe["expert_hidden"]
        self.shared_experts = HyloSwiGLU(config.hidden_size, shared) if shared else None

    def forward(self, hidden_states):
        x = hidden_states.reshape(-1, hidden_states.shape[-1])
        logits = nn.functional.linear(x.float(), self.gate.weight.float())
        scores = logits.softmax(-1) if self.router == "softmax" else logits.sigmoid()
        chosen = torch.topk(scores + self.gate.e_score_correction_bias.float(), self.top_k, dim=-1).indices
        weights = scores.gather(-1, chosen)
        weights = (weights / weights.sum(-1, keepdim=True)).to(x.dtype)
        y = torch.zeros_like(x)
        for e in range(self.experts.gate_up_proj.shape[0]):
            token, slot = torch.nonzero(chosen == e, as_tuple=True)
            if token.numel() == 0:
                continue
            gate, up = nn.functional.linear(x[token], self.experts.gate_up_proj[e]).chunk(2, dim=-1)
            out = nn.functional.linear(nn.functional.silu(gate) * up, self.experts.down_proj[e])
            y.index_add_(0, token, out * weights[token, slot, None])
        if self.shared_experts is not None:
            y = y + self.shared_experts(x)
        return y.reshape(hidden_states.shape)


def _moe_layers(model, config):
    moe = getattr(config, "hylo_moe", None)
    if moe:
        for i, layer in enumerate(model.model.layers):
            if (i + 1) % moe["every"] == 0:
                layer.mlp = HyloMoe(config)


class _HyloCausalLM:
    """What hylo adds to a base causal LM; listed before the base, so that its attributes win: no
    FlashAttention (it would apply the bare sliding window, not PBB) and the MoE FFNs."""

    _supports_flash_attn = False
    _supports_flash_attn_2 = False

    def __init__(self, config):
        super().__init__(config)
        _moe_layers(self, config)
        self.post_init()


class HyloForCausalLM(_HyloCausalLM, modeling_smollm3.SmolLM3ForCausalLM):
    config_class = HyloConfig


class HyloQkNormForCausalLM(_HyloCausalLM, modeling_qwen3.Qwen3ForCausalLM):
    config_class = HyloQkNormConfig
)py";
}

}  // namespace hylo
