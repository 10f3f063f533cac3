#!/usr/bin/python3
"""Plots MoE load balance (max/mean tokens per expert, per MoE layer) vs step for one or more runs.

max/mean = moe.L.load_max / (micro_batch * seq_len * top_k / experts), read from each run's
metrics.jsonl (loads are the token-expert assignments of the step's last micro-batch) and
config.yaml. Optionally prints / writes a per-run per-layer summary over the steps after warm-up.
"""
import argparse
import json
import pathlib
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import yaml


def mean_load(config):
    """Assignments per expert of one micro-batch under perfect balance."""
    t, moe = config["train"], config["model"]["moe"]
    micro = t.get("micro_batch_size") or t["batch_size"]
    return micro * t["seq_len"] * moe["top_k"] / moe["experts"]


def read_balance(run_dir):
    """{layer: [(step, max/mean), ...]} and the run's config."""
    run = pathlib.Path(run_dir)
    config = yaml.safe_load((run / "config.yaml").read_text())
    mean = mean_load(config)
    curves = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if "loss" not in row:
            continue
        for key, value in row.items():
            m = re.fullmatch(r"moe\.(\d+)\.load_max", key)
            if m:
                curves.setdefault(int(m.group(1)), []).append((row["step"], value / mean))
    return curves, config


def summarize(curves, after, threshold):
    """Per layer: mean, max, final max/mean and the share of steps above threshold, over steps > after."""
    out = {}
    for layer, points in sorted(curves.items()):
        vals = [r for s, r in points if s > after]
        if vals:
            out[str(layer)] = {"steps": len(vals), "mean": sum(vals) / len(vals), "max": max(vals), "final": vals[-1],
                               "share_above_threshold": sum(v > threshold for v in vals) / len(vals)}
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("runs", nargs="+", help="run directories holding metrics.jsonl and config.yaml")
    parser.add_argument("--out", required=True, help="PNG file to write")
    parser.add_argument("--labels", nargs="*", help="one legend label per run (default: the directory name)")
    parser.add_argument("--threshold", type=float, default=1.5, help="dashed reference line (default 1.5)")
    parser.add_argument("--after", type=int, default=None,
                        help="summarise steps > AFTER (default: each run's train.warmup_steps)")
    parser.add_argument("--summary", help="also write the per-run per-layer summary to this JSON file")
    parser.add_argument("--title", default="MoE load balance")
    args = parser.parse_args()
    labels = args.labels or [pathlib.Path(r).name for r in args.runs]
    if len(labels) != len(args.runs):
        parser.error("--labels needs one label per run")

    fig, ax = plt.subplots(figsize=(8, 4.8))
    styles = ["-", ":", "-."]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    summary, warmups = {}, []
    for i, (run, label) in enumerate(zip(args.runs, labels)):
        curves, config = read_balance(run)
        after = args.after if args.after is not None else config["train"]["warmup_steps"]
        warmups.append(after)
        summary[label] = {"run_dir": run, "after_step": after, "layers": summarize(curves, after, args.threshold)}
        for j, (layer, points) in enumerate(sorted(curves.items())):
            ax.plot(*zip(*points), styles[j % len(styles)], color=colors[i % len(colors)], linewidth=1,
                    label=f"{label}, layer {layer}")
    ax.axhline(args.threshold, color="black", linestyle="--", linewidth=1, label=f"{args.threshold:g}")
    if warmups and len(set(warmups)) == 1:
        ax.axvline(warmups[0], color="gray", linestyle=":", linewidth=1, label=f"end of warm-up ({warmups[0]})")
    ax.set_xlabel("step")
    ax.set_ylabel("max / mean tokens per expert")
    ax.set_ylim(bottom=1.0)
    ax.set_title(args.title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")
    for label, s in summary.items():
        for layer, v in s["layers"].items():
            print(f"{label} layer {layer} (steps > {s['after_step']}): mean {v['mean']:.3f} max {v['max']:.3f} "
                  f"final {v['final']:.3f}")
    if args.summary:
        pathlib.Path(args.summary).write_text(json.dumps(summary, indent=2) + "\n")
        print(f"wrote {args.summary}")


if __name__ == "__main__":
    main()
