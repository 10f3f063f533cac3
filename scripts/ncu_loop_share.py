#!/usr/bin/env python3
"""Where a kernel's warps wait: in its main loop, or once per block (prologue, epilogue).

Reads the CSV of `ncu --section WarpStateStats --section SourceCounters --page source
--print-source sass --csv` and prints, per profiled kernel, the share of warp-stall samples on
instructions that each warp executes more than once (the tile loop) and the most-stalled
instructions. A low loop share means per-block fixed latency dominates
(experiments/results/attention/LOG.md, v16: pbb's blocks). Usage: ncu_loop_share.py FILE.csv [--top N]
"""
import argparse
import csv
import sys


def kernels(path):
    """Yields (kernel name, header, rows) for each kernel section of the CSV."""
    name, header, rows = None, None, []
    with open(path, newline="", errors="replace") as f:
        for row in csv.reader(f):
            if len(row) >= 2 and row[0] == "Kernel Name":
                if header:
                    yield name, header, rows
                name, header, rows = row[1], None, []
            elif row and row[0] == "Address":
                if header:  # a second listing of the same kernel: keep the first
                    yield name, header, rows
                    name, header, rows = name, None, []
                header = row
            elif header and len(row) == len(header):
                rows.append(row)
    if header:
        yield name, header, rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("--top", type=int, default=6)
    args = parser.parse_args()
    seen = set()
    for name, header, rows in kernels(args.csv):
        if not rows or name in seen:
            continue
        seen.add(name)
        source, samples, executed = (header.index(c) for c in (
            "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed"))
        stalls = [float(r[samples] or 0) for r in rows]
        counts = [float(r[executed] or 0) for r in rows]
        warps = counts[0] or 1  # the entry instruction runs once per warp
        total = sum(stalls) or 1
        in_loop = sum(s for s, n in zip(stalls, counts) if n > 1.3 * warps)
        short = name[:name.rfind("(")].split("::")[-1]  # "void ns::kernel<(int)64>(Params)" -> "kernel<(int)64>"
        print(f"{short}: {int(total)} stall samples, {100 * in_loop / total:.1f}% in the loop "
              f"({max(counts) / warps:.2f} loop passes per warp)")
        for s, n, r in sorted(zip(stalls, counts, rows), key=lambda x: -x[0])[:args.top]:
            where = "loop" if n > 1.3 * warps else "once"
            print(f"  {100 * s / total:5.1f}%  {where}  {r[source][:90]}")


if __name__ == "__main__":
    sys.exit(main())
