#!/usr/bin/env python3
"""CPU seconds of a command's threads, summed by thread name: which part of a pipeline is busy.

  scripts/thread_cpu.py [--json OUT] [--interval 0.1] -- COMMAND [ARGS...]

Runs COMMAND, reads /proc/PID/task/*/stat every --interval seconds until it exits (a thread's
last reading counts, so a thread loses what it ran after it, at most one interval; one that lives
less than an interval may be missed whole), and
prints per thread name: threads, CPU seconds, and busy = CPU seconds / wall seconds per thread (1.0:
a thread that never waited). hylo names its threads (`hylo data prepare`: prepare-inflate,
prepare-read, prepare-tokens, prepare-hash; the writer is the main thread, named after the
program). Exits with COMMAND's status. Linux only.
"""
import argparse
import json
import os
import subprocess
import sys
import time

TICKS = os.sysconf("SC_CLK_TCK")


def sample(pid, seen):
    """Updates seen[tid] = (name, cpu seconds) from /proc/pid/task."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # the thread ended between the listing and the read
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        seen[tid] = (name, (int(fields[11]) + int(fields[12])) / TICKS)  # utime + stime


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="also write the table here")
    ap.add_argument("--interval", type=float, default=0.1)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("no command given (thread_cpu.py [--json OUT] -- COMMAND ...)")
    start = time.time()
    proc = subprocess.Popen(command)
    seen = {}
    while proc.poll() is None:
        sample(proc.pid, seen)
        time.sleep(args.interval)
    wall = time.time() - start
    by_name = {}
    for name, cpu in seen.values():
        entry = by_name.setdefault(name, {"threads": 0, "cpu_s": 0.0})
        entry["threads"] += 1
        entry["cpu_s"] += cpu
    for entry in by_name.values():
        entry["busy"] = entry["cpu_s"] / entry["threads"] / wall
    print(f"wall {wall:.2f} s, rc {proc.returncode}")
    print(f"{'thread':<16} {'threads':>7} {'cpu s':>8} {'busy':>6}")
    for name, e in sorted(by_name.items(), key=lambda kv: -kv[1]["cpu_s"]):
        print(f"{name:<16} {e['threads']:>7} {e['cpu_s']:>8.2f} {e['busy']:>6.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": command, "wall_s": round(wall, 3), "rc": proc.returncode,
                       "interval_s": args.interval, "threads": by_name}, f, indent=1)
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
