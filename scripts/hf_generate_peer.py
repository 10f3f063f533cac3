#!/usr/bin/env python3
"""The transformers peer of `hylo bench generate`: greedy decoding tokens/s of a
`hylo export --format hf` directory with transformers' own generate and a static cache, bf16.

  scripts/hf_generate_peer.py EXPORT_DIR [--label NAME] [--batch 1 16 64] [--prompt 512 4096]
                              [--new-tokens 128] [--repeat 1] [--json OUT]

Per batch x prompt length: random prompt ids (one seed), then generate with
cache_implementation="static" and min_new_tokens = max_new_tokens, so that it never stops early.
Timed as hylo's decode: hylo prefills the prompt, then runs new_tokens steps that each feed every
sequence its last token, so here decode_s = the time of max_new_tokens = new_tokens + 1 minus the
time of max_new_tokens = 1 (the prefill forward and its token, reported as prefill_s), and
decode_tok_s = batch * new_tokens / decode_s. Each setting runs once untimed first, then --repeat
times timed: the row is the run of median decode time, with the slowest and fastest decode rates
(decode_tok_s_min / _max), as hylo's --repeat. The rows have
the fields of hylo's (bench/bench_generate.cpp); kv_bytes is what the static cache allocated.
Needs torch and transformers (the GPU machine has them; scripts/device_check.sh generate runs it).
"""
import argparse
import datetime
import json
import time

import torch
import transformers
from transformers import AutoModelForCausalLM

R50K_TOKENS = 50257  # r50k_base's ids; the model's vocabulary pads above them


def timed_generate(model, prompt, new_tokens):
    """Seconds of one greedy generate of new_tokens tokens, and its cache."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new_tokens,
                         min_new_tokens=new_tokens, do_sample=False, cache_implementation="static",
                         return_dict_in_generate=True)
    torch.cuda.synchronize()
    assert out.sequences.shape[1] == prompt.shape[1] + new_tokens
    return time.perf_counter() - start, out.past_key_values


def cache_bytes(cache):
    return sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values)
               if t is not None)  # a layer's tensors are made at its first update


def write_json(args, model, rows):
    result = {"bench": "generate", "peer": "transformers",
              "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
              "device": torch.cuda.get_device_name(), "transformers": transformers.__version__,
              "torch": torch.__version__, "class": type(model).__name__,
              "settings": {"export": args.export_dir, "batches": args.batch, "prompts": args.prompt,
                           "new_tokens": args.new_tokens, "repeat": args.repeat, "seed": args.seed, "dtype": "bf16",
                           "cache": "static", "attention": model.config._attn_implementation,
                           "decode": "time of max_new_tokens = new_tokens + 1 minus that of max_new_tokens = 1"},
              "rows": rows}
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("export_dir")
    ap.add_argument("--label", help="the rows' config name (default: EXPORT_DIR)")
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument("--prompt", type=int, nargs="+", default=[512, 4096], help="prompt lengths")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=1, help="timed runs of each setting (the row: the median)")
    ap.add_argument("--seed", type=int, default=0, help="of the prompt ids")
    ap.add_argument("--json")
    args = ap.parse_args()
    for flag, values in (("--batch", args.batch), ("--prompt", args.prompt), ("--new-tokens", [args.new_tokens]),
                         ("--repeat", [args.repeat])):
        bad = [v for v in values if v < 1]
        if bad:
            ap.error(f"{flag} {bad[0]} must be >= 1")

    cfg = json.load(open(f"{args.export_dir}/config.json"))
    model = AutoModelForCausalLM.from_pretrained(args.export_dir, dtype=torch.bfloat16,
                                                 trust_remote_code="auto_map" in cfg).to("cuda").eval()
    vocab_valid = min(cfg["vocab_size"], R50K_TOKENS)
    label = args.label or args.export_dir
    print(f"transformers {transformers.__version__} {type(model).__name__}, bf16, static cache, "
          f"{torch.cuda.get_device_name()}")
    print(f"{'config':<12} {'batch':>5} {'prompt':>6} {'new':>4} | {'prefill s':>9} {'decode tok/s':>12} "
          f"{'ms/step':>8} {'KV':>10}")
    rows = []
    for batch in args.batch:
        for length in args.prompt:
            ids = torch.randint(0, vocab_valid, (batch, length), generator=torch.Generator().manual_seed(args.seed))
            prompt = ids.to("cuda")
            runs = []  # (decode_s, prefill_s) of each timed run
            with torch.no_grad():
                timed_generate(model, prompt, args.new_tokens + 1)  # untimed: allocations, kernel choices
                for _ in range(args.repeat):
                    prefill_s, _ = timed_generate(model, prompt, 1)
                    total_s, cache = timed_generate(model, prompt, args.new_tokens + 1)
                    runs.append((total_s - prefill_s, prefill_s))
            runs.sort()
            decode_s, prefill_s = runs[len(runs) // 2]
            rate = {name: round(batch * args.new_tokens / seconds, 1)
                    for name, seconds in (("median", decode_s), ("min", runs[-1][0]), ("max", runs[0][0]))}
            row = {"config": label, "device": "cuda", "batch": batch, "prompt": length, "new_tokens": args.new_tokens,
                   "prefill_s": round(prefill_s, 4), "decode_s": round(decode_s, 4),
                   "decode_tok_s": rate["median"], "decode_tok_s_min": rate["min"],
                   "decode_tok_s_max": rate["max"], "runs": len(runs),
                   "ms_per_step": round(1e3 * decode_s / args.new_tokens, 3), "kv_bytes": cache_bytes(cache)}
            rows.append(row)
            if args.json:  # after every row: a call stopped at its time limit keeps what it measured
                write_json(args, model, rows)
            print(f"{label:<12} {batch:>5} {length:>6} {args.new_tokens:>4} | {row['prefill_s']:>9.4f} "
                  f"{row['decode_tok_s']:>12.1f} {row['ms_per_step']:>8.3f} {row['kv_bytes'] / 2**20:>7.1f}MiB",
                  flush=True)


if __name__ == "__main__":
    main()
