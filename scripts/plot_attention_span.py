#!/usr/bin/python3
"""Plots attention f+b TF/s (counting visited pairs) against key tiles visited per query tile, for
pbb(b, w) and swa(W) at several spans, from `hylo bench attention --json` files (device_check.sh
attn_span writes one per b) or the recorded sweep
(experiments/results/attention/attention_span_sweep_h200.json).

What it shows: per visited pair, both masks run at the speed their work per query tile allows.
pbb(b) visits about as many key tiles per query tile as swa(b / 2), so at b = W it is compared
with a kernel whose blocks are twice as long (experiments/results/attention/LOG.md, "span sweep").
Usage: plot_attention_span.py BENCH.json... --out OUT.png [--T 16384]
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

TILE = 64  # query and key tile rows of the kernels' tile skipping


def lowest_key(mask, t):
    """First key row t may see: pbb(b, w) its block's start or its last w keys, swa(W) its last W."""
    kind, sizes = mask.rstrip(")").split("(")
    sizes = [int(x) for x in sizes.split(",")]
    if kind == "pbb":
        block, bridge = sizes
        return max(0, min(t // block * block, t - bridge + 1))
    if kind == "swa":
        return max(0, t - sizes[0] + 1)
    raise ValueError(f"no span for mask {mask}")


def key_tiles_per_query_tile(mask, T):
    """Mean key tiles a TILE-row query tile visits: from its first row's lowest key to its last row."""
    starts = range(0, T, TILE)
    return sum((min(m0 + TILE, T) - 1) // TILE - lowest_key(mask, m0) // TILE + 1 for m0 in starts) / len(starts)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--out", required=True)
    parser.add_argument("--T", type=int, default=16384, help="sequence length to plot (the files may hold several)")
    args = parser.parse_args()
    results = [json.load(open(path)) for path in args.files]
    rows = [r for result in results for r in result["rows"] if r["T"] == args.T and r["mask"][:3] in ("pbb", "swa")]
    if not rows:
        raise SystemExit(f"plot_attention_span.py: no pbb or swa rows at T={args.T} in {', '.join(args.files)}")
    for r in rows:
        r["tiles"] = key_tiles_per_query_tile(r["mask"], r["T"])

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for kind, marker in (("pbb", "o"), ("swa", "s")):
        for dim, style in ((64, "-"), (128, "--")):
            mine = sorted((r for r in rows if r["mask"].startswith(kind) and r["D"] == dim), key=lambda r: r["tiles"])
            if not mine:
                continue
            x = [r["tiles"] for r in mine]
            y = [r["fwdbwd_tflops"] for r in mine]
            ax.plot(x, y, style, marker=marker, label=f"{kind} hd{dim}")
            for r, xi, yi in zip(mine, x, y):
                ax.annotate(r["mask"].split(",")[0].replace("(", " ").rstrip(")"), (xi, yi), textcoords="offset points",
                            xytext=(4, -10), fontsize=7)
    ax.set_xscale("log", base=2)
    ax.set_xlabel(f"key tiles visited per {TILE}-row query tile")
    ax.set_ylabel("fwd+bwd TFLOP/s (visited pairs)")
    commits = sorted({str(result.get("commit", "?")) for result in results})
    ax.set_title(f"{results[0]['device']}, T={args.T}, B4 H16, commit {', '.join(commits)}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(args.out)


if __name__ == "__main__":
    main()
