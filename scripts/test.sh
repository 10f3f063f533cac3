#!/usr/bin/env bash
# The test command (README, .ci/run): installs dependencies, fetches the corpus and tokenizer,
# builds (CUDA code compiles when nvcc is present; GPU tests report "skipped" without a GPU),
# runs every test (CPU, MPI, the corpus fetch's failure cases; GPU ones report "skipped" without a
# GPU), then the CPU tests again under AddressSanitizer + UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
# Each phase's minutes, at its end and in the closing line: where CI's time goes.
phases=""
phase() { phases+=" $1 $(((SECONDS - ${mark:-0}) / 60))m$(((SECONDS - ${mark:-0}) % 60))s"; echo "test.sh: $1 took ${phases##* }"; mark=$SECONDS; }

./scripts/install_deps.sh
./scripts/install_deps.sh --slurm  # the single-node cluster of the `slurm` test
./scripts/fetch_data.sh --core
phase setup

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs"
phase build
ctest --test-dir build --output-on-failure -j"$jobs"
phase tests

# -Og -g1: line tables are all the sanitizers' reports need, and -Og compiles the heaviest files in
# about half the time of -O1 (report.cpp 27 s against 48 s; the whole sanitized build 621 s against
# 824 s, measured side by side on this 2-core machine, 2026-12-07). A clean-clone run on the idle
# machine (2026-12-08): sanitized build 5m21s, sanitized tests 2m7s, all of CI 16m39s.
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-Og -g1 -DNDEBUG" \
  -DHYLO_CUDA=OFF -DHYLO_SANITIZE=address,undefined >/dev/null
cmake --build build-asan -j"$jobs" --target hylo_tests hylo
phase asan-build
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan -L cpu --output-on-failure -j"$jobs"
phase asan-tests
echo "all tests passed (${phases# })"
