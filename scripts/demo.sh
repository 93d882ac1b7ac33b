#!/usr/bin/env bash
# make demo: plain generation from the default stories260K model, then speculative decoding with a
# small DSpark drafter trained for it here (once: it is cached in BUILD/demo for the next run).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
BIN=$BUILD/bin/dspark
CACHE=$BUILD/demo
DRAFTER=$CACHE/drafter

echo "== stories260K, greedy, 64 tokens"
"$BIN" generate -p "Once upon a time" -n 64 --temp 0

BEST=$DRAFTER/best
if [ ! -f "$DRAFTER/trainer_state.json" ] || ! grep -q '"step":	600' "$DRAFTER/trainer_state.json" || [ ! -f "$BEST/heldout.json" ]; then
  echo "== training a 2-layer DSpark drafter for stories260K (once, a few minutes; cached in $CACHE)"
  echo "   (the full recipe, 16,000 sequences and the default 3,200 steps, is in docs/results.md)"
  mkdir -p "$CACHE"
  [ -f "$CACHE/data2k.bin" ] || "$BIN" datagen --prompts docs/prompts/stories-train.txt -n 2000 --max-tokens 200 \
    --seed 1 -o "$CACHE/data2k.bin"
  resume=()
  [ -f "$DRAFTER/trainer_state.json" ] && resume=(--resume)
  "$BIN" train --data "$CACHE/data2k.bin" -o "$DRAFTER" --layers 2 --block 7 --steps 600 --seed 1 \
    --eval-prompts docs/prompts/stories-heldout.txt --eval-every 100 --keep-best "${resume[@]}"
fi

if [ ! -f "$BEST/calibration.json" ]; then
  echo "== calibrating its confidences (STS) on prompts it was not trained on"
  "$BIN" calibrate -d "$BEST" --prompts docs/prompts/stories-calib.txt --max-tokens 128
fi

echo "== speculative decoding with it (same greedy text, verified losslessly)"
"$BIN" generate -p "Once upon a time" -n 64 --temp 0 -d "$BEST" --stats
echo "== held-out prompts: tau and speed against plain decoding, measured in the same run (full blocks)"
"$BIN" eval --prompts docs/prompts/stories-heldout.txt --spec dspark -d "$BEST" --temp 0 --max-tokens 128
echo "(stories260K is tiny and compute-bound on a CPU: verifying a block costs about as much as decoding"
echo " its tokens one by one, and drafting costs about a decode step, so full blocks lose here.)"
echo "== the same with --schedule auto: the scheduler measures this machine and verifies only what pays"
"$BIN" eval --prompts docs/prompts/stories-heldout.txt --spec dspark -d "$BEST" --temp 0 --max-tokens 128 \
  --schedule auto
