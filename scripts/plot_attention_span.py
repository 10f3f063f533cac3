#!/usr/bin/python3
"""Plots attention f+b TF/s (counting visited pairs) against key tiles visited per query tile, for
pbb(b, w) and swa(W) over a sweep of b and W (experiments/results/attention_span_sweep_h200.json).

What it shows: per visited pair, both masks run at the speed their work per query tile allows.
pbb(b) visits about as many key tiles per query tile as swa(b / 2), so at b = W it is compared
with a kernel whose blocks are twice as long (attention.md, "span sweep").
Usage: plot_attention_span.py SWEEP.json OUT.png
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep")
    parser.add_argument("png")
    args = parser.parse_args()
    sweep = json.load(open(args.sweep))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for kind, marker in (("pbb", "o"), ("swa", "s")):
        for dim, style in ((64, "-"), (128, "--")):
            rows = sorted((r for r in sweep["rows"] if r["mask"].startswith(kind) and r["D"] == dim),
                          key=lambda r: r["key_tiles_per_query_tile"])
            x = [r["key_tiles_per_query_tile"] for r in rows]
            y = [r["fwdbwd_tflops"] for r in rows]
            ax.plot(x, y, style, marker=marker, label=f"{kind} hd{dim}")
            for r, xi, yi in zip(rows, x, y):
                ax.annotate(r["mask"].split(",")[0].replace("(", " ").rstrip(")"), (xi, yi), textcoords="offset points",
                            xytext=(4, -10), fontsize=7)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("key tiles visited per 64-row query tile")
    ax.set_ylabel("fwd+bwd TFLOP/s (visited pairs)")
    ax.set_title(f"{sweep['device']}, T={sweep['rows'][0]['T']}, B4 H16, commit {sweep['commit']}")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.png, dpi=120)
    print(args.png)


if __name__ == "__main__":
    main()
