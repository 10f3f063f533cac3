#!/usr/bin/python3
"""Prints pbb's f+b TF/s per visited pair against swa's, per head dim and T, for each
`hylo bench attention --kind pbb,swa --json` file given (device_check.sh attn_span runs pbb(b, 128)
against swa(b / 2), which visit about as many key tiles per query tile;
experiments/results/attention/LOG.md).
Usage: attention_pair_ratio.py BENCH.json...
"""
import argparse
import json


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    for path in args.files:
        rows = json.load(open(path))["rows"]
        pbb = {(r["D"], r["T"]): r for r in rows if r["mask"].startswith("pbb")}
        swa = {(r["D"], r["T"]): r for r in rows if r["mask"].startswith("swa")}
        for key in sorted(pbb.keys() & swa.keys()):
            p, s = pbb[key], swa[key]
            print(f"{p['mask']:>15} / {s['mask']:<10} hd{key[0]:<4} T{key[1]:<6} f+b TF/s {p['fwdbwd_tflops']:6.1f} / "
                  f"{s['fwdbwd_tflops']:6.1f} = {p['fwdbwd_tflops'] / s['fwdbwd_tflops']:.3f}")


if __name__ == "__main__":
    main()
