#!/usr/bin/env bash
# End-to-end speculation on a memory-bound target with real acceptance (issue 13, items 1-2):
#   1. a 2-layer DSpark drafter for stories260K trained with the default recipe (docs/results.md,
#      "T = 1: what limits it"; once, cached in BUILD/e2e/drafter-default): datagen (16,000 target-written
#      sequences on the training prompts, half of them sampled at temperature 1), train (the defaults:
#      3200 steps; the final weights, so that nothing is chosen on the held-out prompts the bench
#      decodes), calibrate (both classes); about 15 minutes with THREADS=2;
#   2. `dspark inflate`: stories260K and that drafter grown to a realistic size (default: hidden 2048,
#      FFN 5632, 24 layers, bf16), computing exactly what the small pair computes (BUILD/e2e/inflated-default-*);
#   3. bench_e2e on the inflated pair: plain decoding, fixed lengths 1..7, threshold, auto, at
#      R = 1, 4, 16, greedy and T = 1, interleaved repeats, JSON lines on stdout.
#   scripts/bench_e2e.sh [BUILD_DIR] [bench_e2e options...]
#   scripts/bench_e2e.sh BUILD_DIR prepare     (steps 1-2 only: the pair, no bench)
# Environment: E2E_HIDDEN, E2E_FFN, E2E_LAYERS, E2E_DTYPE (the inflated shape), THREADS (datagen /
# train / calibrate threads, default 1: the machine is shared).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
shift || true
BIN=$BUILD/bin
STORIES=${DSPARK_MODEL:-../shared/models/stories260K/stories260K.gguf}
CACHE=$BUILD/e2e
DRAFTER=$CACHE/drafter-default # named by its recipe: an older recipe's cache is not reused
T=${THREADS:-1}
HIDDEN=${E2E_HIDDEN:-2048} FFN=${E2E_FFN:-5632} LAYERS=${E2E_LAYERS:-24} DTYPE=${E2E_DTYPE:-bf16}
INFLATED=$CACHE/inflated-default-${HIDDEN}x${LAYERS}-$DTYPE
mkdir -p "$CACHE"
[ -x "$BIN/dspark" ] && [ -x "$BIN/bench_e2e" ] || {
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD" -j "$(nproc)" --target dspark_cli bench_e2e
}

if [ ! -f "$DRAFTER/calibration.json" ]; then
  echo "bench_e2e: training a 2-layer DSpark drafter for stories260K (once; cached in $CACHE)" >&2
  [ -f "$CACHE/data16k.bin" ] || "$BIN/dspark" datagen -m "$STORIES" --prompts docs/prompts/stories-train.txt \
    -n 16000 --max-tokens 200 --seed 1 -t "$T" -o "$CACHE/data16k.bin"
  resume=()
  [ -f "$DRAFTER/trainer_state.json" ] && resume=(--resume)
  "$BIN/dspark" train -m "$STORIES" --data "$CACHE/data16k.bin" -o "$DRAFTER" --layers 2 --seed 1 -t "$T" \
    "${resume[@]}"
  "$BIN/dspark" calibrate -m "$STORIES" -d "$DRAFTER" --prompts docs/prompts/stories-calib.txt --max-tokens 128 -t "$T"
fi

if [ ! -f "$INFLATED/target/config.json" ]; then
  echo "bench_e2e: inflating stories260K + drafter to hidden $HIDDEN, FFN $FFN, $LAYERS layers, $DTYPE" >&2
  "$BIN/dspark" inflate -m "$STORIES" -d "$DRAFTER" -o "$INFLATED" --hidden "$HIDDEN" --ffn "$FFN" \
    --layers "$LAYERS" --dtype "$DTYPE"
fi

[ "${1:-}" = prepare ] && exit 0
"$BIN/bench_e2e" "$INFLATED/target" "$INFLATED/drafter" --prompts docs/prompts/stories-heldout.txt "$@"
