#!/usr/bin/env bash
# Install, non-interactively and idempotently, every Debian package that dspark's build, tests and
# benchmarks need. Runs `apt-get update` at most once, and only when something is missing.
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config   # compiler and build system
  libopenblas-openmp-dev             # GEMM for multi-row batches (OpenMP build: one thread pool with ours)
  libomp-dev                         # OpenMP runtime headers (gcc uses libgomp; clang needs this)
  libcjson-dev                       # config.json / safetensors headers / CLI JSON output
  libcmocka-dev                      # C unit tests
  libopenmpi-dev openmpi-bin         # data-parallel training (mpirun -np N dspark train)
  gnuplot-nox                        # optional loss-curve PNG of dspark train --plot
  python3-numpy python3-torch        # independent reference implementations inside tests/
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "setup: installing ${missing[*]}" >&2
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
