#!/usr/bin/python3
"""Plots training loss (and validation loss, and in-loop retrieval token accuracy, when present) of
one or more runs from metrics.jsonl. Runs named "NAME (seed N)" (a report pooled over seeds) share
NAME's colour and one legend entry."""
import argparse
import collections
import json
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from plot_legend import legend_below, seed_group


def read_metrics(run_dir):
    train, val, retrieval = [], [], []
    for line in (pathlib.Path(run_dir) / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        # A step skipped as non-finite has "loss": null (metrics.jsonl writes NaN/inf as null).
        if row.get("loss") is not None:
            train.append((row["step"], row["loss"]))
        if row.get("val_loss") is not None:
            val.append((row["step"], row["val_loss"]))
        if "retrieval_tok_acc" in row:
            retrieval.append((row["step"], row["retrieval_tok_acc"]))
    return train, val, retrieval


def smooth(values, window):
    """Trailing mean over `window` points: training loss is too noisy to compare runs by."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v - (values[i - window] if i >= window else 0.0)
        out.append(total / min(i + 1, window))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("runs", nargs="+", help="[NAME=]RUN_DIR: a run directory holding metrics.jsonl, "
                        "labelled NAME (default: the directory's name)")
    parser.add_argument("--out", required=True, help="PNG file to write")
    args = parser.parse_args()
    # Training loss (smoothed) on the left, validation loss next, one colour per run (per NAME over
    # seeds) in all panels; a third panel for runs that scored retrieval in-loop (train.eval_retrieval).
    runs = [run.split("=", 1) if "=" in run else (pathlib.Path(run).name, run) for run in args.runs]
    metrics = [read_metrics(path) for _, path in runs]
    group_of = [seed_group(name) for name, _ in runs]
    seeds = collections.Counter(group_of)
    groups = list(seeds)  # first-seen order
    with_retrieval = any(retrieval for _, _, retrieval in metrics)
    panels = 3 if with_retrieval else 2
    fig, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 4.5 + 0.18 * len(groups)))
    train_ax, val_ax = axes[0], axes[1]
    colours = plt.get_cmap("tab10" if len(groups) <= 10 else "tab20")
    labelled = set()
    for group, (train, val, retrieval) in zip(group_of, metrics):
        colour = colours(groups.index(group) % colours.N)
        label = None  # one legend entry per NAME
        if group not in labelled:
            labelled.add(group)
            label = group if seeds[group] == 1 else f"{group} ({seeds[group]} seeds)"
        if train:
            steps, losses = zip(*train)
            train_ax.plot(steps, smooth(losses, max(1, len(losses) // 50)), color=colour, linewidth=1, label=label)
        if val:
            val_ax.plot(*zip(*val), "o-", color=colour, markersize=3, linewidth=1, label=None if train else label)
        if retrieval:
            axes[2].plot(*zip(*retrieval), "o-", color=colour, markersize=3, linewidth=1)
    train_ax.set_title("training loss (trailing mean over 2% of the steps)", fontsize=10)
    val_ax.set_title("validation loss", fontsize=10)
    for ax in (train_ax, val_ax):
        ax.set_ylabel("loss (nats/token)")
    if with_retrieval:
        axes[2].set_title("retrieval: token accuracy of the value", fontsize=10)
        axes[2].set_ylabel("token accuracy")
        axes[2].set_ylim(-0.02, 1.02)
    for ax in axes:
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    entries = [ax.get_legend_handles_labels() for ax in axes]  # the label is on the train or val line
    legend_below(fig, [h for hs, _ in entries for h in hs], [l for _, ls in entries for l in ls])
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
