#!/usr/bin/env bash
# scripts/thread_cpu.py over a real `hylo data prepare` of the core corpus's Gutenberg books at 2
# workers: its JSON must name the pipeline's threads, give the workers CPU time, and carry the
# command's status; a failing command must make it fail too.
set -euo pipefail
hylo=$1 root=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$root"
python3 scripts/thread_cpu.py --json "$tmp/threads.json" --interval 0.02 -- "$hylo" data prepare --input data/raw/gutenberg \
  --workers 2 --out "$tmp/out" >/dev/null
python3 - "$tmp/threads.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
t = d["threads"]
assert d["rc"] == 0, d
assert t["prepare-tokens"]["threads"] == 2 and t["prepare-tokens"]["cpu_s"] > 0, t
assert d["wall_s"] > 0 and d["interval_s"] == 0.02, d
print("threads:", ", ".join(f"{k} {v['cpu_s']} s" for k, v in t.items()))
PY
if python3 scripts/thread_cpu.py -- "$hylo" data prepare --input "$tmp/absent" --out "$tmp/out2" >/dev/null 2>&1; then
  echo "thread_cpu.py returned 0 for a command that failed"
  exit 1
fi
echo ok
