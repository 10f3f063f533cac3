#!/usr/bin/env python3
"""Benchmark of `hylo data prepare` on a synthetic jsonl.zst corpus (issue 34).

    scripts/bench_prepare.py --size-mb 2048 --workers 1,2,4,8,16 --json OUT.json
    scripts/bench_prepare.py --sample-out data/bench_corpus --size-mb 48   # only write a corpus

The corpus is made from the real text in data/raw (scripts/fetch_data.sh --core): every file is
cut into documents of 1-8 KB at paragraph breaks, and the documents are shuffled (seeded) and
repeated, reshuffled each time, until the jsonl holds --size-mb MB; each line is
{"id", "text", "source", "url"} like a FineWeb row, compressed by the zstd command (-3).

Then `hylo data prepare --input CORPUS --workers W` runs for each worker count; the JSON gets
per count the wall time, MB/s of document text (the tokenizer's input) and of jsonl, tokens/s,
peak RSS and CPU time of the child (getrusage), text MB per CPU second, the speedup over the first count, and whether the shards are
byte-identical to the first count's. A benchmark, not a test: it prints a table.
"""
import argparse
import datetime
import hashlib
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def documents_of(raw_dir):
    docs = []
    for source in sorted(os.listdir(raw_dir)):
        folder = os.path.join(raw_dir, source)
        if not os.path.isfile(os.path.join(folder, ".fetched")):
            continue
        for name in sorted(os.listdir(folder)):
            if name.startswith("."):
                continue
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                text = f.read()
            rng = random.Random(name)
            piece, target = [], rng.randint(1000, 8000)
            for paragraph in text.split("\n\n"):
                piece.append(paragraph)
                if sum(len(p) for p in piece) >= target:
                    docs.append((source, name, "\n\n".join(piece)))
                    piece, target = [], rng.randint(1000, 8000)
            if piece:
                docs.append((source, name, "\n\n".join(piece)))
    if not docs:
        sys.exit(f"bench_prepare: no fetched sources under {raw_dir} (run scripts/fetch_data.sh --core)")
    return docs


def make_corpus(path, size_bytes, raw_dir, seed):
    """Writes PATH (.jsonl.zst); returns (jsonl bytes, documents, text bytes)."""
    if shutil.which("zstd") is None:
        sys.exit("bench_prepare: the zstd command is needed to write the corpus (apt-get install zstd)")
    docs = documents_of(raw_dir)
    rng = random.Random(seed)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "wb") as out:
        z = subprocess.Popen(["zstd", "-3", "-q", "-c", "-T0"], stdin=subprocess.PIPE, stdout=out)
        written = count = text_bytes = 0
        while written < size_bytes:
            order = list(range(len(docs)))
            rng.shuffle(order)
            for i in order:
                source, name, text = docs[i]
                line = json.dumps({"id": count, "text": text, "source": source,
                                   "url": f"https://example.org/{source}/{name}#{count}"}) + "\n"
                data = line.encode("utf-8")
                z.stdin.write(data)
                written += len(data)
                text_bytes += len(text.encode("utf-8"))
                count += 1
                if written >= size_bytes:
                    break
        z.stdin.close()
        if z.wait() != 0:
            sys.exit("bench_prepare: zstd failed")
    return written, count, text_bytes


def run_prepare(hylo, corpus, workers, out_dir, extra):
    shutil.rmtree(out_dir, ignore_errors=True)
    cmd = [hylo, "data", "prepare", "--input", corpus, "--workers", str(workers), "--out", out_dir] + extra
    start = time.time()
    with open(out_dir + ".log", "w") as log:
        child = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(child.pid, 0)
    seconds = time.time() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"bench_prepare: {' '.join(cmd)} failed; see {out_dir}.log")
    with open(os.path.join(out_dir, "manifest.json")) as f:
        manifest = json.load(f)
    digest = hashlib.sha256()
    for shard in manifest["shards"]:
        digest.update(shard["file"].encode() + shard["crc32"].encode())
    tokens = manifest["tokens"]["train"] + manifest["tokens"]["val"]
    text = sum(i["text_bytes"] for i in manifest["inputs"])
    return {"seconds": seconds, "tokens": tokens, "text_bytes": text, "peak_rss_kb": usage.ru_maxrss,
            "cpu_seconds": usage.ru_utime + usage.ru_stime, "shards": digest.hexdigest()}


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size-mb", type=float, default=2048, help="jsonl size of the corpus, MB (1e6 bytes)")
    ap.add_argument("--workers", default="1,2,4,8,16", help="comma-separated worker counts")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--hylo", default=os.path.join(ROOT, "build", "hylo"))
    ap.add_argument("--raw", default=os.path.join(ROOT, "data", "raw"))
    ap.add_argument("--work", default="/tmp/hylo_bench_prepare", help="corpus and outputs go here")
    ap.add_argument("--corpus", help="use this jsonl(.zst) instead of making one")
    ap.add_argument("--sample-out", help="only write DIR/sample.jsonl.zst and DIR/sample.bytes, then stop")
    ap.add_argument("--seed", type=int, default=34)
    ap.add_argument("--machine", default="", help="how to name this machine in the JSON")
    ap.add_argument("--keep", action="store_true", help="keep the corpus and the outputs")
    args = ap.parse_args()
    size = int(args.size_mb * 1e6)

    if args.sample_out:
        path = os.path.join(args.sample_out, "sample.jsonl.zst")
        jsonl, docs, _ = make_corpus(path, size, args.raw, args.seed)
        with open(os.path.join(args.sample_out, "sample.bytes"), "w") as f:
            f.write(f"{jsonl}\n")
        print(f"wrote {path}: {docs} documents, {jsonl / 1e6:.1f} MB of jsonl, {os.path.getsize(path) / 1e6:.1f} MB")
        return

    os.makedirs(args.work, exist_ok=True)
    if args.corpus:
        corpus, jsonl, docs, text = args.corpus, None, None, None
    else:
        corpus = os.path.join(args.work, "corpus.jsonl.zst")
        t = time.time()
        jsonl, docs, text = make_corpus(corpus, size, args.raw, args.seed)
        print(f"corpus: {docs} documents, {jsonl / 1e6:.1f} MB jsonl, {os.path.getsize(corpus) / 1e6:.1f} MB zst "
              f"({time.time() - t:.0f} s)")
    rows = []
    print(f"{'workers':>8} {'seconds':>9} {'text MB/s':>10} {'MB/s/wkr':>9} {'Mtok/s':>8} {'speedup':>8} "
          f"{'peak RSS MiB':>13} {'same ids':>9} {'MB/cpu-s':>9}")
    for w in [int(x) for x in args.workers.split(",")]:
        r = run_prepare(args.hylo, corpus, w, os.path.join(args.work, f"out_{w}"), [])
        r["workers"] = w
        r["text_mb_per_s"] = r["text_bytes"] / 1e6 / r["seconds"]
        r["jsonl_mb_per_s"] = jsonl / 1e6 / r["seconds"] if jsonl else None
        r["text_mb_per_cpu_s"] = r["text_bytes"] / 1e6 / r["cpu_seconds"]  # shared machines: wall time lies
        r["tokens_per_s"] = r["tokens"] / r["seconds"]
        r["peak_rss_mib"] = r["peak_rss_kb"] / 1024
        r["speedup"] = rows[0]["seconds"] / r["seconds"] if rows else 1.0
        r["identical_to_first"] = r["shards"] == (rows[0]["shards"] if rows else r["shards"])
        rows.append(r)
        print(f"{w:>8} {r['seconds']:>9.2f} {r['text_mb_per_s']:>10.2f} {r['text_mb_per_s'] / w:>9.2f} "
              f"{r['tokens_per_s'] / 1e6:>8.3f} {r['speedup']:>8.2f} {r['peak_rss_mib']:>13.1f} "
              f"{str(r['identical_to_first']):>9} {r['text_mb_per_cpu_s']:>9.2f}")
        if not args.keep:
            shutil.rmtree(os.path.join(args.work, f"out_{w}"), ignore_errors=True)
    if args.json:
        # The revision the binary was built from (hylo --version), not the tree's HEAD of the moment.
        version = subprocess.run([args.hylo, "--version"], capture_output=True, text=True).stdout.strip()
        commit = version.split("git ")[-1].rstrip(")") if "git " in version else "unknown"
        result = {
            "bench": "data_prepare",
            "what": "hylo data prepare of a synthetic jsonl.zst (data/raw documents, shuffled and repeated)",
            "machine": args.machine or f"{cpu_name()}, {os.cpu_count()} hardware threads",
            "commit": commit,
            "date": datetime.date.today().isoformat(),
            "command": " ".join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:]),
            "corpus": {"jsonl_bytes": jsonl, "zst_bytes": os.path.getsize(corpus), "documents": docs,
                       "text_bytes": text},
            "rows": [{k: r[k] for k in ("workers", "seconds", "cpu_seconds", "text_mb_per_s", "text_mb_per_cpu_s", "jsonl_mb_per_s",
                                        "tokens", "tokens_per_s", "speedup", "peak_rss_mib", "identical_to_first")}
                     for r in rows],
        }
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
        print(f"wrote {args.json}")
    if not args.keep and not args.corpus:
        os.remove(corpus)


if __name__ == "__main__":
    main()
