#!/usr/bin/env python3
"""Checks a `hylo export --format hf` directory with transformers itself: AutoTokenizer and
AutoModelForCausalLM load it (trust_remote_code for PBB and MoE models), the tokenizer gives hylo's
ids on the probe text, the model's fp32 logits on the probe ids are hylo's (probe.safetensors)
within 1e-4 relative, cached greedy `generate` equals greedy decoding by full forwards, and,
given `hylo generate --print-ids` output, equals hylo's greedy tokens. Needs torch, transformers
and safetensors (the GPU machine has them; scripts/device_check.sh hf runs it).

  scripts/check_hf.py EXPORT_DIR [--prompt TEXT --hylo-ids FILE] [--new-tokens N]
                      [--mutate none|gate_up|rope|mask] [--device cuda|cpu] [--json OUT]

--mutate breaks one convention in a copy of the directory (gate and up projections swapped, RoPE
theta doubled, the window one key wider or the PBB bridge one wider): the check must then fail.
Exit status 0 when everything matches, 1 when something does not.
"""
import argparse
import json
import shutil
import sys
import tempfile

import torch
import transformers
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, AutoTokenizer


def mutated_copy(src, mutate):
    """A copy of the export with one convention broken; None when the model has nothing to break."""
    dst = tempfile.mkdtemp(prefix="check_hf_")
    shutil.copytree(src, dst, dirs_exist_ok=True)
    cfg = json.load(open(f"{dst}/config.json"))
    if mutate == "gate_up":
        w = load_file(f"{dst}/model.safetensors")
        for name in [n for n in w if n.endswith("mlp.gate_proj.weight")]:
            up = name.replace("gate_proj", "up_proj")
            w[name], w[up] = w[up], w[name]
        save_file(w, f"{dst}/model.safetensors", metadata={"format": "pt"})
    elif mutate == "rope":
        # theta x 2 moved the logits of the full-only tiny model (24 probe positions, attention
        # still near uniform after 5 steps) by only 8.3e-5, under the 1e-4 bar (H100, 2026-12-06):
        # a convention broken must fail, so break it far enough to matter at every position.
        cfg["rope_theta"] /= 100
        cfg["rope_parameters"]["rope_theta"] /= 100
    elif mutate == "mask":
        if cfg.get("hylo_pbb"):
            cfg["hylo_pbb"]["bridge"] += 1
        elif cfg.get("sliding_window"):
            cfg["sliding_window"] += 1  # FlashAttention's window_size=(W, 0): W + 1 keys
        else:
            return None
    json.dump(cfg, open(f"{dst}/config.json", "w"), indent=2)
    return dst


def greedy_by_full_forwards(model, prompt, count, suppressed):
    seq = prompt.clone()
    for _ in range(count):
        with torch.no_grad():
            logits = model(seq).logits[0, -1].clone()
        logits[suppressed] = float("-inf")
        seq = torch.cat([seq, logits.argmax().view(1, 1)], dim=1)
    return seq[0, prompt.shape[1]:].tolist()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("export_dir")
    ap.add_argument("--prompt", default="The old lighthouse keeper")
    ap.add_argument("--hylo-ids", help="`hylo generate --prompt TEXT --print-ids` output (its 'ids:' line)")
    ap.add_argument("--new-tokens", type=int, default=80, help="without --hylo-ids")
    ap.add_argument("--mutate", default="none", choices=["none", "gate_up", "rope", "mask"])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32 here
    torch.backends.cudnn.allow_tf32 = False

    result = {"export": args.export_dir, "mutate": args.mutate, "transformers": transformers.__version__,
              "torch": torch.__version__, "device": args.device}
    directory = args.export_dir if args.mutate == "none" else mutated_copy(args.export_dir, args.mutate)
    if directory is None:
        result.update(match=None, note="nothing to break: the model has no windowed layers")
        print(json.dumps(result))
        if args.json:
            json.dump(result, open(args.json, "w"), indent=1)
        sys.exit(0)
    cfg = json.load(open(f"{directory}/config.json"))
    remote = "auto_map" in cfg
    tok = AutoTokenizer.from_pretrained(directory, trust_remote_code=remote)
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32, trust_remote_code=remote)
    model = model.to(args.device).eval()
    result["class"] = type(model).__name__
    checks = {"class": result["class"] == cfg["architectures"][0]}

    with safe_open(f"{args.export_dir}/probe.safetensors", "pt") as f:
        meta = f.metadata()
        theirs = f.get_tensor("logits").double()
    ids = json.loads(meta["ids"])
    text_ids = tok(meta["text"])["input_ids"]
    checks["tokenizer"] = ids == (text_ids * (len(ids) // len(text_ids) + 1))[: len(ids)]
    result["tokenizer_ids"] = text_ids[:12]
    with torch.no_grad():
        ours = model(torch.tensor([ids], device=args.device)).logits[0].double().cpu()
    rel = ((ours - theirs).norm() / theirs.norm()).item()
    result["positions"] = len(ids)
    result["logits_rel_err"] = rel
    result["argmax_agree"] = (ours.argmax(-1) == theirs.argmax(-1)).double().mean().item()
    checks["logits"] = rel < 1e-4

    # Greedy decoding three ways: generate with its cache, full forwards, and hylo's own.
    gen = model.generation_config
    suppressed = torch.tensor(gen.suppress_tokens or [], dtype=torch.long)
    prompt = torch.tensor([tok(args.prompt)["input_ids"] or [tok.eos_token_id]], device=args.device)
    hylo_ids = None
    if args.hylo_ids:
        line = [l for l in open(args.hylo_ids) if l.startswith("ids:")][-1]
        hylo_ids = [int(t) for t in line.split()[1:]]
    count = len(hylo_ids) if hylo_ids is not None else args.new_tokens
    with torch.no_grad():  # hylo does not stop at <|endoftext|>: neither does this
        cached = model.generate(prompt, max_new_tokens=count, min_new_tokens=0, do_sample=False, use_cache=True,
                                eos_token_id=None, pad_token_id=tok.eos_token_id)[0, prompt.shape[1]:].tolist()
    full = greedy_by_full_forwards(model, prompt, count, suppressed.to(args.device))
    result["prompt_ids"] = prompt[0].tolist()
    result["generated"] = cached
    checks["generate_cached_equals_full"] = cached == full
    if cached != full:
        result["generate_first_difference"] = next(i for i, (a, b) in enumerate(zip(cached, full)) if a != b)
    if hylo_ids is not None:
        checks["generate_equals_hylo"] = cached == hylo_ids
        if cached != hylo_ids:
            result["hylo_ids"] = hylo_ids
            diff = [i for i, (a, b) in enumerate(zip(cached, hylo_ids)) if a != b]
            result["hylo_first_difference"] = diff[0] if diff else min(len(cached), len(hylo_ids))
    result["checks"] = checks
    result["match"] = all(checks.values())
    print(json.dumps(result))
    if args.json:
        json.dump(result, open(args.json, "w"), indent=1)
    if directory != args.export_dir:
        shutil.rmtree(directory)
    sys.exit(0 if result["match"] else 1)


if __name__ == "__main__":
    main()
