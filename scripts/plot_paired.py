#!/usr/bin/python3
"""Plots the differences `hylo report` pairs by seed (its paired.json): one panel per metric, each
group's mean difference from the first group as a dot with its standard error (thick) and 2 SE
(thin), against a line at zero. A difference whose 2-SE bar crosses zero is not resolved."""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

# The metrics a study reads first; the others only when none of these was paired.
PREFERRED = ["val_loss", "loss", "retrieval_acc", "retrieval_tok_acc"]
MAX_PANELS = 4


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("paired", help="paired.json written by hylo report")
    parser.add_argument("--out", required=True, help="PNG file to write")
    args = parser.parse_args()
    paired = json.load(open(args.paired))
    groups = paired["groups"]
    available = []
    for group in groups:
        for column in group["columns"]:
            if column not in available and "@" not in column:  # not the per-distance retrieval columns
                available.append(column)
    columns = [c for c in PREFERRED if c in available] or available
    columns = columns[:MAX_PANELS]
    if not columns:
        raise SystemExit("plot_paired: no paired metric in " + args.paired)
    fig, axes = plt.subplots(1, len(columns), figsize=(4.2 * len(columns), 0.6 * len(groups) + 1.8), squeeze=False)
    labels = [g["label"] for g in groups]
    for ax, column in zip(axes[0], columns):
        for y, group in enumerate(groups):
            d = group["columns"].get(column)
            if d is None:
                continue
            ax.errorbar(d["mean"], y, xerr=2 * d["se"], fmt="none", ecolor="tab:blue", elinewidth=1, capsize=3)
            ax.errorbar(d["mean"], y, xerr=d["se"], fmt="o", color="tab:blue", elinewidth=3, markersize=5)
            ax.annotate("n=%d" % d["n"], (d["mean"], y), textcoords="offset points", xytext=(0, 7), ha="center",
                        fontsize=7)
        ax.axvline(0, color="grey", linewidth=1)
        ax.set_yticks(range(len(groups)))
        ax.set_yticklabels(labels if ax is axes[0][0] else [])
        ax.set_ylim(-0.7, len(groups) - 0.3)
        ax.set_title("%s − first" % column, fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    baseline = paired["baseline"]
    fig.suptitle("Paired by seed against %s (dot: mean, thick: ± SE, thin: ± 2 SE)" % baseline, fontsize=10)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)


if __name__ == "__main__":
    main()
