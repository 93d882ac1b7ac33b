#!/usr/bin/env bash
# dspark eval --concurrency: R prompts at a time through one engine, with ngram drafting and with a
# fresh (init-drafter) DSpark drafter, at temperature 0, pass the losslessness check (every prompt's
# tokens equal plain decoding's at the same concurrency) and report the JSON fields; --schedule auto
# with a cost table (from `dspark profile -o FILE` when that command exists, else written here in
# ds_cost_table_save's format), --conf-threshold meaning --schedule threshold, and bad values.
set -u
BIN=${DSPARK_BIN:?}/dspark
MODEL=${DSPARK_SHARED:?}/models/stories260K/stories260K.gguf
PROMPTS=${DSPARK_SRC:?}/docs/prompts/stories-heldout.txt
TMP=${DSPARK_TMP:-/tmp}/cli_eval_concurrency.$$
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# has_field JSON KEY [VALUE]: the key is present (with exactly VALUE when given).
has_field() {
  if [ $# -ge 3 ]; then
    echo "$1" | grep -q "\"$2\":$3[,}]" || fail "expected \"$2\":$3 in: $1"
  else
    echo "$1" | grep -q "\"$2\":" || fail "no \"$2\" in: $1"
  fi
}

# run_eval NAME ARGS...: eval at temp 0 with --json into $j (not a subshell, so failures count);
# it must exit 0 and pass the losslessness check.
j=
run_eval() {
  local name=$1
  shift
  j=$("$BIN" eval -m "$MODEL" --prompts "$PROMPTS" --temp 0 --max-tokens 32 -t 1 --json "$@" 2>"$TMP/err")
  local rc=$?
  if [ $rc -ne 0 ]; then
    fail "$name: exit $rc: $(cat "$TMP/err")"
    j="{}"
    return
  fi
  has_field "$j" lossless_checked true
  for k in tok_per_s baseline_tok_per_s speedup request_tok_per_s baseline_request_tok_per_s; do has_field "$j" "$k"; done
}

"$BIN" init-drafter -m "$MODEL" -o "$TMP/drafter" --layers 1 --seed 3 >/dev/null 2>&1 || fail "init-drafter failed"

# 1. ngram, 4 at a time.
run_eval ngram --spec ngram --concurrency 4
has_field "$j" concurrency 4
has_field "$j" spec '"ngram"'
has_field "$j" schedule '"fixed"'
has_field "$j" generated_tokens 320
has_field "$j" baseline_generated_tokens 320
has_field "$j" prompts 10

# 2. A fresh DSpark drafter, 4 at a time (more than the engine's initial 4 slots are never live, but
#    prompts join as others finish), and 3 at a time (10 prompts do not divide into waves of 3).
run_eval dspark4 -d "$TMP/drafter" --concurrency 4
has_field "$j" concurrency 4
has_field "$j" spec '"dspark"'
has_field "$j" generated_tokens 320
run_eval dspark3 -d "$TMP/drafter" --concurrency 3 --draft-max 3
has_field "$j" concurrency 3

# 3. --conf-threshold without --schedule means threshold; an explicit --schedule wins. A fresh
#    drafter's confidence is 0.5 everywhere: a threshold of 0.6 verifies nothing, 0.4 everything.
run_eval threshold -d "$TMP/drafter" --concurrency 4 --conf-threshold 0.6
has_field "$j" schedule '"threshold"'
has_field "$j" drafted 0
run_eval threshold-low -d "$TMP/drafter" --concurrency 4 --conf-threshold 0.4
has_field "$j" schedule '"threshold"'
echo "$j" | grep -q '"drafted":0,' && fail "threshold 0.4 verified no drafts: $j"
run_eval threshold-fixed -d "$TMP/drafter" --concurrency 4 --conf-threshold 0.6 --schedule fixed
has_field "$j" schedule '"fixed"'
echo "$j" | grep -q '"drafted":0,' && fail "--schedule fixed verified no drafts: $j"

# 4. --schedule auto with a cost table.
COSTS=$TMP/costs.json
if "$BIN" profile --help >/dev/null 2>&1; then
  "$BIN" profile -m "$MODEL" -t 1 --bmax 64 --ctx 64 --repeats 1 --quick -o "$COSTS" >/dev/null 2>"$TMP/err" ||
    fail "dspark profile failed: $(cat "$TMP/err")"
else
  # ds_cost_table_save's format: SPS(B) for B = 1..64, here a decode-like shape (flat, then falling).
  /usr/bin/python3 - "$COSTS" <<'EOF'
import json, sys
sps = [5000.0 / (1 + 0.05 * b) for b in range(1, 65)]
json.dump({"model": "stories260K", "threads": 1, "sps": sps}, open(sys.argv[1], "w"))
EOF
fi
[ -s "$COSTS" ] || fail "no cost table at $COSTS"
run_eval auto -d "$TMP/drafter" --concurrency 4 --schedule auto --costs "$COSTS"
has_field "$j" schedule '"auto"'
has_field "$j" concurrency 4
# A flat table (verification is free) makes auto verify drafts: still lossless.
/usr/bin/python3 -c 'import json,sys; json.dump({"model": "flat", "threads": 1, "sps": [100.0] * 64}, open(sys.argv[1], "w"))' \
  "$TMP/flat.json"
run_eval auto-flat -d "$TMP/drafter" --concurrency 4 --schedule auto --costs "$TMP/flat.json"
echo "$j" | grep -q '"drafted":0,' && fail "auto with a flat cost table verified no drafts: $j"

# 5. The table output names the concurrency and both rates.
out=$("$BIN" eval -m "$MODEL" --prompts "$PROMPTS" --temp 0 --max-tokens 16 -t 1 --spec ngram --concurrency 2 2>/dev/null)
echo "$out" | grep -q "concurrency 2" || fail "table lacks the concurrency: $out"
echo "$out" | grep -q "request tok/s" || fail "table lacks per-request tok/s: $out"
echo "$out" | grep -q "^lossless" || fail "table lacks the losslessness line: $out"

# 6. Bad values: exit 1 or 2 with a one-line message naming the option, never a crash.
check_error() { # expected-substring, args...
  local want=$1
  shift
  "$BIN" eval -m "$MODEL" --prompts "$PROMPTS" "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  if [ $rc -eq 0 ] || [ $rc -ge 128 ]; then fail "exit $rc for: $*"; return; fi
  grep -q -- "$want" "$TMP/err" || fail "stderr lacks '$want' for: $* (got: $(cat "$TMP/err"))"
}
check_error "--concurrency" --concurrency 0
check_error "--concurrency" --concurrency many
check_error "--schedule" --schedule sometimes
check_error "missing.json" --schedule auto --costs "$TMP/missing.json"
echo '{"model": "x", "sps": []}' >"$TMP/empty.json"
check_error "sps" --schedule auto --costs "$TMP/empty.json"

if [ $fails -ne 0 ]; then
  echo "$fails failure(s)"
  exit 1
fi
echo "ok"
