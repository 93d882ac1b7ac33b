#!/usr/bin/env bash
# Seeded sampling under the coupled rule (the default, include/dspark.h ds_verify_rule) is a function
# of (seed, target, prompt, sampling parameters) alone: `generate --seed S` gives the same tokens with
# --spec none, with a trained drafter at every schedule (fixed 1..7, threshold, auto, auto on a flat cost
# table, token trees) and with ngram,
# on 1 and 2 threads; `eval --concurrency 4` checks every prompt against plain decoding at T = 1; and
# a server with the drafter and --schedule auto answers 4 identical seeded requests sent at once
# (next to other requests) with the text of `generate --seed S --spec none`. Logit bias and penalties
# keep all of it.
set -u
BIN=${DSPARK_BIN:?}/dspark
MODEL=${DSPARK_SHARED:?}/models/stories260K/stories260K.gguf
SRC=${DSPARK_SRC:?}
TMP=${DSPARK_TMP:-/tmp}/cli_seeded.$$
mkdir -p "$TMP"
server=
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
py() { /usr/bin/python3 -c "$@"; }

# A tiny trained drafter with a confidence head (so that drafts are accepted and every schedule runs).
"$BIN" datagen -m "$MODEL" --prompts "$SRC/docs/prompts/stories-train.txt" -n 48 --max-tokens 96 --seed 1 -t 2 \
  -o "$TMP/data.bin" 2>/dev/null || fail "datagen"
"$BIN" train -m "$MODEL" --data "$TMP/data.bin" -o "$TMP/d" --layers 1 --steps 30 --batch 4 --anchors 16 --lr 3e-3 \
  -t 2 >/dev/null 2>&1 || fail "train"

# A flat cost table (verification free at every B): under it auto admits drafts whatever the
# confidences (at T = 1 with the early stop; greedy auto on a flat table, where the engine takes the
# best prefix, is test_eval_concurrency.sh's "auto-flat", checked lossless there).
py 'import json,sys; json.dump({"model": "flat", "threads": 1, "sps": [100.0] * 64}, open(sys.argv[1], "w"))' \
  "$TMP/flat.json"

PROMPT="Once upon a time, a little dog"
# gen NAME ARGS...: the generated tokens of a seeded T = 1 run (one line), stats in $TMP/NAME.json.
gen() {
  local name=$1
  shift
  "$BIN" generate -m "$MODEL" -p "$PROMPT" -n 48 --temp 1 --seed 42 --json "$@" >"$TMP/$name.json" 2>"$TMP/err" ||
    { fail "$name: $(cat "$TMP/err")"; return; }
  py "import json; print(json.load(open('$TMP/$name.json'))['tokens'])"
}
ref=$(gen ref --spec none -t 1)
[ -n "$ref" ] || fail "no reference output"
accepted=0
n_runs=0
for t in 1 2; do
  runs=("none:--spec none" "ngram:--spec ngram" "threshold:-d $TMP/d --conf-threshold 0.5" "auto:-d $TMP/d --schedule auto"
    "auto-flat:-d $TMP/d --schedule auto --costs $TMP/flat.json")
  for k in 1 2 3 4 5 6 7; do runs+=("fixed$k:-d $TMP/d --schedule fixed --draft-max $k"); done
  # token trees: side branches verified with the chain (the coupled rule commits the target's draws)
  runs+=("tree:-d $TMP/d --tree 3" "tree-auto:-d $TMP/d --schedule auto --tree 4 --tree-depth 3")
  for r in "${runs[@]}"; do
    name=${r%%:*}
    # shellcheck disable=SC2086
    got=$(gen "$name-t$t" ${r#*:} -t $t)
    n_runs=$((n_runs + 1))
    [ "$got" = "$ref" ] || fail "$name on $t threads: tokens differ from --spec none
  want $ref
  got  $got"
    a=$(py "import json; print(json.load(open('$TMP/$name-t$t.json')).get('tau', 1) > 1)" 2>/dev/null)
    [ "$a" = True ] && accepted=$((accepted + 1))
  done
done
echo "drafts accepted in $accepted of $n_runs runs"
[ "$accepted" -ge 8 ] || fail "drafts were accepted in only $accepted runs (the test needs a drafter that is accepted)"
# The same holds with the sampling filters.
f=(--top-k 20 --top-p 0.9 --min-p 0.02)
[ "$(gen filt-none --spec none "${f[@]}")" = "$(gen filt-d -d "$TMP/d" "${f[@]}")" ] || fail "top-k/top-p/min-p: drafter output differs"
# ... and with logit bias and penalties (part of the processed distribution of p and q), sampled and greedy.
pen=(--presence-penalty 0.6 --frequency-penalty 0.9 --logit-bias 370:-100 --logit-bias 268:2)
for T in 1 0; do
  a=$(gen pen-none-$T --spec none "${pen[@]}" --temp $T)
  for r in "fixed:-d $TMP/d --schedule fixed" "auto:-d $TMP/d --schedule auto" "ngram:--spec ngram" \
    "tree:-d $TMP/d --tree 3 --tree-depth 2"; do
    name=${r%%:*}
    # shellcheck disable=SC2086
    [ "$(gen pen-$name-$T ${r#*:} "${pen[@]}" --temp $T)" = "$a" ] ||
      fail "penalties + logit bias at T = $T, $name: output differs from --spec none"
  done
  [ "$a" != "$(gen nopen-$T --spec none --temp $T)" ] || fail "penalties + logit bias at T = $T changed nothing"
done
# The residual rule is exact in distribution only: it runs and reports its own rounds.
gen residual -d "$TMP/d" --verify residual >/dev/null
check_error() {
  local want=$1
  shift
  "$@" >/dev/null 2>"$TMP/err"
  local rc=$?
  [ $rc -eq 2 ] && grep -qF -- "$want" "$TMP/err" || fail "$* : exit $rc, $(cat "$TMP/err") (wanted '$want')"
}
check_error "--verify expects coupled or residual, got 'maybe'" "$BIN" generate -m "$MODEL" -p x --verify maybe

# eval at T = 1, 4 prompts at a time: every prompt's tokens equal plain decoding's (the check runs).
j=$("$BIN" eval -m "$MODEL" -d "$TMP/d" --prompts "$SRC/docs/prompts/stories-heldout.txt" --temp 1 --max-tokens 32 \
  --concurrency 4 --schedule auto -t 2 --json 2>"$TMP/err") || fail "eval --concurrency 4 at T = 1: $(cat "$TMP/err")"
echo "$j" | grep -q '"lossless_checked":true' || fail "eval at T = 1 did not check the tokens: $j"

# The server: 4 identical seeded requests at once, next to two others, with the drafter and auto.
"$BIN" serve -m "$MODEL" -d "$TMP/d" --port 0 --max-concurrency 4 -t 2 2>"$TMP/serve.err" &
server=$!
port=
for _ in $(seq 1 300); do
  port=$(sed -n 's/.*on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$TMP/serve.err")
  [ -n "$port" ] && break
  sleep 0.1
done
if [ -z "$port" ]; then
  fail "the server did not start: $(cat "$TMP/serve.err")"
else
  body='{"prompt": "'"$PROMPT"'", "max_tokens": 48, "temperature": 1, "seed": 42}'
  other='{"prompt": "The sun was", "max_tokens": 40, "temperature": 1, "seed": 7}'
  for i in 1 2 3 4; do
    curl -s --max-time 120 "http://127.0.0.1:$port/v1/completions" -d "$body" >"$TMP/r$i.json" &
  done
  curl -s --max-time 120 "http://127.0.0.1:$port/v1/completions" -d "$other" >"$TMP/o1.json" &
  curl -s --max-time 120 "http://127.0.0.1:$port/v1/completions" -d "$other" >"$TMP/o2.json" &
  wait $(jobs -p | grep -v "^$server$")
  want=$(py "import json; print(json.dumps(json.load(open('$TMP/ref.json'))['text']))")
  for i in 1 2 3 4; do
    got=$(py "import json; print(json.dumps(json.load(open('$TMP/r$i.json'))['choices'][0]['text']))" 2>&1)
    [ "$got" = "$want" ] || fail "server request $i: $got, want $want (generate --seed 42 --spec none)"
  done
  cmp -s <(py "import json; print(json.load(open('$TMP/o1.json'))['choices'][0]['text'])") \
    <(py "import json; print(json.load(open('$TMP/o2.json'))['choices'][0]['text'])") || fail "the other requests differ"
fi

if [ "$fails" -ne 0 ]; then
  echo "test_seeded: $fails failure(s)"
  exit 1
fi
echo "test_seeded: all checks passed"
