#!/usr/bin/env python3
"""Reads a hylo run directory's TensorBoard event files with TensorBoard's own reader and checks
that every scalar equals its metrics.jsonl counterpart (as float32, hylo's simple_value): the same
steps and values for each tag, no tag without a metrics.jsonl key, train/loss present (and
val/loss when the run evaluated). Needs the tensorboard package (the GPU machine has it).

  scripts/check_tensorboard.py RUN_DIR

Exit status 0 when everything matches, 1 on any mismatch, 2 on a missing file.
"""
import glob
import json
import math
import os
import re
import struct
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

# metrics.jsonl key -> TensorBoard tag (src/train/trainer.cpp writes both).
TAGS = {
    "loss": "train/loss",
    "lr": "train/lr",
    "grad_norm": "train/grad_norm",
    "tokens_per_s": "train/tokens_per_s",
    "mfu": "train/mfu",
    "val_loss": "val/loss",
    "val_ppl": "val/ppl",
    "retrieval_acc": "retrieval/acc",
    "retrieval_tok_acc": "retrieval/tok_acc",
    "retrieval_logprob": "retrieval/logprob",
}
NOT_SCALARS = {"step", "tokens", "skipped"}
FLOAT_MAX = struct.unpack("<f", b"\xff\xff\x7f\x7f")[0]


def tag_of(key):
    if key in TAGS:
        return TAGS[key]
    moe = re.fullmatch(r"moe\.(\d+)\.(\w+)", key)
    return f"moe/{moe.group(1)}/{moe.group(2)}" if moe else None


def as_float32(x):
    if x is None:  # metrics.jsonl writes NaN and inf as null
        return math.nan
    if math.isfinite(x) and abs(x) > FLOAT_MAX:
        return math.copysign(math.inf, x)
    return struct.unpack("<f", struct.pack("<f", x))[0]


def same(expected, got):
    if math.isnan(expected):
        return math.isnan(got) or math.isinf(got)  # null stood for NaN or inf
    return expected == got


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    run_dir = sys.argv[1]
    metrics_path = os.path.join(run_dir, "metrics.jsonl")
    files = sorted(glob.glob(os.path.join(run_dir, "events.out.tfevents.*")))
    if not os.path.isfile(metrics_path) or not files:
        print(f"{run_dir}: needs metrics.jsonl and events.out.tfevents.* files", file=sys.stderr)
        return 2

    expected = {}  # tag -> [(step, float32 value)]
    with open(metrics_path) as f:
        for number, line in enumerate(f, 1):
            row = json.loads(line)
            for key, value in row.items():
                if key in NOT_SCALARS:
                    continue
                tag = tag_of(key)
                if tag is None:
                    print(f"{metrics_path}:{number}: key '{key}' has no TensorBoard tag", file=sys.stderr)
                    return 1
                expected.setdefault(tag, []).append((row["step"], as_float32(value)))

    events = EventAccumulator(run_dir, size_guidance={"scalars": 0})  # 0: keep every point
    events.Reload()
    tags = set(events.Tags()["scalars"])
    problems = []
    for tag in sorted(set(expected) - tags):
        problems.append(f"{tag}: in metrics.jsonl, not in the event files")
    for tag in sorted(tags - set(expected)):
        problems.append(f"{tag}: in the event files, not in metrics.jsonl")
    for required in ["train/loss"] + (["val/loss"] if "val/loss" in expected else []):
        if required not in tags:
            problems.append(f"{required}: missing")
    for tag in sorted(tags & set(expected)):
        got = [(e.step, e.value) for e in events.Scalars(tag)]
        want = expected[tag]
        if [s for s, _ in got] != [s for s, _ in want]:
            problems.append(f"{tag}: steps differ: events {len(got)} points "
                            f"{got[:1]}..{got[-1:]}, metrics.jsonl {len(want)} {want[:1]}..{want[-1:]}")
            continue
        bad = [(s, w, g) for (s, g), (_, w) in zip(got, want) if not same(w, g)]
        if bad:
            s, w, g = bad[0]
            problems.append(f"{tag}: {len(bad)} of {len(want)} values differ, first at step {s}: "
                            f"metrics.jsonl {w!r}, events {g!r}")
        else:
            print(f"{tag}: {len(want)} points equal")
    for p in problems:
        print(f"MISMATCH {p}", file=sys.stderr)
    print(f"{run_dir}: {len(files)} event file(s), {len(tags)} tags: "
          + ("all equal to metrics.jsonl" if not problems else f"{len(problems)} mismatch(es)"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
