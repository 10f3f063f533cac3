// The differentiable ops hylo models are built from. Each op: checks shapes, dispatches to the
// CPU reference (src/ops/cpu/) or a CUDA kernel (kernels/), and records one backward closure.
//
// Shape legend: B batch, T time, N = B*T rows, D model width, H heads, Hkv kv heads,
// hd head dim, F FFN hidden, V vocab.
#pragma once
#include <functional>
#include <vector>

#include "autograd/variable.h"
#include "attn/mask.h"

namespace hylo {

// x (N, in) @ w(out, in)^T -> (N, out)
Var linear(const Var& x, const Var& w);
// ids (N) int32 -> table rows (N, D)
Var embedding(const Tensor& ids, const Var& table);
// x (N, D) * rstd(row) * w (D)
Var rmsnorm(const Var& x, const Var& w, double eps);
// Rotates x (B, T, H, hd) by position pos_offset + t (half-split pairs), theta per layer kind, in
// x's own buffer: its input (a projection's output) is read by no backward. Decoding passes the
// absolute position of its chunk's first token as pos_offset.
Var rope(const Var& x, double theta, int pos_offset = 0);
// gate_up (N, 2F) -> silu(gate) * up (N, F)
Var swiglu(const Var& gate_up);
// q (B,T,H,hd), k/v (B,T,Hkv,hd) -> (B,T,H,hd)
Var attention(const Var& q, const Var& k, const Var& v, const AttnMask& mask);
// Whether attention on CUDA takes this head dim (its kernels: 64 or 128); false without CUDA.
bool cuda_attention_supports_head_dim(int head_dim);
// Mean token cross-entropy of logits = h (N, D) @ w (V, D)^T over targets (N) int32 (-1 =
// ignored); vocabulary rows >= v_valid (padding) are excluded from the softmax. The logits are
// never materialised whole: chunks of rows are projected, scored and differentiated in turn.
// z_loss > 0 adds z_loss * mean(lse^2) over the counted rows (PaLM's z-loss, which keeps the
// softmax normaliser near 1). chunk_rows = 0 sizes chunks to ~512 MiB of logits.
Var lm_head_cross_entropy(const Var& h, const Var& w, const Tensor& targets, int v_valid, double z_loss = 0,
                          int64_t chunk_rows = 0);
Var add(const Var& a, const Var& b);
// x + branch, written into branch's buffer: the branch output (a linear's output in the residual
// stream) is not read by any backward, so the residual sum needs no buffer of its own. Both inputs
// share one gradient buffer, which is safe when neither receives another gradient contribution
// before the other's backward has read it: the branch is computed from x (a residual block), or
// neither input has another reader (the MoE shared expert's output and the routed output).
Var residual_add(const Var& x, const Var& branch);
Var scale(const Var& x, double factor);
Var reshape(const Var& x, const Shape& shape);
// fn(inputs) computed without keeping its activations, and computed again in the backward pass
// to differentiate it (activation recomputation). fn must be deterministic and must not read
// the input Vars' values after changing them.
Var recompute(const std::vector<Var>& inputs, const std::function<Var(const std::vector<Var>&)>& fn);

}  // namespace hylo
