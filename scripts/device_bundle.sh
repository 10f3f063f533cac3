#!/usr/bin/env bash
# Builds hylo with CUDA (sm_90a) on this machine and gathers what the GPU machine lacks into
# .devbundle/ (git-ignored; name it in the device call's `carry`): the executables and the shared
# libraries they need that are not part of the C runtime or the CUDA toolkit found there, packed
# into .devbundle/bundle.tar.xz (~10 MB instead of ~35: the carry holds 64 MiB in all, data and
# tracked files included), which scripts/device_check.sh unpacks into .devbundle/ there, and the
# PyTorch peer (../shared/peers/torch_ref.py, outside the checkout) as .devbundle/peers/torch_ref.py.
# Files put next to it (a hylo of another commit for attn_ab: .devbundle/bin/hylo_base) travel as
# they are.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${HYLO_BUILD_DIR:-build-gpu}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DHYLO_CUDA=ON -DHYLO_CUDA_ARCH=90a >/dev/null
cmake --build "$build" -j"$(nproc)" --target hylo hylo_gpu_tests
rm -rf .devbundle && mkdir -p .devbundle/bin .devbundle/lib
cp "$build"/hylo "$build"/tests/hylo_gpu_tests .devbundle/bin/
for exe in .devbundle/bin/*; do
  ldd "$exe" | awk '/=> \//{print $3}'
done | sort -u | grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|ld-linux[^/]*|libcuda|libcudart|libcublas|libcublasLt|libnccl)\.so' |
  while read -r lib; do cp -L "$lib" .devbundle/lib/; done
tar cf - -C .devbundle bin lib | xz -6 -T0 >.devbundle/bundle.tar.xz
rm -rf .devbundle/bin .devbundle/lib
peer=../shared/peers/torch_ref.py
if [ -f "$peer" ]; then
  mkdir -p .devbundle/peers && cp "$peer" .devbundle/peers/
else
  echo "device_bundle: $peer not found: the peer stages (torch*, fp8, dense2b) will refuse to run" >&2
fi
du -sh .devbundle
