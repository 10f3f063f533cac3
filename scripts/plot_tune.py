#!/usr/bin/python3
"""Plots what `hylo report --tune KEY` found (its tuned.json): per group, the metric against the
tuned key's values on a log axis (learning rates are tried a factor apart), the best value ringed.
A best value at the end of its line is at the grid's edge: the optimum may lie beyond it."""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from plot_legend import legend_below


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("tuned", help="tuned.json written by hylo report --tune")
    parser.add_argument("--out", required=True, help="PNG file to write")
    args = parser.parse_args()
    tuned = json.load(open(args.tuned))
    key, by = tuned["key"], tuned["by"]
    # A group whose every run diverged reaches the table as "-" and is not in tuned.json.
    values = [float(v) for g in tuned["groups"] for v in g["scores"]]
    log_x = min(values) > 0 and max(values) / min(values) >= 10
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    handles, labels = [], []
    for group in tuned["groups"]:
        points = sorted((float(v), score) for v, score in group["scores"].items())
        (line,) = ax.plot([x for x, _ in points], [y for _, y in points], "o-", markersize=4)
        ax.plot(float(group["best"]), group[by], "o", markersize=11, markerfacecolor="none", color=line.get_color())
        handles.append(line)
        labels.append("%s (best %s%s)" % (group["label"], group["best"], ", edge" if group["edge"] else ""))
    if log_x:
        ax.set_xscale("log")
    ax.set_xlabel(key)
    ax.set_ylabel(by + " (mean over seeds)")
    ax.set_title("%s against %s, per group (ringed: the best)" % (by, key), fontsize=10)
    ax.grid(alpha=0.3)
    legend_below(fig, handles, labels)
    fig.savefig(args.out, dpi=120)


if __name__ == "__main__":
    main()
