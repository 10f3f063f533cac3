#!/usr/bin/python3
"""Plots one `hylo bench decode --json` result: Flash-PBB step time by block offset against the
SWA ring's, with the copy-rate floor (live k/v bytes / the copy rate measured in the same call) and
a straight-line fit of PBB's later offsets. The fit's intercept is the per-step cost that does not
scale with keys; it is what holds PBB/SWA below the ratio of the key counts.

    scripts/plot_decode.py experiments/results/decode/decode_v10_h200.json --out decode.png [--batch 64 --hd 128]
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np


def pbb_keys(r, bridge):
    """Live keys at block offset r (t >= b): the block's r + 1 plus the bridge keys still needed."""
    return r + 1 + max(0, bridge - 1 - r)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json")
    parser.add_argument("--out", required=True)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--hd", type=int, default=128)
    args = parser.parse_args()
    result = json.load(open(args.json))
    settings = result["settings"]
    block, bridge, window, heads = settings["pbb_b"], settings["pbb_w"], settings["swa_W"], settings["Hkv"]
    row = next(r for r in result["rows"] if r["batch"] == args.batch and r["D"] == args.hd)

    bins = np.array(row["pbb_us_by_r16"])
    per_bin = block // len(bins)
    mid = np.arange(len(bins)) * per_bin + per_bin / 2
    keys = np.array([np.mean([pbb_keys(r, bridge) for r in range(i * per_bin, (i + 1) * per_bin)])
                     for i in range(len(bins))])
    us_per_key = 2 * args.batch * heads * args.hd * 2 / (result["copy_TBps"] * 1e12) * 1e6  # k and v, bf16
    later = keys > bridge  # offsets past the bridge: one range, keys = r + 1
    slope, intercept = np.polyfit(keys[later], bins[later], 1)

    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(mid, bins, "o-", label=f"Flash-PBB (b={block}, w={bridge}), mean {row['pbb_us']:.1f} us")
    ax.axhline(row["swa_us"], color="C1", label=f"Flash-SWA ring (W={window}), {row['swa_us']:.1f} us")
    ax.plot(mid, keys * us_per_key, "k:", label=f"live k/v bytes at the copy rate ({result['copy_TBps']:.2f} TB/s)")
    ax.axhline(window * us_per_key, color="C1", ls=":")
    ax.plot(mid, intercept + slope * keys, "C0--", lw=1,
            label=f"fit {intercept:.1f} us + {slope:.3f} us/key (offsets >= {bridge})")
    ax.set_xlabel("block offset r = t mod b")
    ax.set_ylabel("us per decode step (one layer)")
    ax.set_title(f"{result['device']}, batch {args.batch}, hd {args.hd}, H={heads}: "
                 f"PBB/SWA {row['ratio_pbb_swa']:.2f}x (keys {window / row['pbb_avg_keys']:.2f}x)", fontsize=10)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}: fixed {intercept:.2f} us + {slope:.4f} us/key; copy-rate floor {us_per_key:.4f} us/key")


if __name__ == "__main__":
    main()
