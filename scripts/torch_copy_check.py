#!/usr/bin/env python3
"""Trains hylo's dense model (RMSNorm, RoPE rotate-half, causal full attention, SwiGLU, tied
embeddings, GPT-2 init with depth-scaled output projections, AdamW without decay on embeddings
and norms, warmup + cosine to min_lr_ratio, clip 1) in PyTorch on a hylo token shard, so that how
fast a small model learns to copy can be compared with `hylo train` on the same data and settings
(experiments/results/hybrids/LOG_retrieval_mix.md). Rows are random windows of seq_len + 1
tokens; with --mix, source spans K V (4 + 4 ids of the shard's common-token pool) and their repeats are written
over that share of the tokens, as data.retrieval_mix does. Prints the training loss, and the loss
on the copyable targets (K[1:] V of each repeat), every --log-every steps; --json writes them.

  scripts/torch_copy_check.py SHARD --vocab 512 --d-model 64 --layers 2 --heads 2 --ffn 192 \
      --steps 1500 --batch 16 --seq 64 --lr 3e-3 [--mix 1.0] [--json OUT]
"""
import argparse
import json
import math

import random

import torch
import torch.nn.functional as F

SPAN = 8  # K (4) then V (4)


def read_shard(path):
    raw = open(path, "rb").read()
    assert raw[:8] == b"HYLOTOK1", f"{path}: not a hylo shard"
    token_bytes, count = int.from_bytes(raw[12:16], "little"), int.from_bytes(raw[16:24], "little")
    dtype = torch.int16 if token_bytes == 2 else torch.int32
    t = torch.frombuffer(bytearray(raw[1024:1024 + token_bytes * count]), dtype=dtype).long()
    return t & 0xFFFF if token_bytes == 2 else t


def common_pool(tokens, skip=100, size=2000):
    counts = torch.bincount(tokens).tolist()
    ids = sorted((i for i, c in enumerate(counts) if c > 0 and i != 50256), key=lambda i: -counts[i])
    skip = min(skip, len(ids) // 4)
    return ids[skip:skip + size]


def plan_spans(rng, length, mix, pool):
    """Span sources and distances covering about `mix` of a row, log-uniform distances, no overlaps."""
    max_d = length - 2 * SPAN
    expected = mix * length / (2 * SPAN)
    count = int(expected) + (rng.random() < expected - math.floor(expected))
    taken = [False] * length
    spans = []
    for _ in range(count):
        for _ in range(8):
            d = min(max_d, int(math.exp(rng.random() * math.log(max_d + 1.0))) - 1)
            s = rng.randrange(length - 2 * SPAN - d + 1)
            r = s + SPAN + d
            if any(taken[s:s + SPAN]) or any(taken[r:r + SPAN]):
                continue
            taken[s:s + SPAN] = taken[r:r + SPAN] = [True] * SPAN
            spans.append((s, r, torch.tensor(rng.sample(pool, SPAN))))
            break
    return spans


def make_batch(rng, tokens, batch, seq, mix, pool):
    rows = torch.stack([tokens[s:s + seq + 1] for s in (rng.randrange(len(tokens) - seq) for _ in range(batch))])
    copyable = torch.zeros_like(rows, dtype=torch.bool)  # targets a copying model predicts: K[1:] V of a repeat
    for b in range(batch if mix > 0 else 0):
        for s, r, ids in plan_spans(rng, seq + 1, mix, pool):
            rows[b, s:s + SPAN] = rows[b, r:r + SPAN] = ids
            copyable[b, r + 1:r + SPAN] = True
    return rows, copyable[:, 1:]


def rmsnorm(x, w, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, theta=10000.0):  # x (B, H, T, hd)
    T, hd = x.shape[-2], x.shape[-1]
    half = hd // 2
    angle = torch.arange(T, device=x.device)[:, None] * theta ** (-2.0 * torch.arange(half, device=x.device) / hd)
    c, s = angle.cos(), angle.sin()
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], -1)


class Model(torch.nn.Module):
    def __init__(self, vocab, d, layers, heads, ffn, std=0.02):
        super().__init__()
        out_std = std / math.sqrt(2 * layers)
        p = lambda *shape, s: torch.nn.Parameter(torch.randn(*shape) * s)
        self.heads = heads
        self.embed = p(vocab, d, s=std)
        self.blocks = torch.nn.ModuleList()
        for _ in range(layers):
            b = torch.nn.ParameterDict({
                "attn_norm": torch.nn.Parameter(torch.ones(d)), "ffn_norm": torch.nn.Parameter(torch.ones(d)),
                "wq": p(d, d, s=std), "wk": p(d, d, s=std), "wv": p(d, d, s=std), "wo": p(d, d, s=out_std),
                "w_in": p(2 * ffn, d, s=std), "w_out": p(d, ffn, s=out_std)})
            self.blocks.append(b)
        self.final_norm = torch.nn.Parameter(torch.ones(d))

    def forward(self, ids):
        B, T = ids.shape
        x = self.embed[ids]
        for b in self.blocks:
            h = rmsnorm(x, b["attn_norm"])
            q, k, v = (a.view(B, T, self.heads, -1).transpose(1, 2) for a in (h @ b["wq"].T, h @ b["wk"].T, h @ b["wv"].T))
            a = F.scaled_dot_product_attention(rope(q), rope(k), v, is_causal=True)
            x = x + a.transpose(1, 2).reshape(B, T, -1) @ b["wo"].T
            gate, up = (rmsnorm(x, b["ffn_norm"]) @ b["w_in"].T).chunk(2, -1)
            x = x + (F.silu(gate) * up) @ b["w_out"].T
        return rmsnorm(x, self.final_norm) @ self.embed.T


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("shard")
    for name, default in [("vocab", 512), ("d-model", 64), ("layers", 2), ("heads", 2), ("ffn", 192),
                          ("steps", 1500), ("batch", 16), ("seq", 64), ("warmup", 50), ("log-every", 250),
                          ("seed", 0)]:
        ap.add_argument(f"--{name}", type=int, default=default)
    for name, default in [("lr", 3e-3), ("min-lr-ratio", 0.1), ("wd", 0.1), ("mix", 0.0)]:
        ap.add_argument(f"--{name}", type=float, default=default)
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    tokens = read_shard(args.shard)
    pool = common_pool(tokens)
    model = Model(args.vocab, args.d_model, args.layers, args.heads, args.ffn).to(dev)
    decay = [p for n, p in model.named_parameters() if n != "embed" and "norm" not in n]
    rest = [p for n, p in model.named_parameters() if n == "embed" or "norm" in n]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd}, {"params": rest, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)

    def lr_at(step):
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        progress = min(1.0, (step - args.warmup) / max(1, args.steps - args.warmup))
        floor = args.lr * args.min_lr_ratio
        return floor + 0.5 * (args.lr - floor) * (1 + math.cos(math.pi * progress))

    log = []
    for step in range(args.steps):
        rows, copyable = make_batch(rng, tokens, args.batch, args.seq, args.mix, pool)
        rows, copyable = rows.to(dev), copyable.to(dev)
        logits = model(rows[:, :-1])
        nll = F.cross_entropy(logits.reshape(-1, args.vocab), rows[:, 1:].reshape(-1), reduction="none")
        loss = nll.mean()
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if (step + 1) % args.log_every == 0:
            mask = copyable.reshape(-1)
            entry = {"step": step + 1, "loss": loss.item(),
                     "copy_loss": nll[mask].mean().item() if mask.any() else None,
                     "other_loss": nll[~mask].mean().item()}
            log.append(entry)
            print(json.dumps(entry), flush=True)
    if args.json:
        json.dump({"args": vars(args), "log": log, "torch": torch.__version__}, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
