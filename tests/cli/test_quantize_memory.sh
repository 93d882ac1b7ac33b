#!/usr/bin/env bash
# quantize --target runs in memory bounded by a chunk, not by the model: a 530 MB bf16 Qwen3-MoE
# source (bench_moe --write-only: 2 layers of 64 experts, top 4, width 512, hidden 1024, vocabulary
# 32000; the experts one module each as Hugging Face ships them) is quantized to 4 bits with a peak
# resident set (ru_maxrss of the child) under 48 MiB and under a tenth of the source. Holding the
# output (150 MB here), the source's pages, or even one whole tensor's (lm_head: 66 MB) would exceed
# both. Also: the output is written in several shards
# (--max-shard-mb 48) with its index, loads (the built-in smoke test) and generates greedily. Skipped
# in sanitizer builds (ASan's shadow and quarantine are resident memory of their own).
set -u
BIN=${DSPARK_BIN:?}
TMP=$(cd "${DSPARK_TMP:-/tmp}" && pwd)/cli_quantize_memory.$$
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
if ldd "$BIN/dspark" 2>/dev/null | grep -q -e libasan -e libubsan || nm "$BIN/dspark" 2>/dev/null | grep -q __asan_init; then
  echo "SKIP: sanitizer build (peak RSS is not the program's)"
  exit 0
fi

"$BIN/bench_moe" --synthetic "$TMP/src" --dim 1024 --layers 2 --heads 8 --kv-heads 2 --head-dim 128 --vocab 32000 \
  --experts 64 --top-k 4 --moe-ffn 512 --write-only 2>/dev/null || fail "bench_moe --write-only"
src_bytes=$(du -b "$TMP/src/model.safetensors" | cut -f1)
[ "$src_bytes" -gt 500000000 ] || fail "source is only $src_bytes bytes"

# Peak RSS of the quantize run, in KiB.
peak=$(/usr/bin/python3 - "$BIN/dspark" "$TMP/src" "$TMP/q4" <<'PY'
import resource, subprocess, sys
r = subprocess.run([sys.argv[1], "quantize", sys.argv[2], sys.argv[3], "--target", "--bits", "4", "--group-size",
                    "64", "--max-shard-mb", "48"], capture_output=True, text=True, timeout=600)
if r.returncode:
    sys.stderr.write(r.stderr)
    print(-1)
else:
    sys.stderr.write(r.stdout)
    print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
PY
)
echo "source $((src_bytes / 1048576)) MiB, quantize peak RSS $((peak / 1024)) MiB"
[ "$peak" -gt 0 ] || fail "quantize failed"
[ "$peak" -lt $((48 * 1024)) ] || fail "peak RSS $peak KiB is not under 48 MiB"
[ "$peak" -lt $((src_bytes / 10240)) ] || fail "peak RSS $peak KiB is not under a tenth of the source"
n_shards=$(ls "$TMP/q4"/model-*-of-*.safetensors 2>/dev/null | wc -l)
[ "$n_shards" -ge 3 ] || fail "expected several shards, got $n_shards"
[ -f "$TMP/q4/model.safetensors.index.json" ] || fail "no index"
out=$("$BIN/ds_greedy" "$TMP/q4" --prompt-ids 1,5,9,17 -n 4 2>&1) || fail "generate on the quantized MoE: $out"
[ "$(echo "$out" | head -1 | tr ',' '\n' | grep -c .)" -eq 4 ] || fail "expected 4 greedy tokens, got '$out'"

[ "$fails" -eq 0 ] && echo "OK" || exit 1
