#!/usr/bin/env bash
# The main job (README): installs dependencies, fetches and tokenizes the real corpus, builds,
# trains a PBB hybrid (configs/small.yaml on a GPU, configs/tiny.yaml on the CPU), evaluates its
# last checkpoint and samples from it (temperature 0.8, top-k 40).
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install_deps.sh
./scripts/fetch_data.sh --core
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target hylo
[ -f data/tokens/train_000000.bin ] || build/hylo data prepare --sources core --out data/tokens

# With a GPU: configs/small (19.3M parameters, ~10 minutes on one H200), long enough to write
# readable phrases. On the CPU: the tiny model, a smoke test of the whole pipeline in a few
# minutes (1.66M parameters, 97% of them the embedding: expect val ppl ~1500 and word salad).
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 && grep -q HYLO_CUDA:BOOL=ON build/CMakeCache.txt; then
  config=configs/small.yaml run=runs/small
else
  config=configs/tiny.yaml run=runs/tiny
  echo "main_job: no GPU: training the tiny model on the CPU, a smoke test of train, eval and generate" \
    "(its text will not read well; a GPU trains configs/small.yaml instead)"
fi
build/hylo train "$config" --run-dir "$run" --overwrite "$@"
build/hylo eval "$run"
build/hylo generate "$run" --prompt "The history of the United States" --max-new-tokens 60 \
  --temperature 0.8 --top-k 40 --seed 1
scripts/plot_loss.py "$run" --out "$run/loss.png"
