#!/usr/bin/env python3
"""How hard the attention kernels press on the memory system: DRAM and L2 per kernel.

Reads the CSVs that `device_check.sh ncu_mem` writes (one per mask, head dim and T: `ncu --csv
--metrics ...` of one forward and one backward's dQ and dK/dV kernels, caches flushed by ncu),
prints a table and writes it as JSON (experiments/results/attention/LOG.md: pbb and swa move the
same DRAM bytes; pbb's kernels run closer to the DRAM and L2 limits). Usage: ncu_mem_table.py CSV... --json OUT
"""
import argparse
import csv
import json
import os

METRICS = {  # JSON field: (ncu metric, scale)
    "duration_us": ("gpu__time_duration.sum", 1e-3),
    "dram_read_MB": ("dram__bytes_read.sum", 1e-6),
    "dram_write_MB": ("dram__bytes_write.sum", 1e-6),
    "dram_pct_of_peak": ("dram__throughput.avg.pct_of_peak_sustained_elapsed", 1),
    "l2_throughput_pct": ("lts__throughput.avg.pct_of_peak_sustained_elapsed", 1),
    "l2_to_sm_read_GB": ("l1tex__m_xbar2l1tex_read_bytes.sum", 1e-9),
    "issue_active_pct": ("smsp__issue_active.avg.pct_of_peak_sustained_elapsed", 1),
}


def rows_of(path):
    """One row per profiled kernel of a CSV named ..._MASK_D_T.csv."""
    mask, d, t = os.path.basename(path)[:-4].split("_")[-3:]
    kernels = {}
    with open(path, newline="", errors="replace") as f:
        for r in csv.reader(f):
            # ID, ..., Kernel Name (4), ..., Metric Name (12), Value (14); "n/a" where ncu has none
            if len(r) > 14 and r[0].isdigit() and r[14] != "n/a":
                name = r[4].split("::")[-1].split("<")[0]
                kernels.setdefault(name, {})[r[12]] = float(r[14].replace(",", ""))
    for name, m in kernels.items():
        row = {"mask": mask, "D": int(d), "T": int(t), "kernel": name}
        row.update({field: m[metric] * scale for field, (metric, scale) in METRICS.items()})
        yield row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", nargs="+")
    parser.add_argument("--json", required=True)
    args = parser.parse_args()
    rows = [row for path in args.csv for row in rows_of(path)]
    rows.sort(key=lambda r: (r["D"], r["T"], r["mask"]))
    with open(args.json, "w") as f:
        json.dump({"metrics": {k: v[0] for k, v in METRICS.items()}, "rows": rows}, f, indent=1)
    print(f"{'mask':5s} {'D':>3s} {'T':>6s} {'kernel':32s} {'us':>8s} {'DRAM MB':>8s} {'DRAM %':>7s} {'L2 %':>6s}")
    for r in rows:
        print(f"{r['mask']:5s} {r['D']:3d} {r['T']:6d} {r['kernel']:32s} {r['duration_us']:8.1f} "
              f"{r['dram_read_MB'] + r['dram_write_MB']:8.1f} {r['dram_pct_of_peak']:7.1f} {r['l2_throughput_pct']:6.1f}")


if __name__ == "__main__":
    main()
