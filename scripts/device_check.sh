#!/usr/bin/env bash
# Runs on the GPU machine in ONE device call: the stages named on the command line (default:
# tests curve bench), each writing JSON/logs under $OUT; a short summary table is printed last.
#   tests   the CUDA op table (ctest label gpu, via the test binary)
#   curve   50 steps of the tiny hybrid (hd 64) on the real corpus on cuda, for comparison with
#           the CPU curve recorded under experiments/results/correctness/
#   dp      the curve's run under `mpirun -np 1`, without and with ZeRO-1: the data-parallel path
#           (MPI, NCCL, gradient buckets: all-reduces, or under ZeRO-1 reduce-scatters and all-gathers;
#           replica hash, rank 0's checkpoint)
#           on one GPU; the losses of both must equal curve's (run curve first)
#   nccl    the GPU test of expert parallelism's exchange, split and gather through NCCL, under
#           `mpirun -np 1` (NCCL refuses two ranks on one GPU; the GPU tests skip it otherwise)
#   gpus    data and expert parallelism across all the machine's GPUs (kinds nvidia-h200-x2 and up;
#           skipped on one), $GPUS_N ranks (default: the GPU count), each check as the MPI CPU
#           tests make it: the tiny curve under ZeRO-1 against plain data parallelism (clip off),
#           a run stopped at step 25 and resumed against the straight run (bit-exact), moe-tiny with
#           experts over the ranks against plain data parallelism; then weak scaling, 16 x 2048
#           tokens per rank: 205m-pbb under data parallelism and moe-8e-pbb with and without
#           expert parallelism, tokens/s of steps 6-20 against one GPU. GPUS_DEVICE=cpu runs the
#           checks on the CPU (not the throughput), to try the stage without a GPU
#   dp_cost  what the data-parallel machinery costs on one GPU: configs/205m-pbb.yaml for 20 steps
#           alone and under `mpirun -np 1` (NCCL; buckets, hooks, sums that move nothing), without and
#           with ZeRO-1; mean tokens/s of steps 6-20 of each (metrics.jsonl)
#   export  hylo export of four trained models (the curve's tiny run, so run curve first; an MoE
#           tiny with router biases; a GQA swa tiny with QK-norm and an untied head; 205m-pbb for 10
#           steps, its probe across two 512-token blocks), each checked by
#           scripts/check_export.py (PyTorch, float64) against the probe (exit 0); then each check
#           with a convention broken on purpose (rope, mask), which must fail (exit 1, no match)
#   hf      hylo export --format hf of six tiny models trained 5 steps on the CPU (full only ->
#           Llama, swa hybrid and NoPE global -> SmolLM3, QK-norm swa -> Qwen3, the pbb hybrid and
#           moe-tiny -> hylo's modeling_hylo.py), each checked by scripts/check_hf.py with
#           transformers: fp32 logits against hylo's probe, cached generate against full forwards and
#           against `hylo generate --print-ids` (exit 0); then each with a convention broken on
#           purpose (gate_up, rope, mask), which must fail (exit 1); and `hylo import` of each export
#           must generate hylo's ids again. Needs data/tokenizer in the carry.
#   tensorboard  60 tiny steps on cuda; scripts/check_tensorboard.py reads the event file with
#           TensorBoard's own reader against metrics.jsonl
#   prepare hylo data prepare of a synthetic jsonl.zst (data/bench_corpus/sample.jsonl.zst, carried,
#           repeated $PREPARE_REPEAT times) at $PREPARE_WORKERS workers (default 1 2 4 8 16): wall
#           time and peak RSS of each (/usr/bin/time -v), shard 0 compared between 1 and 16 workers
#   prepare_solo  1, then $PREPARE_SOLO_N (default 16) independent 1-worker prepares of the same
#           corpus at once: the aggregate the host gives single-threaded tokenizers without the
#           pipeline's shared reader and writer (is 12x at 16 workers the host's or hylo's limit?)
#   prepare_threads  the same prepare at $PREPARE_THREADS_WORKERS (default 16) workers under
#           scripts/thread_cpu.py: CPU seconds and busy share of the reader, the writer and the workers
#   attn    hylo bench attention over full/swa/pbb x hd 64,128 x T 4096,16384 (timed as the peers'
#           do_bench times: 25 ms warm-up, ~250 ms of calls, L2 flushed before each)
#   attn_ab the attn stage's shapes, alternating this bundle's hylo with $AB_BASE (a hylo of another
#           commit, carried in .devbundle/bin) twice: an A/B of a kernel change in one call
#   torch_attn  the PyTorch peer's attention (SDPA flash/cuDNN, FlexAttention) on the same shapes
#   attn_span  pbb(b, 128) against swa(b / 2), b = 512, 1024, 2048 (equal key tiles per query
#           tile), hd 64/128, T 4096/16384: per-visited-pair ratios (scripts/attention_pair_ratio.py)
#   bench   hylo bench train on configs/205m-{pbb,swa,full}.yaml (batch 16 x 2048)
#   fp8     train.precision: fp8 against bf16: hylo bench train on each of $FP8_CONFIGS (default
#           205m-pbb; e.g. "205m-pbb 2b-pbb") in bf16 and with --set train.precision=fp8 ($FP8_SET="k=v
#           ..." also to every run, e.g. train.micro_batch_size=8 for the 2B on an H100), then the
#           PyTorch peer of the 205M model (pbb, 12 layers; FP8_PEER=0 leaves it out)
#   profile GPU time per op of $PROFILE_CONFIGS (default 205m-pbb 205m-full), averaged over 5
#           steps after 2 warm-up steps (HYLO_PROFILE=1), in each precision of $PROFILE_PRECISIONS
#           (default bf16)
#   dense2b hylo bench train on configs/2b-{pbb,full}.yaml, recompute off and on, then the PyTorch
#           peer at the same width (d 2560, 24 layers, 20 heads, SwiGLU 6912) in the same call;
#           $DENSE2B_CONFIGS, $DENSE2B_RECOMPUTE and $DENSE2B_PEER (torch variants) narrow it;
#           $DENSE2B_SET="k=v ..." goes to every hylo run as --set (e.g. train.micro_batch_size=8 on an
#           H100's 80 GB, where the peer halves its batch itself)
#   torch   the PyTorch peer (shared/peers/torch_ref.py train) on the same three models
#   moe     hylo bench moe (expert GEMMs) and bench train on configs/moe-{8e,2b}-pbb.yaml with
#           each expert-GEMM path of $MOE_PATHS (default: grouped loop)
#   torch_moe  the PyTorch peer on moe-8e-pbb (16 layers, per-expert loop)
#   balance MoE load balance on the real corpus: moe-8e-pbb at 4 layers, the config's batch
#           (16 x 2048), 1000 steps, aux 0.01 plus the router bias at each rate of
#           $BALANCE_RATES (default 0 0.001 0.003; metrics.jsonl of each; scripts/plot_moe_balance.py)
#   ncu_attn  Nsight Compute on one forward + backward of each attention kernel (hd 64 and 128,
#           swa(512), T 4096): speed of light, busiest pipe, eligible warps and stall reasons, occupancy
#   ncu_loop  Nsight Compute source counters of the forward and both backward kernels for swa(512)
#           and pbb(512,128) at hd $NCU_HD (default 64), T 4096: the share of warp stalls inside the
#           tile loops (scripts/ncu_loop_share.py) — what a block pays once vs per tile
#   ncu_mem  Nsight Compute DRAM and L2 counters of the forward and both backward kernels for swa(512)
#           and pbb(512,128) at hd 64/128, T 4096/16384 (scripts/ncu_mem_table.py): how close each
#           runs to the memory system's limits
#   decode  hylo bench decode, batch 16/64, hd 64/128, b = 512, bridge $DECODE_BRIDGE (default
#           128), W = $DECODE_WINDOW (default 512 = b; 1024 = 2b is the window PBB(512)'s reach
#           matches, the paper's "half the local KV cache"): MHA (H 16), then GQA (Hkv 4)
#   torch_decode  the PyTorch peer's decode (best of SDPA backends and matmul per cache) on the
#           same shapes
#   generate  whole-model greedy decoding: hylo bench generate on 205m-{pbb,swa,full} (random
#           weights) at batch 1/16/64 x prompt 512/4096, 128 new tokens, into bench_generate.json;
#           then per config a 1-step checkpoint, exported with --format hf, timed by
#           scripts/hf_generate_peer.py (transformers generate, static cache, bf16) on the same
#           settings into hf_generate_<config>.json. $GENERATE_CONFIGS (default 205m-pbb 205m-swa
#           205m-full) and $GENERATE_BATCHES (default 1 16 64) narrow it; each setting is timed
#           $GENERATE_REPEAT times on both sides (default 3: median and range). Needs data/tokens and
#           data/tokenizer in the carry.
#   sample  what the main job trains with a GPU (configs/small.yaml) and 205m-pbb for
#           $SAMPLE_205M_STEPS steps (default 1000), on every source when data/tokens-all.tar.xz is
#           carried: train log, eval (val, ppl on the held-out text), samples at temperature 0.8, top-k 40
#   ablation  the sweep experiments/$ABLATION.yaml (default hybrids-small: PBB vs SWA hybrids vs
#           all-full at the small scale), each run then evaluated (val, retrieval, last word) and
#           `hylo report`; the sweep's files except checkpoints come back under $ABLATION/.
#           ABLATION_SET="k=v k=v" (values without spaces): each passed on as --set.
#           ABLATION_TUNED=FILE: each point's tuned rate from a `hylo report --tune` tuned.json
#           (`hylo sweep --tuned`; experiments/study-small.yaml).
#           ABLATION_SEEDS="0 2": the sweep once per seed (--set train.seed=N) into seed-N/$ABLATION/,
#           then `hylo report` over them all into pooled/. ABLATION_ONLY="0,3": only these points
#           (`hylo sweep --only`), to split one sweep across calls. ABLATION_PARALLEL=N: N points at
#           a time on the one GPU (default 1). ABLATION_TASKS: the eval tasks
#           (default val,retrieval,lastword; ppl needs data/raw/heldout in the carry);
#           ABLATION_EVAL_ARGS: more `hylo eval` flags, e.g. "--text data/raw/austen/*.txt --n 500"
#           (the protocol's last word: 500 passages of held-out Austen; carry data/raw/austen). Sweeps on every source (hybrids-*-all,
#           hybrids-*-retrieval, small-retrieval-long, study-*) need data/tokens-all.tar.xz in the carry, made
#           here by `hylo data prepare --sources all --out data/tokens-all` and
#           `tar cf - -C data tokens-all | xz -9 -T0 >data/tokens-all.tar.xz` (35 MB since 2026-12-07).
#           The held-out text may travel packed too, as data/heldout-text.tar.xz (0.7 MB instead of
#           2.4): `tar cf - -C data raw/heldout raw/austen | xz -9 >data/heldout-text.tar.xz`. The
#           protocol's carry, within the 64 MiB: [".devbundle", "data/tokenizer/r50k_base.tiktoken"
#           (the one file eval reads), "data/tokens-all.tar.xz", "data/heldout-text.tar.xz"].
#
# Everything, summary.txt included, goes into $OUT/results.tgz (the device tool returns only a few
# files); summary.txt is also copied next to it. Both are rewritten after every stage and when a
# TERM stops the script, so a call cut off by its time limit still returns the stages it finished
# and what the stopped one wrote. For the same reason run the script bare, not through `| tail`:
# tail prints nothing until its input ends, and a call killed before then comes back with no output.
#
# Prepare here (no GPU needed):  scripts/device_bundle.sh   (builds .devbundle/, the PyTorch peer in it)
# Device call: carry [".devbundle", "data/tokens"] (ablation: also "data/tokenizer", which
# the last-word task reads), command: scripts/device_check.sh STAGE...
# Before any stage the script checks that every stage named finds what it reads (the bundle, the
# peer, the carried data): a missing carry ends the call at once with the path, not minutes in.
# The call's time limit (DEVICE_LIMIT_S, default 600 s, the device tool's most) is kept by the script
# itself: no stage starts, and no ablation point, within DEVICE_MARGIN_S (default 40 s) of it, and the
# running ones are stopped there, so that the results are packed before the tool kills the call
# (a killed call returns only what was packed before).
# (a cold machine takes ~60 s before the first stage, and 1-2 minutes of device time; tests ~20 s,
# bench ~60 s, torch ~60 s; ablation ~4 min for hybrids-small's 9 runs, ~6 min for hybrids-small-all's,
# ~7.5 min for hybrids-205m-all's 3; tests + curve + dp + dp_cost 243 s, curve + export 152 s).
set -uo pipefail
cd "$(dirname "$0")/.." || exit
started=$(date +%s)
limit_at=$((started + ${DEVICE_LIMIT_S:-600} - ${DEVICE_MARGIN_S:-40}))  # stop here, then pack
seconds_left() { echo $((limit_at - $(date +%s))); }
OUT=${OUT:-/tmp/hylo_out}
FINAL_OUT=$OUT
OUT=$(mktemp -d)  # stage outputs; packed into $FINAL_OUT/results.tgz after each stage
mkdir -p "$FINAL_OUT"
[ -f .devbundle/bundle.tar.xz ] && tar xJf .devbundle/bundle.tar.xz -C .devbundle  # scripts/device_bundle.sh
[ -f data/heldout-text.tar.xz ] && python3 -m tarfile -e data/heldout-text.tar.xz data/  # the ablation's help above
export LD_LIBRARY_PATH="$PWD/.devbundle/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
hylo=.devbundle/bin/hylo
peer=.devbundle/peers/torch_ref.py  # ../shared/peers/torch_ref.py, put there by scripts/device_bundle.sh
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)  # the ncu_* stages
summary="$OUT/summary.txt"
: >"$summary"
stages=${*:-tests curve bench}

# What each stage reads from the carry; every missing path is named before the GPU is touched.
missing=()
need() { for path in "$@"; do [ -e "$path" ] || missing+=("$stage: $path"); done; }
for stage in $stages; do
  need "$hylo"
  case $stage in
    torch_attn | torch | torch_moe | torch_decode) need "$peer" ;;
    fp8) [ "${FP8_PEER:-1}" = 0 ] || need "$peer" ;;
    dense2b) need "$peer" ;;
    prepare | prepare_solo | prepare_threads) need data/bench_corpus/sample.jsonl.zst data/bench_corpus/sample.bytes ;;
    curve | dp | tensorboard) need data/tokens ;;
    hf | generate) need data/tokenizer data/tokens ;;
    ablation)
      need data/tokenizer "experiments/${ABLATION:-hybrids-small}.yaml"
      grep -q 'data/tokens-all' "experiments/${ABLATION:-hybrids-small}.yaml" 2>/dev/null &&
        { [ -d data/tokens-all ] || need data/tokens-all.tar.xz; }
      case ${ABLATION_TASKS:-} in *ppl*) need data/raw/heldout/devil.txt ;; esac
      case ${ABLATION_EVAL_ARGS:-} in *austen*) need data/raw/austen ;; esac ;;
  esac
done
if [ ${#missing[@]} -gt 0 ]; then
  printf 'device_check: not in the carry (nothing was run): %s\n' "${missing[@]}" | sort -u | tee "$summary"
  cp "$summary" "$FINAL_OUT/summary.txt"
  exit 2
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"

# The attn stage's benchmark (full/swa/pbb x hd 64,128 x T 4096,16384) with hylo binary $1, JSON to $2.
bench_attention() {
  "$1" bench attention --kind full,swa,pbb --hd 64,128 --T 4096,16384 --B 4 --H 16 --Hkv 16 --block 512 \
    --bridge 128 --window 512 --json "$2" 2>&1
}

# Mean tokens/s of a run's steps 6 and on, from its metrics.jsonl (the first steps warm up).
mean_tokens_per_s() {
  python3 -c 'import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if "tokens_per_s" in l][5:]
print("%.0f" % (sum(r["tokens_per_s"] for r in rows) / len(rows)))' "$1"
}

# Packs what the stages wrote so far; after every stage, and when the call's time limit stops the
# script (TERM), so that the stage it stopped inside keeps the JSON its commands wrote as they went.
# Written aside and renamed, so that a call killed mid-pack, or two lanes packing at once, leave
# the last whole archive rather than a torn one.
pack() {
  tar czf "$FINAL_OUT/.results.tgz.$BASHPID" -C "$OUT" . && mv -f "$FINAL_OUT/.results.tgz.$BASHPID" "$FINAL_OUT/results.tgz"
  cp "$summary" "$FINAL_OUT/.summary.txt.$BASHPID" && mv -f "$FINAL_OUT/.summary.txt.$BASHPID" "$FINAL_OUT/summary.txt"
}
trap 'echo "stopped (TERM): packing what the stages wrote"; pack; exit 124' TERM INT

for stage in $stages; do
  if [ "$(seconds_left)" -le 0 ]; then
    echo "device_check: $stage and the stages after it not started: the call's limit is near" | tee -a "$summary"
    break
  fi
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
    dp)
      for zero in false true; do
        OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_DEBUG=${NCCL_DEBUG:-VERSION} \
          mpirun -np 1 -x LD_LIBRARY_PATH -x NCCL_DEBUG \
          $hylo train configs/tiny.yaml --device cuda --run-dir /tmp/tiny_cuda_dp_$zero --overwrite \
          --set model.d_model=128 --set model.n_heads=2 --set train.steps=50 --set train.eval_every=0 \
          --set train.checkpoint_every=25 --set train.zero1=$zero 2>&1 | grep -E "NCCL version|^step +50/|error"
        cp /tmp/tiny_cuda_dp_$zero/metrics.jsonl "$OUT/tiny_cuda_dp_zero1_${zero}_metrics.jsonl"
        echo "dp (mpirun -np 1, zero1 $zero) losses equal curve's: $(python3 -c 'import json, sys
rows = [[json.loads(l)["loss"] for l in open(f)] for f in sys.argv[1:]]
print(len(rows[0]) == 50 and rows[0] == rows[1])' /tmp/tiny_cuda/metrics.jsonl /tmp/tiny_cuda_dp_$zero/metrics.jsonl)" |
          tee -a "$summary"
      done ;;
    nccl)
      OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 1 -x LD_LIBRARY_PATH \
        .devbundle/bin/hylo_gpu_tests --test-case="*through NCCL*" 2>&1 | tee "$OUT/gpu_tests_nccl.log" | tail -4
      echo "nccl: $(grep -E 'test cases:' "$OUT/gpu_tests_nccl.log" | tail -1)" >>"$summary" ;;
    gpus)
      n=${GPUS_N:-$(nvidia-smi -L 2>/dev/null | wc -l)}
      device=${GPUS_DEVICE:-cuda}
      if [ "$n" -lt 2 ]; then
        echo "gpus: skipped ($n GPU)" | tee -a "$summary"
      else
        mpi="mpirun -np $n -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE"
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
        rm -rf /tmp/gpus_*  # every run starts fresh; the resumed one continues its own directory
        # Every run: log under $OUT, metrics.jsonl copied there; $1 the name, then train's arguments.
        gpus_run() {
          local name=$1; shift
          $mpi $hylo train "$@" --device "$device" --run-dir "/tmp/gpus_$name" 2>&1 |
            grep -E "^step +[0-9]+/|error|ranks|resumed" | tail -4 | tee "$OUT/gpus_$name.log"
          cp "/tmp/gpus_$name/metrics.jsonl" "$OUT/gpus_${name}_metrics.jsonl"
        }
        # Losses of two runs: equal (bits), or their largest relative difference.
        compare() {
          python3 -c 'import json, sys
a, b = ([json.loads(l)["loss"] for l in open(f"/tmp/gpus_{n}/metrics.jsonl") if "\"loss\"" in l] for n in sys.argv[1:3])
d = max(abs(x - y) / abs(y) for x, y in zip(a, b)) if a and len(a) == len(b) else float("nan")
print(f"{sys.argv[3]}: {len(a)} / {len(b)} steps, " + ("equal" if a == b else f"max relative difference {d:.2e}"))' "$@" |
            tee -a "$summary"
        }
        tiny="configs/tiny.yaml --set model.d_model=128 --set model.n_heads=2 --set train.batch_size=$((4 * n))
          --set train.steps=50 --set train.eval_every=0 --set train.grad_clip=0"
        # shellcheck disable=SC2086  # $tiny is a list of arguments
        {
          gpus_run dp $tiny --set train.checkpoint_every=25
          gpus_run zero1 $tiny --set train.checkpoint_every=0 --set train.zero1=true
          gpus_run resumed $tiny --set train.checkpoint_every=25 --stop-at 25
          gpus_run resumed $tiny --set train.checkpoint_every=25 --resume auto
          compare zero1 dp "gpus: $n ranks, ZeRO-1 vs plain data parallelism"
          compare resumed dp "gpus: $n ranks, stopped at 25 and resumed vs straight"
          moe="configs/moe-tiny.yaml --set model.d_model=128 --set model.n_heads=2
            --set train.batch_size=$((4 * n)) --set train.steps=30 --set train.eval_every=0 --set train.checkpoint_every=0"
          gpus_run moe_dp $moe
          gpus_run moe_ep $moe --set train.expert_parallel=$n
          compare moe_ep moe_dp "gpus: $n ranks, moe-tiny experts over the ranks vs plain data parallelism"
        }
        if [ "$device" = cuda ]; then
          for model in 205m-pbb moe-8e-pbb; do
            common="configs/$model.yaml --device cuda --set train.steps=20 --set train.eval_every=0
              --set train.checkpoint_every=1000"
            # shellcheck disable=SC2086
            $hylo train $common --run-dir "/tmp/gpus_${model}_1" 2>&1 | grep -E "^step +20/|error" | tail -1
            one=$(mean_tokens_per_s "/tmp/gpus_${model}_1/metrics.jsonl")
            layouts="dp"; [ "$model" = moe-8e-pbb ] && layouts="dp ep"
            for layout in $layouts; do
              ep=1; [ "$layout" = ep ] && ep=$n
              # shellcheck disable=SC2086
              gpus_run "${model}_$layout" $common --set train.batch_size=$((16 * n)) --set train.expert_parallel=$ep \
                >/dev/null
              many=$(mean_tokens_per_s "/tmp/gpus_${model}_$layout/metrics.jsonl")
              echo "gpus: $model $layout, $n GPUs x 16 x 2048: $many tok/s, one GPU x 16 x 2048: $one tok/s, \
scaling $(python3 -c "print('%.3f' % ($many / ($n * $one)))")" | tee -a "$summary"
            done
          done
        fi
      fi ;;
    dp_cost)
      mpi="mpirun -np 1 -x LD_LIBRARY_PATH"
      for run in alone dp dp_zero1; do
        launch=""; [ "$run" != alone ] && launch=$mpi
        zero=false; [ "$run" = dp_zero1 ] && zero=true
        # shellcheck disable=SC2086  # $launch is a command prefix
        OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 $launch $hylo train configs/205m-pbb.yaml \
          --device cuda --run-dir /tmp/dp_cost_$run --overwrite --set train.steps=20 --set train.eval_every=0 \
          --set train.checkpoint_every=1000 --set train.zero1=$zero 2>&1 |
          grep -E "^step +20/|error|^peak device memory" | sed 's/ (by category.*//' | tee -a "$summary"
        cp /tmp/dp_cost_$run/metrics.jsonl "$OUT/dp_cost_${run}_metrics.jsonl"
        echo "dp_cost $run: $(mean_tokens_per_s /tmp/dp_cost_$run/metrics.jsonl) tok/s over steps 6-20" | tee -a "$summary"
      done ;;
    export)
      # CUDA attention takes head dims 64 and 128: both models at d_model / n_heads = 64.
      $hylo train configs/moe-tiny.yaml --device cuda --run-dir /tmp/export_moe --overwrite --set train.steps=40 \
        --set train.eval_every=0 --set model.d_model=128 --set model.n_heads=2 \
        --set model.moe.bias_update_rate=0.01 2>&1 | tail -1
      $hylo train configs/tiny.yaml --device cuda --run-dir /tmp/export_gqa --overwrite --set train.steps=40 \
        --set train.eval_every=0 --set model.d_model=256 --set model.n_heads=4 --set model.n_kv_heads=2 \
        --set model.qk_norm=true --set model.tie_embeddings=false --set model.local.kind=swa \
        --set model.local.window=48 2>&1 | tail -1
      $hylo train configs/205m-pbb.yaml --device cuda --run-dir /tmp/export_205m --overwrite --set train.steps=10 \
        --set train.eval_every=0 2>&1 | tail -1
      for run in /tmp/tiny_cuda /tmp/export_moe /tmp/export_gqa /tmp/export_205m; do
        name=$(basename $run)
        $hylo export $run --out $run/export --overwrite
        for broken in none rope mask; do
          result=$(python3 scripts/check_export.py $run/export --mutate $broken --json "$OUT/export_check_${name}_$broken.json")
          echo "export $name, broken: $broken: exit $? $result" | tee -a "$summary"
        done
      done
      # bf16 weights: the probe is hylo's forward on the rounded weights, so it must match as well
      $hylo export /tmp/tiny_cuda --out /tmp/tiny_cuda/export_bf16 --dtype bf16 --overwrite
      result=$(python3 scripts/check_export.py /tmp/tiny_cuda/export_bf16 --json "$OUT/export_check_tiny_cuda_bf16.json")
      echo "export tiny_cuda bf16: exit $? $result" | tee -a "$summary" ;;
    hf)
      # Six families on the CPU (the probe is hylo's CPU forward; CPU attention takes any head dim),
      # 5 steps: long enough to leave the initialisation, short enough that greedy text still varies.
      prompt="The old lighthouse keeper"
      tiny="--device cpu --set train.steps=5 --set train.eval_every=0 --set train.checkpoint_every=0"
      declare -A hf_runs=(
        [full]="configs/tiny.yaml --set model.local.kind=full"
        [swa]="configs/tiny.yaml --set model.local.kind=swa --set model.local.window=48"
        [pbb]="configs/tiny.yaml"
        [qk_norm]="configs/tiny.yaml --set model.qk_norm=true --set model.n_kv_heads=2 --set model.local.kind=swa --set model.local.window=40 --set model.tie_embeddings=false"
        [nope]="configs/tiny.yaml --set model.global.nope=true --set model.local.kind=swa --set model.local.window=32"
        [moe]="configs/moe-tiny.yaml --set model.moe.bias_update_rate=0.01"
      )
      for name in full swa pbb qk_norm nope moe; do
        run=/tmp/hf_$name
        # shellcheck disable=SC2086  # the family's config and --set flags
        $hylo train ${hf_runs[$name]} --run-dir $run --overwrite $tiny 2>&1 | tail -1
        $hylo export $run --format hf --out $run/hf --overwrite 2>&1 | tail -1
        $hylo generate $run --prompt "$prompt" --max-new-tokens 80 --print-ids --device cpu >$run/hylo_ids.txt 2>&1
        cp $run/hf/config.json "$OUT/hf_${name}_config.json"
        for broken in none gate_up rope mask; do
          result=$(python3 scripts/check_hf.py $run/hf --prompt "$prompt" --hylo-ids $run/hylo_ids.txt \
            --mutate $broken --json "$OUT/hf_check_${name}_$broken.json" 2>"$OUT/hf_check_${name}_$broken.log")
          echo "hf $name, broken: $broken: exit $? $(echo "$result" | cut -c1-400)" | tee -a "$summary"
        done
        $hylo import $run/hf --out $run/imported --overwrite 2>&1 | tail -1
        $hylo generate $run/imported --prompt "$prompt" --max-new-tokens 80 --print-ids --device cpu >$run/imported_ids.txt 2>&1
        echo "hf $name import -> generate equals: $(cmp -s <(grep '^ids:' $run/hylo_ids.txt) <(grep '^ids:' $run/imported_ids.txt) && echo true || echo false)" |
          tee -a "$summary"
      done ;;
    tensorboard)
      # issue 35 item 4: the event file hylo writes, read by TensorBoard's own reader (tensorboard 2.21
      # on the GPU machine) and checked scalar by scalar against metrics.jsonl.
      $hylo train configs/tiny.yaml --device cuda --run-dir /tmp/tb_tiny --overwrite \
        --set model.d_model=128 --set model.n_heads=2 --set train.steps=60 --set train.eval_every=20 \
        --set train.checkpoint_every=0 2>&1 | tail -3
      result=$(python3 scripts/check_tensorboard.py /tmp/tb_tiny 2>&1)
      echo "tensorboard: exit $? $(echo "$result" | tail -2 | tr '\n' ' ')" | tee -a "$summary"
      cp /tmp/tb_tiny/events.out.tfevents.* /tmp/tb_tiny/metrics.jsonl "$OUT/" 2>/dev/null ;;
    prepare)
      # issue 34: hylo data prepare on a synthetic jsonl.zst corpus at 1-16 workers on this host's 16
      # cores. data/bench_corpus/sample.jsonl.zst (carried) is repeated PREPARE_REPEAT times: zstd
      # frames concatenate, so the repeated file is a valid .zst of the repeated documents.
      mkdir -p /tmp/prep && rm -f /tmp/prep/corpus.jsonl.zst
      # Cores against hardware threads: what "16 workers" can mean on this host.
      echo "prepare: host $(nproc) CPUs; $(lscpu 2>/dev/null | grep -E '^(Model name|Thread\(s\) per core|Core\(s\) per socket|Socket\(s\))' |
        sed 's/  */ /g' | tr '\n' ';')" | tee -a "$summary"
      for _ in $(seq "${PREPARE_REPEAT:-20}"); do cat data/bench_corpus/sample.jsonl.zst >>/tmp/prep/corpus.jsonl.zst; done
      bytes=$(($(cat data/bench_corpus/sample.bytes) * ${PREPARE_REPEAT:-20}))  # uncompressed, counted where it was made
      for w in ${PREPARE_WORKERS:-1 2 4 8 16}; do
        rm -rf /tmp/prep/out_$w
        # The previous run's ~1 GB of shards leave the page cache before this one is timed: at
        # 68af3df the 16-worker run right after the 1-worker one took 5.31 s, a later one 4.86 s.
        sync
        # rc, wall seconds, peak RSS (kB) of the child: python's getrusage, since /usr/bin/time may be absent
        res=$(python3 -c 'import resource, subprocess, sys, time
t = time.time(); rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=open(sys.argv[-1] + ".log", "w")).returncode
print(rc, "%.2f" % (time.time() - t), resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' \
          $hylo data prepare --input /tmp/prep/corpus.jsonl.zst --workers $w --out /tmp/prep/out_$w)
        cp /tmp/prep/out_$w.log "$OUT/prepare_w$w.log" 2>/dev/null
        echo "prepare: workers $w rc/wall_s/peak_rss_kb $res input_bytes $bytes MB/s $(echo "$res" |
          awk -v b=$bytes '{printf "%.1f", b / $2 / 1e6}')" | tee -a "$summary"
      done
      cmp -s /tmp/prep/out_1/train_000000.bin /tmp/prep/out_16/train_000000.bin 2>/dev/null &&
        echo "prepare: shard 0 identical for 1 and 16 workers" | tee -a "$summary" ;;
    prepare_solo)
      # issue 34's open question: does the host or the pipeline stop 16 workers short of 12x? One
      # 1-worker prepare alone, then $PREPARE_SOLO_N (default 16) independent 1-worker prepares of
      # the same corpus at once: their aggregate over the lone one is what the machine itself gives
      # 16 single-threaded tokenizers (no shared reader, writer or queue). Run after prepare, which
      # builds /tmp/prep/corpus.jsonl.zst (or alone: it builds it the same way).
      mkdir -p /tmp/prep
      if [ ! -f /tmp/prep/corpus.jsonl.zst ]; then
        for _ in $(seq "${PREPARE_REPEAT:-20}"); do cat data/bench_corpus/sample.jsonl.zst >>/tmp/prep/corpus.jsonl.zst; done
      fi
      bytes=$(($(cat data/bench_corpus/sample.bytes) * ${PREPARE_REPEAT:-20}))
      solo_n=${PREPARE_SOLO_N:-16}
      for n in 1 "$solo_n"; do
        rm -rf /tmp/prep/solo_*
        start=$(python3 -c 'import time; print(time.time())')
        for i in $(seq "$n"); do
          $hylo data prepare --input /tmp/prep/corpus.jsonl.zst --workers 1 --out /tmp/prep/solo_$i >/dev/null 2>&1 &
        done
        wait
        echo "prepare_solo: $n independent 1-worker processes: $(python3 -c 'import sys, time
wall = time.time() - float(sys.argv[1])
print("wall_s %.2f aggregate MB/s %.1f" % (wall, int(sys.argv[2]) * int(sys.argv[3]) / wall / 1e6))' "$start" "$n" "$bytes")" |
          tee -a "$summary"
      done ;;
    prepare_threads)
      # issue 34: which thread of the 16-worker pipeline is busy. scripts/thread_cpu.py sums each named
      # thread's CPU seconds (prepare-inflate: decompression; prepare-read: line splitting into
      # batches; the main thread: the shard writer; prepare-tokens: the workers): a serial thread
      # near busy 1.0 is the bound.
      mkdir -p /tmp/prep
      if [ ! -f /tmp/prep/corpus.jsonl.zst ]; then
        for _ in $(seq "${PREPARE_REPEAT:-20}"); do cat data/bench_corpus/sample.jsonl.zst >>/tmp/prep/corpus.jsonl.zst; done
      fi
      for w in ${PREPARE_THREADS_WORKERS:-16}; do
        rm -rf /tmp/prep/threads_$w
        sync  # as in prepare: no earlier run's shards still being written back
        python3 scripts/thread_cpu.py --json "$OUT/prepare_threads_w$w.json" -- $hylo data prepare \
          --input /tmp/prep/corpus.jsonl.zst --workers "$w" --out /tmp/prep/threads_$w 2>&1 | tail -7 |
          sed "s/^/prepare_threads w$w: /" | tee -a "$summary"
      done ;;
    attn)
      bench_attention "$hylo" "$OUT/bench_attention.json" | tail -16 ;;
    attn_ab)
      # The attn stage's shapes, this bundle's hylo against $AB_BASE (another build's hylo, carried
      # in .devbundle/bin), alternated twice: base, new, base, new.
      for round in 1 2; do
        for who in base new; do
          bin=$hylo && [ $who = base ] && bin=${AB_BASE:?attn_ab needs AB_BASE}
          echo "-- $who, round $round" | tee -a "$summary"
          bench_attention "$bin" "$OUT/bench_attention_${who}_$round.json" | tail -13 | tee -a "$summary"
        done
      done ;;
    attn_span)
      for b in 512 1024 2048; do
        $hylo bench attention --kind pbb,swa --hd 64,128 --T 4096,16384 --B 4 --H 16 --Hkv 16 --block $b \
          --bridge 128 --window $((b / 2)) --json "$OUT/bench_attention_span_$b.json" >/dev/null 2>&1
      done
      python3 scripts/attention_pair_ratio.py "$OUT"/bench_attention_span_*.json | tee -a "$summary" ;;
    torch_attn)
      OUT="$OUT/torch_attn" python3 "$peer" attn 2>&1 | tail -22 | tee -a "$summary" ;;
    bench)
      for cfg in 205m-pbb 205m-swa 205m-full; do
        $hylo bench train configs/$cfg.yaml --steps 10 --warmup 3 --json "$OUT/bench_train_$cfg.json" 2>&1 |
          tee "$OUT/bench_train_$cfg.log" | tail -1 | tee -a "$summary"
      done ;;
    fp8)
      # issue 38 goal 1: the blocks' linears in FP8 (cuBLASLt, delayed scaling) against bf16, for each
      # of $FP8_CONFIGS (default 205m-pbb; FP8_SET="k=v ..." goes to every run as --set), then the
      # PyTorch peer of the 205M model.
      fp8_sets=()
      for kv in ${FP8_SET:-}; do fp8_sets+=(--set "$kv"); done
      for cfg in ${FP8_CONFIGS:-205m-pbb}; do
        for precision in bf16 fp8; do
          timeout 300 $hylo bench train configs/$cfg.yaml --steps 10 --warmup 3 --set train.precision=$precision \
            ${fp8_sets[@]+"${fp8_sets[@]}"} --json "$OUT/bench_train_${cfg}_$precision.json" 2>&1 |
            tee "$OUT/bench_train_${cfg}_$precision.log" | tail -1 | sed "s/^/$cfg $precision: /" | tee -a "$summary"
        done
      done
      [ "${FP8_PEER:-1}" = 0 ] || python3 "$peer" train --layers 12 --variants pbb \
        --deadline $(($(date +%s) + 300)) 2>&1 | tail -4 | tee -a "$summary" ;;
    profile)
      # PROFILE_PRECISIONS="bf16 fp8": each config once per precision (default bf16 only).
      for cfg in ${PROFILE_CONFIGS:-205m-pbb 205m-full}; do
        for precision in ${PROFILE_PRECISIONS:-bf16}; do
          HYLO_PROFILE=1 $hylo bench train configs/$cfg.yaml --steps 5 --warmup 2 --set train.precision=$precision \
            2>&1 | tee "$OUT/profile_${cfg}_$precision.log"
        done
      done ;;
    dense2b)
      # issue 37 goal 4: the dense 2B hybrids (configs/2b-*.yaml), 16 x 2048, without and with
      # activation recompute (its cost), then the PyTorch peer at the same width in the same call.
      dense2b_sets=()
      for kv in ${DENSE2B_SET:-}; do dense2b_sets+=(--set "$kv"); done
      for cfg in ${DENSE2B_CONFIGS:-2b-pbb 2b-full}; do
        for rc in ${DENSE2B_RECOMPUTE:-false true}; do
          timeout 300 $hylo bench train configs/$cfg.yaml --steps 8 --warmup 3 --set train.recompute=$rc \
            ${dense2b_sets[@]+"${dense2b_sets[@]}"} \
            --json "$OUT/bench_train_${cfg}_recompute_$rc.json" 2>&1 |
            tee "$OUT/bench_train_${cfg}_recompute_$rc.log" | tail -1 | sed "s/^/$cfg recompute $rc: /" | tee -a "$summary"
        done
      done
      OUT="$OUT/torch_2b" python3 "$peer" train --layers 24 --d-model 2560 --heads 20 --ffn 6912 \
        --variants ${DENSE2B_PEER:-pbb,full} --tag 2b --deadline $(($(date +%s) + 300)) 2>&1 | tail -6 | tee -a "$summary" ;;
    torch)
      python3 "$peer" train --layers 12 --variants pbb,swa,full \
        --deadline $(($(date +%s) + 420)) 2>&1 | tail -12 | tee -a "$summary" ;;
    moe)
      $hylo bench moe --json "$OUT/bench_moe.json" 2>&1 | tail -8 | tee -a "$summary"
      for cfg in moe-8e-pbb moe-2b-pbb; do
        for path in ${MOE_PATHS:-grouped loop}; do
          echo "expert gemm: $path" >>"$summary"
          $hylo bench train configs/$cfg.yaml --steps 5 --warmup 2 --expert-gemm $path \
            --json "$OUT/bench_train_${cfg}_$path.json" 2>&1 |
            tee "$OUT/bench_train_${cfg}_$path.log" | tail -1 | tee -a "$summary"
        done
      done ;;
    torch_moe)
      python3 "$peer" train --layers 16 --variants moe_pbb \
        --deadline $(($(date +%s) + 240)) 2>&1 | tail -4 | tee -a "$summary" ;;
    balance)
      small="--set model.n_layers=4 --set train.steps=1000 --set train.warmup_steps=50 --set train.eval_every=0
        --set train.checkpoint_every=0 --set train.log_every=1"
      for rate in ${BALANCE_RATES:-0 0.001 0.003}; do
        # shellcheck disable=SC2086  # $small is a list of flags
        $hylo train configs/moe-8e-pbb.yaml --run-dir "/tmp/balance_$rate" --overwrite $small \
          --set model.moe.bias_update_rate=$rate 2>&1 | tail -1 | cut -c1-100
        mkdir -p "$OUT/balance_bias_$rate"  # metrics and config only: the final checkpoint is GBs
        cp "/tmp/balance_$rate/metrics.jsonl" "/tmp/balance_$rate/config.yaml" "$OUT/balance_bias_$rate/"
      done ;;
    ncu_attn)
      for hd in 64 128; do
        $ncu --clock-control none --kernel-name regex:attention --launch-count 12 --section SpeedOfLight \
          --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy \
          --print-details all $hylo bench attention --kind swa --hd $hd --T 4096 --B 4 --H 16 --iters 1 --warmup 1 \
          >"$OUT/ncu_attention_swa_$hd.txt" 2>&1
        grep -E "attention_|Duration|highest-utilized|Issue Slots Busy|Registers Per|Eligible Warps|Stall (Wait|Short|Long|Barrier)" \
          "$OUT/ncu_attention_swa_$hd.txt" | cut -c1-120 | head -80
      done ;;
    ncu_loop)
      for kind in swa pbb; do
        # skip the warm-up forward; then the timed forward and the warm-up backward's two kernels
        $ncu --clock-control none --kernel-name regex:attention --launch-skip 1 --launch-count 3 \
          --section WarpStateStats --section SourceCounters --page source --print-source sass --csv \
          $hylo bench attention --kind $kind --hd "${NCU_HD:-64}" --T 4096 --B 4 --H 16 --iters 1 --warmup 1 \
          >"$OUT/ncu_source_$kind.csv" 2>&1
        echo "-- $kind" | tee -a "$summary"
        python3 scripts/ncu_loop_share.py "$OUT/ncu_source_$kind.csv" --top 3 | tee -a "$summary"
      done ;;
    ncu_mem)
      metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
      metrics+=,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed
      metrics+=,l1tex__m_xbar2l1tex_read_bytes.sum,smsp__issue_active.avg.pct_of_peak_sustained_elapsed
      for hd in 64 128; do for T in 4096 16384; do for kind in swa pbb; do
        # skip the warm-up forward; then the timed forward and the warm-up backward's two kernels
        $ncu --clock-control none --kernel-name regex:attention --launch-skip 1 --launch-count 3 --csv \
          --metrics "$metrics" $hylo bench attention --kind $kind --hd $hd --T $T --B 4 --H 16 --iters 1 \
          --warmup 1 >"$OUT/ncu_mem_${kind}_${hd}_$T.csv" 2>&1
      done; done; done
      python3 scripts/ncu_mem_table.py "$OUT"/ncu_mem_*.csv --json "$OUT/ncu_mem.json" | tee -a "$summary" ;;
    decode)
      bridge=${DECODE_BRIDGE:-128} window=${DECODE_WINDOW:-512}
      tag=bridge$bridge && [ "$window" = 512 ] || tag=bridge${bridge}_window$window
      $hylo bench decode --batch 16,64 --hd 64,128 --block 512 --bridge "$bridge" --window "$window" \
        --json "$OUT/bench_decode_$tag.json" 2>&1 | tail -8 | tee -a "$summary"
      echo "GQA, Hkv 4:" | tee -a "$summary"
      $hylo bench decode --batch 16,64 --hd 64,128 --block 512 --bridge "$bridge" --window "$window" --Hkv 4 \
        --json "$OUT/bench_decode_gqa_$tag.json" 2>&1 | tail -6 | tee -a "$summary" ;;
    torch_decode)
      OUT="$OUT/torch_decode" python3 "$peer" decode 2>&1 | tail -12 | tee -a "$summary" ;;
    generate)
      gen_configs=${GENERATE_CONFIGS:-205m-pbb 205m-swa 205m-full}
      gen_batches=${GENERATE_BATCHES:-1 16 64}
      gen_prompts="512 4096"
      gen_repeat=${GENERATE_REPEAT:-3}  # timed runs of each setting, both sides: the median and the range
      gen_paths=()
      for cfg in $gen_configs; do gen_paths+=("configs/$cfg.yaml"); done
      $hylo bench generate --config "${gen_paths[@]}" --batch "${gen_batches// /,}" --prompt "${gen_prompts// /,}" \
        --new-tokens 128 --repeat "$gen_repeat" --device cuda --json "$OUT/bench_generate.json" 2>&1 | tee "$OUT/bench_generate.log"
      for cfg in $gen_configs; do
        run=/tmp/gen_$cfg
        # The peer loads an exported checkpoint: one training step makes one.
        $hylo train "configs/$cfg.yaml" --run-dir $run --overwrite --set train.steps=1 --set train.eval_every=0 2>&1 |
          tail -1
        $hylo export $run --format hf --out $run/hf --overwrite 2>&1 | tail -1
        # shellcheck disable=SC2086  # the batches and prompts are lists of arguments
        python3 scripts/hf_generate_peer.py $run/hf --label "$cfg" --batch $gen_batches --prompt $gen_prompts \
          --new-tokens 128 --repeat "$gen_repeat" --json "$OUT/hf_generate_$cfg.json" 2>&1 | tee "$OUT/hf_generate_$cfg.log"
        echo "generate $cfg, decode tok/s by batch x prompt: $(python3 -c 'import json, sys
def rates(path):
    try:
        rows = json.load(open(path))["rows"]
    except (OSError, ValueError):
        return "none"
    mine = [r for r in rows if r["config"] == sys.argv[3]]
    return ", ".join("%dx%d %.0f" % (r["batch"], r["prompt"], r["decode_tok_s"]) for r in mine)
print("hylo", rates(sys.argv[1]), "| transformers", rates(sys.argv[2]))' "$OUT/bench_generate.json" \
          "$OUT/hf_generate_$cfg.json" "$cfg")" | tee -a "$summary"
      done ;;
    sample)
      # issue 35 item 5: what the main job does with a GPU (configs/small.yaml, its 5000 steps), and
      # 205m-pbb for $SAMPLE_205M_STEPS steps (default 1000: 32.8M tokens), each on every source
      # (data/tokens-all.tar.xz in the carry; else data/tokens), evaluated and sampled as the main
      # job samples (temperature 0.8, top-k 40, seed 1).
      data=data/tokens
      if [ -f data/tokens-all.tar.xz ]; then
        [ -d data/tokens-all ] || python3 -m tarfile -e data/tokens-all.tar.xz data/
        data=data/tokens-all
      fi
      for cfg in small 205m-pbb; do
        steps=5000 && [ $cfg = 205m-pbb ] && steps=${SAMPLE_205M_STEPS:-1000}
        run=/tmp/sample_$cfg
        $hylo train configs/$cfg.yaml --run-dir $run --overwrite --set train.steps=$steps \
          --set "data.train=$data/train_*.bin" --set "data.val=$data/val_*.bin" >$OUT/sample_${cfg}_train.log 2>&1
        tail -2 $OUT/sample_${cfg}_train.log
        cp $run/metrics.jsonl $OUT/sample_${cfg}_metrics.jsonl
        tasks="val" && [ -f data/raw/heldout/devil.txt ] && tasks=val,ppl  # carry data/raw/heldout for ppl
        $hylo eval $run --tasks $tasks --json $OUT/sample_${cfg}_eval.json >$OUT/sample_${cfg}_eval.txt 2>&1
        for prompt in "The history of the United States" "Once upon a time"; do
          $hylo generate $run --prompt "$prompt" --max-new-tokens 60 --temperature 0.8 --top-k 40 --seed 1 2>&1
        done | tee $OUT/sample_$cfg.txt
        echo "sample $cfg ($steps steps on $data): $(grep -o 'summary:.*' $OUT/sample_${cfg}_train.log | cut -c1-300)" | tee -a "$summary"
      done ;;
    ablation)
      sweeps=/tmp/hylo_sweeps
      sweep=${ABLATION:-hybrids-small}
      rm -rf "$sweeps"
      # Sweeps on every source read data/tokens-all, which travels packed (71 MB of shards do not
      # fit the carry next to the bundle): python's tarfile, since xz may be missing there.
      if [ -f data/tokens-all.tar.xz ] && [ ! -d data/tokens-all ]; then
        python3 -m tarfile -e data/tokens-all.tar.xz data/
      fi
      sets=()
      for kv in ${ABLATION_SET:-}; do sets+=(--set "$kv"); done
      # With ABLATION_SEEDS the sweep runs once per seed into seed-N/, and one report pools them.
      for seed in ${ABLATION_SEEDS:-none}; do
        dir=$sweeps seed_set=() seed_tag=""
        [ "$seed" != none ] && dir=$sweeps/seed-$seed seed_set=(--set "train.seed=$seed") seed_tag="_seed$seed"
        sweep_args=("experiments/$sweep.yaml" --local --out "$dir" ${sets[@]+"${sets[@]}"} ${seed_set[@]+"${seed_set[@]}"}
          ${ABLATION_TUNED:+--tuned "$ABLATION_TUNED"})
        # The points to run (ABLATION_ONLY, else all), dealt round-robin to ABLATION_PARALLEL lanes:
        # a small model leaves the GPU idle while its process starts, evaluates and saves, which
        # another lane's steps fill. Each lane trains a point, then evaluates it.
        points=${ABLATION_ONLY:-$(seq -s, 0 $(($($hylo sweep "${sweep_args[@]}" --dry-run | sed -n 's/^sweep [^ ]*: \([0-9]*\) points.*/\1/p') - 1)))}
        IFS=, read -r -a points <<<"$points"
        lanes=${ABLATION_PARALLEL:-1}
        for lane in $(seq 0 $((lanes - 1))); do
          (
            for ((i = lane; i < ${#points[@]}; i += lanes)); do
              # A point not started within ABLATION_POINT_S (default 150 s) of the limit would be cut
              # off; a started one is stopped at the limit (TERM: it checkpoints, and the next
              # call's sweep resumes it), and what it wrote is packed.
              if [ "$(seconds_left)" -lt "${ABLATION_POINT_S:-150}" ]; then
                echo "-- point ${points[i]} not started: the call's limit is near"
                continue
              fi
              # The point's whole log comes back; the lane's log keeps its progress lines. The run
              # directory is the one the sweep names ("sweep: running NAME (DIR)").
              log="$OUT/ablation_point_${points[i]}${seed_tag}.log"
              timeout "$(seconds_left)" $hylo sweep "${sweep_args[@]}" --only "${points[i]}" >"$log" 2>&1
              stopped=$([ $? = 124 ] && echo 1)
              grep -E "^step +[0-9]*000?/|val_loss|^sweep: running|error|stopp" "$log"
              run=$(sed -n 's/^sweep: running [^ ]* (\(.*\))$/\1/p' "$log" | head -1)
              if [ ! -d "$run" ]; then
                echo "-- point ${points[i]}: no run directory (the sweep failed before it; $log)"
                continue
              fi
              if [ -n "$stopped" ]; then
                echo "-- $(basename "$run") stopped at the call's limit: not evaluated"
              elif [ "$(seconds_left)" -gt 0 ]; then
                echo "-- eval $(basename "$run")"
                # shellcheck disable=SC2086  # ABLATION_EVAL_ARGS is a list of arguments (and globs)
                timeout "$(seconds_left)" $hylo eval "$run" \
                  --tasks "${ABLATION_TASKS:-val,retrieval,lastword}" ${ABLATION_EVAL_ARGS:-} --json "$run/eval.json" 2>&1 | tail -24
              fi
              # Its files but the checkpoints, into $OUT and packed now: a call stopped by its limit keeps them.
              (cd "$sweeps" && find "${run#"$sweeps"/}" -name '*.h5' -prune -o -type f -print | tar cf - -T -) | tar xf - -C "$OUT"
              pack
            done >"$OUT/ablation_lane$lane.log"
          ) &
        done
        wait
        cat "$OUT"/ablation_lane*.log | tee -a "$summary"
        $hylo report "$dir/$sweep" 2>&1 | tail -6 | tee -a "$summary"
        # Everything but the checkpoints comes back (hylo report can be rerun on it), packed after
        # each seed, so that a call cut off by its time limit still returns the seeds it finished.
        (cd "$sweeps" && find . -name '*.h5' -prune -o -type f -print | tar cf - -T -) | tar xf - -C "$OUT"
        pack
      done
      if [ -n "${ABLATION_SEEDS:-}" ]; then
        $hylo report "$sweeps"/seed-*/"$sweep" --out "$OUT/pooled" 2>&1 | tail -12 | tee -a "$summary"
      fi ;;
    *) echo "unknown stage $stage" ;;
  esac
  pack
done

echo "== summary"
cat "$summary"
