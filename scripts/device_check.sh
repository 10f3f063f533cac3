#!/usr/bin/env bash
# Runs on the GPU machine in ONE device call: the CUDA test table, the attention and training
# benchmarks, a GPU-vs-CPU loss curve and (optionally) the PyTorch peer, side by side. Prints a
# short table last and writes JSON under $OUT.
#
# Prepare here (no GPU needed):  scripts/device_bundle.sh   (builds .devbundle/)
#                                mkdir -p .peers && cp ../shared/peers/torch_ref.py .peers/
# Device call: carry [".devbundle", "data/tokens", ".peers"], command: scripts/device_check.sh [--torch]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/hylo_out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/.devbundle/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0
hylo=.devbundle/bin/hylo
summary="$OUT/summary.txt"
: >"$summary"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"

echo "== gpu tests"
.devbundle/bin/hylo_gpu_tests 2>&1 | tee "$OUT/gpu_tests.log" | tail -25
echo "gpu tests: $(tail -2 "$OUT/gpu_tests.log" | head -1)" >>"$summary"

echo "== attention benchmark"
$hylo bench attention --kind full,swa,pbb --hd 64,128 --T 4096,16384 --B 4 --H 16 --Hkv 16 \
  --block 512 --bridge 128 --window 512 --json "$OUT/bench_attention.json" 2>&1 | tee "$OUT/bench_attention.log" | tail -20

echo "== training benchmark (batch 16 x 2048)"
for cfg in 205m-pbb 205m-swa 205m-full; do
  $hylo bench train configs/$cfg.yaml --steps 10 --warmup 3 --json "$OUT/bench_train_$cfg.json" 2>&1 | tail -1 |
    tee -a "$summary"
done

echo "== loss curve: cuda vs cpu reference (tiny, hd 64)"
$hylo train configs/tiny.yaml --device cuda --run-dir /tmp/tiny_cuda --overwrite \
  --set model.d_model=128 --set model.n_heads=2 --set train.steps=50 --set train.eval_every=0 \
  --set train.checkpoint_every=0 2>&1 | tail -3
cp /tmp/tiny_cuda/metrics.jsonl "$OUT/tiny_cuda_metrics.jsonl"

if [ "${1:-}" = "--torch" ]; then
  echo "== PyTorch peer"
  python3 .peers/torch_ref.py train --layers 12 --variants pbb,swa,full --deadline $(($(date +%s) + 300)) 2>&1 | tail -15
fi

echo "== summary"
cat "$summary"
