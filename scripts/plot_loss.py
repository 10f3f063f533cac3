#!/usr/bin/python3
"""Plots training loss (and validation loss, and in-loop retrieval token accuracy, when present) of
one or more runs from metrics.jsonl. Runs named "NAME (seed N)" (a report pooled over seeds) share
NAME's colour and one legend entry: their mean, in a band from the lowest to the highest seed."""
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


def smoothed(train):
    if not train:
        return train
    steps, losses = zip(*train)
    return list(zip(steps, smooth(losses, max(1, len(losses) // 50))))


def draw(ax, series, colour, label, marker):
    """One run as a line; several (one group's seeds) as their mean over the steps all of them
    logged, in a band from the lowest to the highest seed. Returns whether anything was drawn."""
    series = [s for s in series if s]
    if not series:
        return False
    style = dict(color=colour, linewidth=1, label=label, marker="o" if marker else None, markersize=3)
    if len(series) == 1:
        ax.plot(*zip(*series[0]), **style)
        return True
    by_step = [dict(s) for s in series]
    steps = sorted(set.intersection(*(set(d) for d in by_step)))
    values = [[d[step] for d in by_step] for step in steps]
    ax.plot(steps, [sum(v) / len(v) for v in values], **style)
    ax.fill_between(steps, [min(v) for v in values], [max(v) for v in values], color=colour, alpha=0.2, linewidth=0)
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("runs", nargs="+", help="[NAME=]RUN_DIR: a run directory holding metrics.jsonl, "
                        "labelled NAME (default: the directory's name)")
    parser.add_argument("--out", required=True, help="PNG file to write")
    args = parser.parse_args()
    # Training loss (smoothed) on the left, validation loss next, one colour per run (per NAME over
    # seeds, a band) in all panels; a third panel for runs that scored retrieval in-loop (train.eval_retrieval).
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
    for group in groups:
        colour = colours(groups.index(group) % colours.N)
        members = [m for g, m in zip(group_of, metrics) if g == group]
        label = group if seeds[group] == 1 else f"{group} ({seeds[group]} seeds)"
        trains = [smoothed(train) for train, _, _ in members]
        # One legend entry per NAME, on its training line (or its validation line when it has none).
        drew_train = draw(train_ax, trains, colour, label, marker=False)
        draw(val_ax, [val for _, val, _ in members], colour, None if drew_train else label, marker=True)
        if with_retrieval:
            draw(axes[2], [retrieval for _, _, retrieval in members], colour, None, marker=True)
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
