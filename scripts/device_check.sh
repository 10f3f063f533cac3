#!/usr/bin/env bash
# Runs on the GPU machine in ONE device call: the stages named on the command line (default:
# tests curve bench), each writing JSON/logs under $OUT; a short summary table is printed last.
#   tests   the CUDA op table (ctest label gpu, via the test binary)
#   curve   50 steps of the tiny hybrid (hd 64) on the real corpus on cuda, for comparison with
#           the CPU curve recorded under experiments/results/
#   attn    hylo bench attention over full/swa/pbb x hd 64,128 x T 4096,16384
#   bench   hylo bench train on configs/205m-{pbb,swa,full}.yaml (batch 16 x 2048)
#   profile GPU time per op of one 205m-pbb and one 205m-full step (HYLO_PROFILE=1)
#   torch   the PyTorch peer (shared/peers/torch_ref.py train) on the same three models
#
# Prepare here (no GPU needed):  scripts/device_bundle.sh   (builds .devbundle/)
#                                mkdir -p .peers && cp ../shared/peers/torch_ref.py .peers/
# Device call: carry [".devbundle", "data/tokens", ".peers"], command: scripts/device_check.sh STAGE...
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/hylo_out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/.devbundle/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
hylo=.devbundle/bin/hylo
summary="$OUT/summary.txt"
: >"$summary"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
stages=${*:-tests curve bench}

for stage in $stages; do
  echo "== $stage"
  case $stage in
    tests)
      .devbundle/bin/hylo_gpu_tests 2>&1 | tee "$OUT/gpu_tests.log" | tail -25
      echo "gpu tests: $(grep -E 'test cases:' "$OUT/gpu_tests.log" | tail -1)" >>"$summary" ;;
    curve)
      $hylo train configs/tiny.yaml --device cuda --run-dir /tmp/tiny_cuda --overwrite \
        --set model.d_model=128 --set model.n_heads=2 --set train.steps=50 --set train.eval_every=0 \
        --set train.checkpoint_every=0 2>&1 | tail -4
      cp /tmp/tiny_cuda/metrics.jsonl "$OUT/tiny_cuda_metrics.jsonl"
      echo "curve: $(tail -1 /tmp/tiny_cuda/metrics.jsonl)" >>"$summary" ;;
    attn)
      $hylo bench attention --kind full,swa,pbb --hd 64,128 --T 4096,16384 --B 4 --H 16 --Hkv 16 \
        --block 512 --bridge 128 --window 512 --json "$OUT/bench_attention.json" 2>&1 | tail -16 ;;
    bench)
      for cfg in 205m-pbb 205m-swa 205m-full; do
        $hylo bench train configs/$cfg.yaml --steps 10 --warmup 3 --json "$OUT/bench_train_$cfg.json" 2>&1 |
          tee "$OUT/bench_train_$cfg.log" | tail -1 | tee -a "$summary"
      done ;;
    profile)
      for cfg in 205m-pbb 205m-full; do
        HYLO_PROFILE=1 $hylo bench train configs/$cfg.yaml --steps 5 --warmup 2 2>&1 | tee "$OUT/profile_$cfg.log"
      done ;;
    torch)
      python3 .peers/torch_ref.py train --layers 12 --variants pbb,swa,full \
        --deadline $(($(date +%s) + 420)) 2>&1 | tail -12 | tee -a "$summary" ;;
    *) echo "unknown stage $stage" ;;
  esac
done

echo "== summary"
cat "$summary"
