#!/usr/bin/env bash
# dspark next to its peer, llama.cpp, on the same GGUF files, threads and prompts.
#
#   LLAMA_CPP=/path/to/llama.cpp scripts/bench_peer.sh [BUILD_DIR] [FILE.gguf ...]
#   LLAMA_CPP=... DRAFTER=DIR scripts/bench_peer.sh BUILD_DIR TARGET.gguf      (speculative decoding too)
#
# LLAMA_CPP is a local llama.cpp checkout the user points to (never fetched, never a dependency of
# dspark, never used by the tests). It is built once into $LLAMA_CPP/build-dspark-peer (Release,
# GGML_NATIVE, OpenMP, CPU only: llama-bench, and llama-server for the speculative phase) unless
# LLAMA_BENCH / LLAMA_SERVER name built binaries. Default files: the Q4_K_M, Q6_K, Q4_0 and IQ4_XS
# stories-inflated fixtures and llama-tiny Q8_0 (../shared/models/gguf-fixtures).
#
# For each file and thread count (THREADS, default "1 2"), REPEATS times (default 5), interleaved
# (llama.cpp, dspark, llama.cpp, ...), the phases in PHASES (default "prefill decode", plus "spec"
# when DRAFTER is set):
#   - prefill: PP tokens (default 512) in one batch: llama-bench -p PP -n 0; dspark: bench_decode
#     --model FILE --prefill PP (the same product path `dspark generate` takes for a prompt);
#   - decode: TG tokens (default 128) one at a time: llama-bench -p 0 -n TG; dspark: bench_decode --model
#     FILE --tokens TG.
#   - verify: one forward over VERIFY tokens (default 8: a verification of 7 drafted tokens), measured
#     as prefill is (llama-bench -p VERIFY; bench_decode --prefill VERIFY). With decode in the same run,
#     the summary also gives each engine's cost of that forward in decode steps (VERIFY x decode tok/s
#     / verify tok/s): what a speculative round costs each engine before any drafting.
#   - spec: speculative decoding with the same drafter on both, through each engine's own server
#     (bench/peer_serve.py: the same client, PROMPTS (default docs/prompts/stories-heldout.txt), SPEC_TG
#     new tokens each (default 64), CONC requests at a time (default "1 4"), temperatures TEMPS (default
#     "0 1"; T > 0: seed 1 + prompt index)). DRAFTER is a DeepSpec drafter directory of the target;
#     llama.cpp gets it as the dflash GGUF its converter writes (DRAFTER_GGUF, default: written by
#     bench/drafter_gguf.py, bf16). Configurations: llama-server plain, llama-server --spec-type
#     draft-dspark --spec-draft-n-max K for each K in DRAFT_N (default "3 5 7"), dspark serve --spec
#     none, dspark serve -d DRAFTER for each of DSPARK_SPEC (default "auto"; fixed-K: --schedule fixed
#     --draft-max K). Greedy texts are compared across configurations
#     (each engine's speculative text must equal its own plain text; the two engines' texts may
#     differ where their arithmetic rounds differently, and the summary says whether they agree).
# DSPARK_BF16_INPUTS=1: dspark's BF16 products on VDPBF16PS, as llama.cpp's (bench_decode --bf16-inputs
# 1 in the first three phases, the variable itself for dspark serve); without it dspark keeps f32 inputs.
# dspark's GGUF Q8_0 products round their inputs to int8 per block by default, as llama.cpp's Q8_0 x Q8_0;
# DSPARK_INT8_INPUTS=0 puts them on f32 inputs (bench_decode --int8-inputs -1, the variable itself
# for dspark serve), DSPARK_INT8_INPUTS=1 MLX affine targets on int8 too (--int8-inputs 1).
# DSPARK_KV_F16=1: dspark's KV caches hold halves, as llama.cpp's do by default (bench_decode --kv-f16 1,
# the variable itself for dspark serve).
# DEPTH=D (default 0) runs every phase but spec after D tokens already in the cache (llama-bench -d D,
# bench_decode --depth D): decoding and verification at a long context, where attention reads the
# cache; llama-bench runs with its default attention (flash attention "auto").
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
VERIFY=${VERIFY:-8}
TG=${TG:-128}
DEPTH=${DEPTH:-0}
PHASES=${PHASES:-"prefill verify decode${DRAFTER:+ spec}"}
PROMPTS=${PROMPTS:-docs/prompts/stories-heldout.txt}
SPEC_TG=${SPEC_TG:-64}
CONC=${CONC:-"1 4"}
TEMPS=${TEMPS:-"0 1"}
DRAFT_N=${DRAFT_N:-"3 5 7"}
DSPARK_SPEC=${DSPARK_SPEC:-auto}

die() { echo "bench_peer: $*" >&2; exit 1; }
[[ "$DEPTH" =~ ^[0-9]+$ ]] || die "DEPTH must be a number of tokens (0 or more), not '$DEPTH'"
[ -x "$BUILD/bin/bench_decode" ] || die "$BUILD/bin/bench_decode not found (make build first)"
if [ -z "${LLAMA_BENCH:-}" ]; then
  [ -n "${LLAMA_CPP:-}" ] || die "set LLAMA_CPP to a llama.cpp checkout (or LLAMA_BENCH to a built llama-bench)"
  [ -f "$LLAMA_CPP/CMakeLists.txt" ] || die "$LLAMA_CPP is not a llama.cpp checkout"
  LB=$LLAMA_CPP/build-dspark-peer
  LLAMA_BENCH=$LB/bin/llama-bench
  LLAMA_SERVER=${LLAMA_SERVER:-$LB/bin/llama-server}
  if [ ! -x "$LLAMA_BENCH" ] || { [ -n "${DRAFTER:-}" ] && [ ! -x "$LLAMA_SERVER" ]; }; then
    echo "bench_peer: building llama-bench and llama-server in $LB (once)" >&2
    cmake -S "$LLAMA_CPP" -B "$LB" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_OPENMP=ON -DLLAMA_CURL=OFF \
      -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF >&2
    cmake --build "$LB" -j "$(nproc)" --target llama-bench llama-server >&2
  fi
fi
[ -x "$LLAMA_BENCH" ] || die "$LLAMA_BENCH is not executable"
if [[ " $PHASES " == *" spec "* ]]; then
  [ -n "${DRAFTER:-}" ] && [ -f "$DRAFTER/config.json" ] || die "the spec phase needs DRAFTER, a DeepSpec drafter directory"
  [ -x "${LLAMA_SERVER:-}" ] || die "LLAMA_SERVER (${LLAMA_SERVER:-unset}) is not executable"
  [ -f "$PROMPTS" ] || die "$PROMPTS not found"
fi
LCPP_COMMIT=$(git -C "${LLAMA_CPP:-/nonexistent}" rev-parse --short HEAD 2>/dev/null || echo unknown)

# llama-bench: tokens per second of one test (its JSON output: avg_ts over -r 1 repetition, after
# its warm-up run: dspark enters the weights into the page tables at load, so neither side counts
# page faults).
lcpp() { # file threads pp tg
  "$LLAMA_BENCH" -m "$1" -t "$2" -p "$3" -n "$4" -d "$DEPTH" -r 1 -o json 2>/dev/null |
    /usr/bin/python3 -c 'import json,sys; r=json.load(sys.stdin); print(r[0]["avg_ts"])'
}
# bench_decode on the file: its "prefill" / "decode" tokens per second.
dsp() { # file threads pp tg
  local args=(--model "$1" --threads "$2" --depth "$DEPTH")
  [ "${DSPARK_BF16_INPUTS:-0}" = 1 ] && args+=(--bf16-inputs 1) # (as the server reads it, below)
  [ "${DSPARK_INT8_INPUTS:-}" = 1 ] && args+=(--int8-inputs 1)
  [ "${DSPARK_INT8_INPUTS:-}" = 0 ] && args+=(--int8-inputs -1)
  [ "${DSPARK_KV_F16:-0}" = 1 ] && args+=(--kv-f16 1)
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
    for phase in $PHASES; do
      [ "$phase" = spec ] && continue
      case $phase in
        prefill) pp=$PP tg=0 ;;
        verify) pp=$VERIFY tg=0 ;;
        decode) pp=0 tg=$TG ;;
        *) die "unknown phase $phase (prefill, verify, decode, spec)" ;;
      esac
      for r in $(seq "$REPEATS"); do
        echo "bench_peer: $(basename "$(dirname "$f")")/$(basename "$f") t=$t $phase repeat $r/$REPEATS" >&2
        a=$(lcpp "$f" "$t" "$pp" "$tg") || die "llama-bench failed on $f"
        b=$(dsp "$f" "$t" "$pp" "$tg") || die "bench_decode failed on $f"
        [ -n "$a" ] && [ -n "$b" ] || die "no figure from llama-bench ($a) or bench_decode ($b) on $f"
        for side in llama.cpp dspark; do
          v=$a; [ $side = dspark ] && v=$b
          printf '{"bench":"peer","file":"%s","threads":%s,"phase":"%s","tokens":%s,"depth":%s,"engine":"%s","tok_per_s":%s,"repeat":%s,"llama_cpp":"%s"}\n' \
            "$f" "$t" "$phase" "$((pp + tg))" "$DEPTH" "$side" "$v" "$r" "$LCPP_COMMIT" | tee -a "$RESULTS"
        done
      done
    done
  done
done
# The speculative phase: each configuration is one server run over all prompts (bench/peer_serve.py).
PORT=${PORT:-18431}
serve_run() { # engine label conc temp repeat file threads -- command...
  local engine=$1 label=$2 conc=$3 temp=$4 rep=$5 f=$6 t=$7
  shift 7
  /usr/bin/python3 bench/peer_serve.py --engine "$engine" --label "$label" --port "$PORT" --prompts "$PROMPTS" \
    --conc "$conc" --max-tokens "$SPEC_TG" --temp "$temp" --repeat "$rep" --log "$SPEC_LOG" "$@" |
    /usr/bin/python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); r.update(file=sys.argv[1], threads=int(sys.argv[2])); print(json.dumps(r))' "$f" "$t"
}
if [[ " $PHASES " == *" spec "* ]]; then
  SPEC_LOG=$(mktemp)
  for f in "${FILES[@]}"; do
    dg=${DRAFTER_GGUF:-}
    if [ -z "$dg" ]; then
      dg=$(mktemp --suffix=.gguf)
      echo "bench_peer: converting $DRAFTER for llama.cpp (bench/drafter_gguf.py)" >&2
      /usr/bin/python3 bench/drafter_gguf.py "$DRAFTER" "$f" "$dg" --outtype bf16 >/dev/null
    fi
    for t in $THREADS; do for conc in $CONC; do for temp in $TEMPS; do
      ctx=$(( (SPEC_TG + 512) * conc ))
      for r in $(seq "$REPEATS"); do
        echo "bench_peer: spec $(basename "$f") t=$t conc=$conc temp=$temp repeat $r/$REPEATS" >&2
        L=("$LLAMA_SERVER" -m "$f" -t "$t" -tb "$t" -np "$conc" -c "$ctx" --port "$PORT" --host 127.0.0.1 --no-webui)
        D=("$BUILD/bin/dspark" serve -m "$f" -t "$t" --max-concurrency "$conc" --port "$PORT" --cache-mb 0)
        serve_run llama.cpp plain "$conc" "$temp" "$r" "$f" "$t" -- "${L[@]}" | tee -a "$RESULTS"
        serve_run dspark plain "$conc" "$temp" "$r" "$f" "$t" -- "${D[@]}" --spec none | tee -a "$RESULTS"
        for k in $DRAFT_N; do
          serve_run llama.cpp "draft-dspark-$k" "$conc" "$temp" "$r" "$f" "$t" -- "${L[@]}" -md "$dg" \
            --spec-type draft-dspark --spec-draft-n-max "$k" -fa on | tee -a "$RESULTS"
        done
        for c in $DSPARK_SPEC; do
          if [ "$c" = auto ]; then sched=(--schedule auto); else sched=(--schedule fixed --draft-max "${c#fixed-}"); fi
          serve_run dspark "$c" "$conc" "$temp" "$r" "$f" "$t" -- "${D[@]}" -d "$DRAFTER" "${sched[@]}" | tee -a "$RESULTS"
        done
      done
    done; done; done
    [ -n "${DRAFTER_GGUF:-}" ] || rm -f "$dg"
  done
  rm -f "$SPEC_LOG"
fi
/usr/bin/python3 - "$RESULTS" <<'PY'
import json, statistics, sys
allrows = [json.loads(l) for l in open(sys.argv[1])]
rows = [r for r in allrows if r["bench"] == "peer"]
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
# A verification's cost in decode steps, per engine, from the same run's medians.
for f, t in sorted({(r["file"], r["threads"]) for r in rows}):
    med = {}
    for r in rows:
        if (r["file"], r["threads"]) == (f, t) and r["phase"] in ("verify", "decode"):
            med.setdefault((r["engine"], r["phase"]), []).append(r)
    if not all((e, ph) in med for e in ("llama.cpp", "dspark") for ph in ("verify", "decode")):
        continue
    out = {"bench": "peer_verify_cost", "file": f, "threads": t, "rows": med[("dspark", "verify")][0]["tokens"]}
    for e in ("llama.cpp", "dspark"):
        ver = statistics.median(r["tok_per_s"] for r in med[(e, "verify")])
        dec = statistics.median(r["tok_per_s"] for r in med[(e, "decode")])
        out[e + "_decode_steps"] = round(out["rows"] * dec / ver, 3)
    print(json.dumps(out))
# The speculative phase: per (file, threads, conc, temp), each configuration's median tokens per
# second, its speedup over its own engine's plain run (per repeat, median), dspark auto against
# llama.cpp's best draft length, and whether greedy texts agree.
spec = [r for r in allrows if r["bench"] == "peer_spec"]
for k in sorted({(r["file"], r["threads"], r["conc"], r["temp"]) for r in spec}):
    rs = [r for r in spec if (r["file"], r["threads"], r["conc"], r["temp"]) == k]
    by = {}
    for r in rs:
        by.setdefault((r["engine"], r["label"]), {})[r["repeat"]] = r
    med = {c: statistics.median(x["tok_per_s"] for x in v.values()) for c, v in by.items()}
    def speedup(c):
        plain = by[(c[0], "plain")]
        return statistics.median(v["tok_per_s"] / plain[i]["tok_per_s"] for i, v in by[c].items() if i in plain)
    lc = [c for c in by if c[0] == "llama.cpp" and c[1] != "plain"]
    best = max(lc, key=lambda c: med[c]) if lc else None
    out = {"bench": "peer_spec_summary", "file": k[0], "threads": k[1], "conc": k[2], "temp": k[3],
           "tok_per_s": {"%s %s" % c: round(v, 3) for c, v in sorted(med.items())},
           "speedup_over_own_plain": {"%s %s" % c: round(speedup(c), 3) for c in sorted(by) if c[1] != "plain"}}
    if best and ("dspark", "auto") in by:
        ratios = sorted(by[("dspark", "auto")][i]["tok_per_s"] / by[best][i]["tok_per_s"]
                        for i in by[best] if i in by[("dspark", "auto")])
        out.update(llama_cpp_best=best[1], dspark_auto_over_llama_cpp_best=statistics.median(ratios),
                   ratio_min=ratios[0], ratio_max=ratios[-1])
    if k[3] == 0:  # greedy: each engine's speculative texts against its own plain texts, and across engines
        def texts(c):
            return [x["texts"] for x in by[c].values()]
        out["lossless"] = {"%s %s" % c: all(t == texts((c[0], "plain"))[0] for t in texts(c))
                           for c in sorted(by) if c[1] != "plain"}
        if ("llama.cpp", "plain") in by and ("dspark", "plain") in by:
            a, b = texts(("llama.cpp", "plain"))[0], texts(("dspark", "plain"))[0]
            out["engines_agree_prompts"] = "%d/%d" % (sum(x == y for x, y in zip(a, b)), len(a))
    print(json.dumps(out))
PY
