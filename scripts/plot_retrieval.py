#!/usr/bin/python3
"""Plots controlled source retrieval (SPEC §5) by distance, one line per run, from the
`hylo eval --tasks retrieval --json` reports given as RUN_NAME=EVAL_JSON: exact-match accuracy of
the value (left) and its per-token accuracy (right, which moves long before exact matches do)
against the query's distance from its source (log scale). Runs named "NAME (seed N)" (a report
pooled over seeds) share NAME's colour as thin lines, with their mean over seeds drawn thick."""
import argparse
import collections
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from plot_legend import legend_below, seed_group


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("reports", nargs="+", help="NAME=path/to/eval.json")
    parser.add_argument("--out", required=True, help="PNG file to write")
    args = parser.parse_args()
    fig, (exact_ax, token_ax) = plt.subplots(1, 2, figsize=(11, 4.5))
    groups = collections.OrderedDict()  # NAME -> [by_distance rows of each seed]
    for item in args.reports:
        name, path = item.split("=", 1)
        groups.setdefault(seed_group(name), []).append(json.load(open(path))["retrieval"]["by_distance"])
    colours = plt.get_cmap("tab10")
    for i, (name, runs) in enumerate(groups.items()):
        colour = colours(i % colours.N)
        distances = [r["distance"] for r in runs[0]]
        for ax, key in ((exact_ax, "accuracy"), (token_ax, "token_accuracy")):
            curves = [[r["all"][key] for r in rows] for rows in runs]
            if len(runs) == 1:
                ax.plot(distances, curves[0], "o-", color=colour, label=name, markersize=4)
                continue
            for curve in curves:
                ax.plot(distances, curve, "-", color=colour, alpha=0.3, linewidth=1)
            mean = [sum(values) / len(values) for values in zip(*curves)]
            ax.plot(distances, mean, "o-", color=colour, linewidth=2.5, markersize=5,
                    label=f"{name} (mean of {len(runs)} seeds; thin: each seed)")
    for ax, what in ((exact_ax, "retrieval accuracy (exact value)"), (token_ax, "token accuracy of the value")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("distance of the query from its source (tokens)")
        ax.set_ylabel(what)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    legend_below(fig, *exact_ax.get_legend_handles_labels())
    fig.savefig(args.out, dpi=120)


if __name__ == "__main__":
    main()
