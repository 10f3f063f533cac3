#!/usr/bin/python3
"""Plots training loss (and validation loss when present) of one or more runs from metrics.jsonl."""
import argparse
import json
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def read_metrics(run_dir):
    train, val = [], []
    for line in (pathlib.Path(run_dir) / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if "loss" in row:
            train.append((row["step"], row["loss"]))
        if "val_loss" in row:
            val.append((row["step"], row["val_loss"]))
    return train, val


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("runs", nargs="+", help="run directories holding metrics.jsonl")
    parser.add_argument("--out", required=True, help="PNG file to write")
    args = parser.parse_args()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for run in args.runs:
        train, val = read_metrics(run)
        name = pathlib.Path(run).name
        if train:
            ax.plot(*zip(*train), label=f"{name} train", linewidth=1)
        if val:
            ax.plot(*zip(*val), "o-", label=f"{name} val", markersize=3)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats/token)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
