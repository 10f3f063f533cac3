#!/usr/bin/python3
"""Plots controlled source retrieval (SPEC §5) by distance, one line per run, from the
`hylo eval --tasks retrieval --json` reports given as RUN_NAME=EVAL_JSON: exact-match accuracy of
the value against the query's distance from its source (log scale)."""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("reports", nargs="+", help="NAME=path/to/eval.json")
    parser.add_argument("--out", required=True, help="PNG file to write")
    args = parser.parse_args()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for item in args.reports:
        name, path = item.split("=", 1)
        rows = json.load(open(path))["retrieval"]["by_distance"]
        ax.plot([r["distance"] for r in rows], [r["all"]["accuracy"] for r in rows], "o-", label=name, markersize=4)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("distance of the query from its source (tokens)")
    ax.set_ylabel("retrieval accuracy (exact value)")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)


if __name__ == "__main__":
    main()
