#!/usr/bin/env bash
# The main job (README): installs dependencies, fetches and tokenizes the real corpus, builds,
# trains the tiny PBB hybrid (configs/tiny.yaml), evaluates its last checkpoint and samples from it. Uses the GPU
# when one is present, the CPU otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install_deps.sh
./scripts/fetch_data.sh --core
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target hylo
[ -f data/tokens/train_000000.bin ] || build/hylo data prepare --sources core --out data/tokens

gpu=()
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 && grep -q HYLO_CUDA:BOOL=ON build/CMakeCache.txt; then
  # The CUDA attention kernels take head dims 64 and 128; tiny's 32-wide model has head dim 8.
  gpu=(--device cuda --set model.d_model=128 --set model.n_heads=2)
fi
build/hylo train configs/tiny.yaml "${gpu[@]}" --run-dir runs/tiny --overwrite "$@"
build/hylo eval runs/tiny
build/hylo generate runs/tiny --prompt "The history of the United States" --max-new-tokens 40
scripts/plot_loss.py runs/tiny --out runs/tiny/loss.png
