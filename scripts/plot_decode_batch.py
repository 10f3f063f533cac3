#!/usr/bin/python3
"""Plots Flash-PBB/Flash-SWA decode step-time ratios by batch from `hylo bench decode --json`
results (one or more files, rows pooled) run at several batches: per step (events around each
step) and per step of a run (steps queued back to back), one line per head dim, against the ratio
of the live key counts (the bound when a step costs only its bytes) and the issue's 1.8x target.
Results that carry the launch floor also get its bounds: the ratio if a step cost only an empty
kernel on its grid plus its keys.

    scripts/plot_decode_batch.py experiments/results/decode/decode_v16_h200.json \
        experiments/results/decode/decode_v16_b128_h200.json --out decode_batch.png
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", nargs="+")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    results = [json.load(open(path)) for path in args.json]
    result = results[0]
    rows = [r for res in results for r in res["rows"]]
    keys_ratio = result["settings"]["swa_W"] / rows[0]["pbb_avg_keys"]

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, hd in enumerate(sorted({r["D"] for r in rows})):
        mine = sorted((r for r in rows if r["D"] == hd), key=lambda r: r["batch"])
        batches = [r["batch"] for r in mine]
        ax.plot(batches, [r["ratio_pbb_swa"] for r in mine], "o-", color=f"C{i}", label=f"hd {hd}, per step")
        ax.plot(batches, [r["ratio_run"] for r in mine], "s--", color=f"C{i}", label=f"hd {hd}, run of steps")
        if all("ratio_bound" in r for r in mine):
            ax.plot(batches, [r["ratio_bound"] for r in mine], ":", color=f"C{i}", lw=1,
                    label=f"hd {hd}, bound per step (launch floor)")
            ax.plot(batches, [r["ratio_run_bound"] for r in mine], "-.", color=f"C{i}", lw=1,
                    label=f"hd {hd}, bound in runs")
    ax.axhline(keys_ratio, color="k", ls=":", label=f"live keys SWA/PBB = {keys_ratio:.2f}")
    ax.axhline(1.8, color="C3", lw=1, label="target 1.8")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({r["batch"] for r in rows}))
    ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.set_xlabel("batch (sequences decoded together)")
    ax.set_ylabel("SWA / PBB step time")
    s = result["settings"]
    ax.set_title(f"{result['device']}, H={s['H']}, b=W={s['swa_W']}, w={s['pbb_w']}: Flash-PBB over Flash-SWA",
                 fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
