// The differentiable ops hylo models are built from. Each op: checks shapes, dispatches to the
// CPU reference (src/ops/cpu/) or a CUDA kernel (kernels/), and records one backward closure.
//
// Shape legend: B batch, T time, N = B*T rows, D model width, H heads, Hkv kv heads,
// hd head dim, F FFN hidden, V vocab.
#pragma once
#include "autograd/variable.h"
#include "ops/mask.h"

namespace hylo {

// x (N, in) @ w(out, in)^T -> (N, out)
Var linear(const Var& x, const Var& w);
// ids (N) int32 -> table rows (N, D)
Var embedding(const Tensor& ids, const Var& table);
// x (N, D) * rstd(row) * w (D)
Var rmsnorm(const Var& x, const Var& w, double eps);
// Rotates x (B, T, H, hd) by position t (half-split pairs), theta per layer kind.
Var rope(const Var& x, double theta);
// gate_up (N, 2F) -> silu(gate) * up (N, F)
Var swiglu(const Var& gate_up);
// q (B,T,H,hd), k/v (B,T,Hkv,hd) -> (B,T,H,hd)
Var attention(const Var& q, const Var& k, const Var& v, const AttnMask& mask);
// Mean token cross-entropy of logits (N, V) over targets (N) int32 (-1 = ignored); columns
// >= v_valid (vocab padding) are excluded from the softmax.
Var cross_entropy(const Var& logits, const Tensor& targets, int v_valid);
Var add(const Var& a, const Var& b);
Var scale(const Var& x, double factor);
Var reshape(const Var& x, const Shape& shape);

}  // namespace hylo
