#!/usr/bin/env bash
# Datagen throughput on 1 process and on N MPI ranks (mpirun -np N, -t 1 per rank), interleaved
# repeats, the same sequences (and, checked, the same bytes): JSON lines on stdout, one per run, then
# the medians with min/max and the N-rank / 1-rank ratio.
#   scripts/bench_datagen.sh [BUILD_DIR] [RANKS (2)] [REPEATS (3)] [COUNT (256)] [MAX_TOKENS (128)]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
RANKS=${2:-2} REPEATS=${3:-3} COUNT=${4:-256} LEN=${5:-128}
BIN=$BUILD/bin/dspark
STORIES=${DSPARK_MODEL:-../shared/models/stories260K/stories260K.gguf}
command -v mpirun >/dev/null || { echo "bench_datagen: mpirun is not installed" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
args=(-m "$STORIES" --prompts docs/prompts/stories-train.txt -n "$COUNT" --max-tokens "$LEN" --seed 1 -t 1)
run() { # ranks rep
  local t0 t1 out=$TMP/d$1.bin
  t0=$(date +%s.%N)
  if [ "$1" -eq 1 ]; then "$BIN" datagen "${args[@]}" -o "$out" 2>"$TMP/err"
  else mpirun --oversubscribe -np "$1" "$BIN" datagen "${args[@]}" -o "$out" 2>"$TMP/err" >/dev/null; fi
  t1=$(date +%s.%N)
  local tokens
  tokens=$(sed -n 's/.*; \([0-9]*\) tokens generated.*/\1/p' "$TMP/err")
  /usr/bin/python3 -c "import json; print(json.dumps({'bench': 'datagen', 'ranks': $1, 'rep': $2, 'sequences': $COUNT,
    'tokens': $tokens, 'wall_s': round($t1 - $t0, 3), 'tok_per_s': round($tokens / ($t1 - $t0), 1)}))"
}
for rep in $(seq 1 "$REPEATS"); do
  run 1 "$rep" | tee -a "$TMP/lines"
  run "$RANKS" "$rep" | tee -a "$TMP/lines"
  cmp -s "$TMP/d1.bin" "$TMP/d$RANKS.bin" || { echo "bench_datagen: $RANKS ranks wrote other bytes" >&2; exit 1; }
done
/usr/bin/python3 - "$TMP/lines" "$RANKS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
n = int(sys.argv[2])
def stat(r):
    v = [x['tok_per_s'] for x in rows if x['ranks'] == r]
    return statistics.median(v), min(v), max(v)
one, many = stat(1), stat(n)
print(json.dumps({'bench': 'datagen_summary', 'ranks': n, 'tok_per_s_1': one[0], 'min_1': one[1], 'max_1': one[2],
                  'tok_per_s_n': many[0], 'min_n': many[1], 'max_n': many[2], 'ratio': round(many[0] / one[0], 3),
                  'wall_clock_includes': 'model load and mpirun start-up'}))
PY
