#!/usr/bin/env bash
# The drafter registry: train --register and quantize --register record drafters under their
# target's identity; generate/eval/calibrate/serve with --spec dspark and no -d pick the best by
# recorded held-out tau (and say which); `dspark drafters` lists them; a drafter registered for
# another target is never picked.
set -u
BIN=${DSPARK_BIN:?}/dspark
MODEL=${DSPARK_SHARED:?}/models/stories260K/stories260K.gguf
TMP=${DSPARK_TMP:-/tmp}/cli_registry.$$
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
py() { /usr/bin/python3 -c "$@"; }
export DSPARK_REGISTRY=$TMP/registry

# Nothing registered: a clear error naming the target and the registry.
"$BIN" generate -m "$MODEL" -p "Once upon a time" -n 8 --spec dspark >/dev/null 2>"$TMP/err"
[ $? -eq 1 ] && grep -q "register" "$TMP/err" && grep -q "$TMP/registry" "$TMP/err" ||
  fail "no registered drafter: $(cat "$TMP/err")"

printf 'Once upon a time\nThe little dog\nTom and Sue went\nOne day, a bird\n' >"$TMP/prompts.txt"
printf 'Once upon a time, there was\nThe big cat\n' >"$TMP/heldout.txt"
"$BIN" datagen -m "$MODEL" --prompts "$TMP/prompts.txt" -n 32 --max-tokens 64 --seed 1 -o "$TMP/data.bin" 2>/dev/null ||
  fail "datagen"
common=(-m "$MODEL" --data "$TMP/data.bin" --layers 1 --block 5 --markov-rank 16 --anchors 16 --batch 4 --seed 3 -t 1
  --eval-prompts "$TMP/heldout.txt" --eval-max-tokens 32)
# Two drafters for stories260K: 2 steps (tau near 1) and 30 steps at a useful rate.
"$BIN" train "${common[@]}" --steps 2 -o "$TMP/weak" --register 2>"$TMP/err" || fail "train --register (weak)"
grep -q "registered $TMP/weak for target llama:" "$TMP/err" || fail "train --register did not say so: $(cat "$TMP/err")"
"$BIN" train "${common[@]}" --steps 30 --lr 3e-3 --eval-every 10 --keep-best -o "$TMP/good" --register 2>/dev/null ||
  fail "train --register (good)"
tw=$(py "import json,glob; print([json.load(open(f))['tau'] for f in glob.glob('$TMP/registry/*.json') if json.load(open(f))['path'].endswith('/weak')][0])")
tg=$(py "import json; print(json.load(open('$TMP/good/best/heldout.json'))['tau'])")
py "import sys; sys.exit(0 if $tg > $tw else 1)" || fail "the longer run is not better ($tg vs $tw): the test needs it"

# A drafter registered for another target, with a better tau: never picked. (Its directory is a
# copy of the good one whose config.json names another target; its entry claims a tau of 99.)
cp -r "$TMP/good/best" "$TMP/other"
py "
import json; p='$TMP/other/config.json'; c=json.load(open(p)); c['target_id']='qwen3:0123456789abcdef'; json.dump(c, open(p,'w'))"
echo '{"tau": 99, "temp": 0, "step": 1}' >"$TMP/other/heldout.json"
"$BIN" quantize "$TMP/other" "$TMP/other-q8" --bits 8 --group-size 32 --register >/dev/null 2>"$TMP/err" ||
  fail "quantize --register: $(cat "$TMP/err")"
grep -q "registered $TMP/other-q8 for target qwen3:0123456789abcdef" "$TMP/err" || fail "quantize --register: $(cat "$TMP/err")"
printf '{"target_id": "qwen3:0123456789abcdef", "path": "%s", "source": "train", "tau": 99, "temp": 0, "step": 1, "time": 1}\n' \
  "$TMP/other" >"$TMP/registry/other.json"
# ... and an entry that claims this target for a directory that now holds the other target's drafter.
id=$(py "import json; print(json.load(open('$TMP/good/best/config.json'))['target_id'])")
printf '{"target_id": "%s", "path": "%s", "source": "train", "tau": 50, "temp": 0, "step": 1, "time": 1}\n' "$id" \
  "$TMP/other" >"$TMP/registry/stale.json"

"$BIN" drafters >"$TMP/all" 2>&1 || fail "drafters"
[ "$(grep -c "^llama:\|^qwen3:" "$TMP/all")" -eq 5 ] || fail "drafters lists $(cat "$TMP/all")"
"$BIN" drafters -m "$MODEL" >"$TMP/mine" 2>&1 || fail "drafters -m"
grep -q "qwen3:" "$TMP/mine" && fail "drafters -m lists another target's drafter"
# Best first: the stale entry (tau 50, missing), then good (best/), then weak.
py "
import sys
rows=[l.split() for l in open('$TMP/mine') if l.startswith('llama:')]
paths=[r[-1] if not r[-1].endswith(')') else [x for x in r if x.startswith('/')][0] for r in rows]
print(paths)
sys.exit(0 if len(rows)==3 and paths[1]=='$TMP/good/best' and paths[2]=='$TMP/weak' and 'missing' in open('$TMP/mine').read() else 1)" ||
  fail "drafters -m order: $(cat "$TMP/mine")"

# generate / eval / calibrate / serve without -d take good/best and name it on stderr.
want=$("$BIN" generate -m "$MODEL" -p "Once upon a time" -n 24 --temp 0 -d "$TMP/good/best" --stats 2>&1 >/dev/null |
  grep -o "[0-9]* rounds, tau [0-9.]*, [0-9/]* drafts accepted")
"$BIN" generate -m "$MODEL" -p "Once upon a time" -n 24 --temp 0 --spec dspark --stats >/dev/null 2>"$TMP/err" ||
  fail "generate --spec dspark without -d: $(cat "$TMP/err")"
grep -q "drafter $TMP/good/best (registered for $id; held-out tau" "$TMP/err" || fail "generate did not pick good/best: $(cat "$TMP/err")"
[ -n "$want" ] && grep -qF -- "$want" "$TMP/err" || fail "generate with the picked drafter differs from -d good/best"
"$BIN" eval -m "$MODEL" --prompts "$TMP/heldout.txt" --spec dspark --max-tokens 16 --json >"$TMP/ev" 2>"$TMP/err" ||
  fail "eval without -d: $(cat "$TMP/err")"
grep -q "drafter $TMP/good/best" "$TMP/err" || fail "eval did not pick good/best: $(cat "$TMP/err")"
"$BIN" calibrate -m "$MODEL" --prompts "$TMP/heldout.txt" --max-tokens 16 -o "$TMP/cal.json" >/dev/null 2>"$TMP/err" ||
  fail "calibrate without -d: $(cat "$TMP/err")"
grep -q "drafter $TMP/good/best" "$TMP/err" || fail "calibrate did not pick good/best: $(cat "$TMP/err")"
"$BIN" serve -m "$MODEL" --spec dspark --port 0 >/dev/null 2>"$TMP/serve.err" &
spid=$!
for _ in $(seq 50); do grep -q "drafter " "$TMP/serve.err" && break; sleep 0.1; done
kill "$spid" 2>/dev/null
wait "$spid" 2>/dev/null
grep -q "drafter $TMP/good/best" "$TMP/serve.err" || fail "serve did not pick good/best: $(cat "$TMP/serve.err")"

# Bad input.
mkdir -p "$TMP/noid" && cp "$TMP/weak/model.safetensors" "$TMP/noid/" && py "
import json; c=json.load(open('$TMP/weak/config.json')); del c['target_id']; json.dump(c, open('$TMP/noid/config.json','w'))"
"$BIN" quantize "$TMP/noid" "$TMP/noid-q8" --bits 8 --group-size 32 --register >/dev/null 2>"$TMP/err"
[ $? -eq 1 ] && grep -q "records no target_id" "$TMP/err" || fail "registering a drafter without target_id: $(cat "$TMP/err")"

[ $fails -eq 0 ] && echo "cli registry: all checks passed"
exit $((fails > 0))
