#!/usr/bin/env bash
# dspark next to its peer, llama.cpp, on the same GGUF files, threads and prompt lengths.
#
#   LLAMA_CPP=/path/to/llama.cpp scripts/bench_peer.sh [BUILD_DIR] [FILE.gguf ...]
#
# LLAMA_CPP is a local llama.cpp checkout the user points to (never fetched, never a dependency of
# dspark, never used by the tests). It is built once into $LLAMA_CPP/build-dspark-peer (Release,
# GGML_NATIVE, OpenMP, CPU only; llama-bench alone) unless LLAMA_BENCH names a built llama-bench.
# Default files: the Q4_K_M, Q6_K, Q4_0 and IQ4_XS stories-inflated fixtures and llama-tiny Q8_0
# (../shared/models/gguf-fixtures).
#
# For each file and thread count (THREADS, default "1 2"), REPEATS times (default 5), interleaved
# (llama.cpp, dspark, llama.cpp, ...):
#   - prefill: PP tokens (default 512) in one batch: llama-bench -p PP -n 0; dspark: bench_decode
#     --model FILE --prefill PP (the same product path `dspark generate` takes for a prompt);
#   - decode: TG tokens (default 128) one at a time: llama-bench -p 0 -n TG; dspark: bench_decode --model
#     FILE --tokens TG.
# Both sides run with n_ctx >= PP + TG, one sequence, CPU only. One JSON line per measurement on
# stdout, then one summary line per (file, threads, phase) with the medians, min/max and the ratio
# dspark / llama.cpp (tokens per second; > 1: dspark is faster). Progress on stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
shift || true
FIX=${FIXTURES:-../shared/models/gguf-fixtures}
FILES=("$@")
[ ${#FILES[@]} -gt 0 ] || FILES=("$FIX/stories-inflated/Q4_K_M.gguf" "$FIX/stories-inflated/Q6_K.gguf"
  "$FIX/stories-inflated/Q4_0.gguf" "$FIX/stories-inflated/IQ4_XS.gguf" "$FIX/llama-tiny/Q8_0.gguf")
THREADS=${THREADS:-"1 2"}
REPEATS=${REPEATS:-5}
PP=${PP:-512}
TG=${TG:-128}

die() { echo "bench_peer: $*" >&2; exit 1; }
[ -x "$BUILD/bin/bench_decode" ] || die "$BUILD/bin/bench_decode not found (make build first)"
if [ -z "${LLAMA_BENCH:-}" ]; then
  [ -n "${LLAMA_CPP:-}" ] || die "set LLAMA_CPP to a llama.cpp checkout (or LLAMA_BENCH to a built llama-bench)"
  [ -f "$LLAMA_CPP/CMakeLists.txt" ] || die "$LLAMA_CPP is not a llama.cpp checkout"
  LB=$LLAMA_CPP/build-dspark-peer
  LLAMA_BENCH=$LB/bin/llama-bench
  if [ ! -x "$LLAMA_BENCH" ]; then
    echo "bench_peer: building llama-bench in $LB (once)" >&2
    cmake -S "$LLAMA_CPP" -B "$LB" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_OPENMP=ON -DLLAMA_CURL=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF >&2
    cmake --build "$LB" -j "$(nproc)" --target llama-bench >&2
  fi
fi
[ -x "$LLAMA_BENCH" ] || die "$LLAMA_BENCH is not executable"
LCPP_COMMIT=$(git -C "${LLAMA_CPP:-/nonexistent}" rev-parse --short HEAD 2>/dev/null || echo unknown)

# llama-bench: tokens per second of one test (its JSON output: avg_ts over -r 1 repetition).
lcpp() { # file threads pp tg
  "$LLAMA_BENCH" -m "$1" -t "$2" -p "$3" -n "$4" -r 1 -o json --no-warmup 2>/dev/null |
    /usr/bin/python3 -c 'import json,sys; r=json.load(sys.stdin); print(r[0]["avg_ts"])'
}
# bench_decode on the file: its "prefill" / "decode" tokens per second.
dsp() { # file threads pp tg
  local args=(--model "$1" --threads "$2")
  if [ "$3" -gt 0 ]; then args+=(--prefill "$3" -n 0 --repeats 3); else args+=(-n "$4" --repeats 1); fi
  "$BUILD/bin/bench_decode" "${args[@]}" 2>/dev/null |
    /usr/bin/python3 -c '
import json, sys
want = sys.argv[1]
for ln in sys.stdin:
    ln = ln.strip()
    if ln.startswith("{"):
        r = json.loads(ln)
        if r.get("bench") == want:
            print(r["tok_per_s"]); break' "$([ "$3" -gt 0 ] && echo prefill || echo decode)"
}

RESULTS=$(mktemp)
trap 'rm -f "$RESULTS"' EXIT
for f in "${FILES[@]}"; do
  [ -f "$f" ] || die "$f not found"
  for t in $THREADS; do
    for phase in prefill decode; do
      if [ $phase = prefill ]; then pp=$PP tg=0; else pp=0 tg=$TG; fi
      for r in $(seq "$REPEATS"); do
        echo "bench_peer: $(basename "$(dirname "$f")")/$(basename "$f") t=$t $phase repeat $r/$REPEATS" >&2
        a=$(lcpp "$f" "$t" "$pp" "$tg") || die "llama-bench failed on $f"
        b=$(dsp "$f" "$t" "$pp" "$tg") || die "bench_decode failed on $f"
        [ -n "$a" ] && [ -n "$b" ] || die "no figure from llama-bench ($a) or bench_decode ($b) on $f"
        for side in llama.cpp dspark; do
          v=$a; [ $side = dspark ] && v=$b
          printf '{"bench":"peer","file":"%s","threads":%s,"phase":"%s","tokens":%s,"engine":"%s","tok_per_s":%s,"repeat":%s,"llama_cpp":"%s"}\n' \
            "$f" "$t" "$phase" "$((pp + tg))" "$side" "$v" "$r" "$LCPP_COMMIT" | tee -a "$RESULTS"
        done
      done
    done
  done
done
/usr/bin/python3 - "$RESULTS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
keys = sorted({(r["file"], r["threads"], r["phase"]) for r in rows})
for k in keys:
    v = {e: sorted(r["tok_per_s"] for r in rows if (r["file"], r["threads"], r["phase"]) == k and r["engine"] == e)
         for e in ("llama.cpp", "dspark")}
    ratios = sorted(b / a for a, b in zip(
        [r["tok_per_s"] for r in rows if (r["file"], r["threads"], r["phase"]) == k and r["engine"] == "llama.cpp"],
        [r["tok_per_s"] for r in rows if (r["file"], r["threads"], r["phase"]) == k and r["engine"] == "dspark"]))
    print(json.dumps({"bench": "peer_summary", "file": k[0], "threads": k[1], "phase": k[2],
                      "llama_cpp_median": statistics.median(v["llama.cpp"]), "dspark_median": statistics.median(v["dspark"]),
                      "ratio_median": statistics.median(ratios), "ratio_min": ratios[0], "ratio_max": ratios[-1]}))
PY
