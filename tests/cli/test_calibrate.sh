#!/usr/bin/env bash
# dspark calibrate and dspark profile end to end on stories260K: an untrained head (c = 0.5) keeps
# T = 1 with ECE = |0.5^k - acceptance|; a tiny trained drafter gets a calibration.json that generate
# loads and that leaves greedy output unchanged; a broken calibration.json fails generate with one
# line naming it; drafters without a confidence head are refused; profile writes a usable cost table.
set -u
BIN=${DSPARK_BIN:?}/dspark
MODEL=${DSPARK_SHARED:?}/models/stories260K/stories260K.gguf
SRC=${DSPARK_SRC:?}
HELDOUT=$SRC/docs/prompts/stories-heldout.txt
TMP=$(cd "${DSPARK_TMP:-/tmp}" && pwd)/cli_calibrate.$$
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
py() { /usr/bin/python3 -c "$@"; }

# 1. An untrained drafter: every confidence is 0.5 (z = 0), so every temperature ties and T_k = 1;
# ECE before = after = |0.5^k - realized prefix acceptance|.
"$BIN" init-drafter -m "$MODEL" -o "$TMP/init" --seed 1 2>/dev/null || fail "init-drafter"
"$BIN" calibrate -m "$MODEL" -d "$TMP/init" --prompts "$HELDOUT" --max-tokens 48 -t 2 >"$TMP/init.out" 2>"$TMP/init.err" ||
  fail "calibrate (untrained): $(cat "$TMP/init.err")"
grep -q "ECE" "$TMP/init.out" || fail "calibrate printed no table"
py "
import json,sys
j=json.load(open('$TMP/init/calibration.json'))
for k in ('method','temperatures','ece_before','ece_after','auc','rounds','temp','prompts'):
    assert k in j, k
assert j['method']=='sts' and len(j['temperatures'])==7, j
assert all(t==1 for t in j['temperatures']), j['temperatures']
assert j['rounds']>0 and j['temp']==0 and j['prompts'].endswith('stories-heldout.txt')
for k in range(7):
    want=abs(0.5**(k+1)-j['acceptance'][k])
    assert abs(j['ece_before'][k]-want)<1e-9 and abs(j['ece_after'][k]-want)<1e-9, (k, j['ece_before'][k], want)
s=j['sampled']  # the default: a second pass at temperature 1, the sampled sequences' own fit
assert s['temp']==1 and len(s['temperatures'])==7 and all(t==1 for t in s['temperatures']) and s['rounds']>0, s
print('untrained: T = 1 everywhere, ECE_1 = %.4f; sampled: slot 1 accepted %.3f against %.3f greedy' %
      (j['ece_before'][0], s['acceptance'][0], j['acceptance'][0]))" || fail "untrained calibration.json"
# Two temperatures of one class: a usage error before any work, nothing written.
"$BIN" calibrate -m "$MODEL" -d "$TMP/init" --prompts "$HELDOUT" --temp 0.5,1 -o "$TMP/two.json" >/dev/null 2>"$TMP/two.err"
[ $? -eq 2 ] && grep -q "one 0" "$TMP/two.err" && [ ! -e "$TMP/two.json" ] || fail "--temp 0.5,1 was not refused: $(cat "$TMP/two.err")"

# 2. A tiny trained drafter, calibrated into its own directory (the default output).
"$BIN" datagen -m "$MODEL" --prompts "$SRC/docs/prompts/stories-train.txt" -n 48 --max-tokens 96 --seed 1 -t 2 \
  -o "$TMP/data.bin" 2>/dev/null || fail "datagen"
"$BIN" train -m "$MODEL" --data "$TMP/data.bin" -o "$TMP/d" --layers 1 --steps 30 --batch 4 --anchors 16 --lr 3e-3 \
  -t 2 >/dev/null 2>&1 || fail "train"
for T in 0 1; do
  "$BIN" calibrate -m "$MODEL" -d "$TMP/d" --prompts "$HELDOUT" --temp $T --seed 3 --max-tokens 64 -t 2 -o "$TMP/cal$T.json" \
    >"$TMP/cal$T.out" 2>"$TMP/cal$T.err" || fail "calibrate --temp $T: $(cat "$TMP/cal$T.err")"
  py "
import json,math
j=json.load(open('$TMP/cal$T.json'))
T=j['temperatures']
assert len(T)==7 and all(0.125-1e-9<=t<=8+1e-9 for t in T), T
assert all(abs(math.log2(t)*10-round(math.log2(t)*10))<1e-6 for t in T), 'off the grid: %s'%T
assert j['ece_after'][0]<=j['ece_before'][0]+1e-12, (j['ece_before'][0], j['ece_after'][0])
assert j['auc'][0] is None or abs(j['auc'][0]-j['auc_before'][0])<1e-12  # rank preserving at k = 1
assert j['rounds']>=j['n'][0]>=j['n'][6]>0 and j['temp']==$T
print('temp $T: T =', ['%.3f'%t for t in T])" || fail "calibration at temp $T"
done
[ ! -e "$TMP/d/calibration.json" ] || fail "-o still wrote into the drafter directory"
"$BIN" calibrate -m "$MODEL" -d "$TMP/d" --prompts "$HELDOUT" --max-tokens 64 -t 2 --plot "$TMP/rel.png" >/dev/null 2>"$TMP/plot.err" ||
  fail "calibrate with the default output"
[ -s "$TMP/d/calibration.json" ] || fail "no calibration.json in the drafter directory"
ls "$TMP"/d/calibration.json.tmp.* >/dev/null 2>&1 && fail "a temporary file was left behind"
if command -v gnuplot >/dev/null; then
  [ -s "$TMP/rel.png" ] || fail "--plot drew nothing: $(cat "$TMP/plot.err")"
else
  grep -q "gnuplot" "$TMP/plot.err" || fail "--plot without gnuplot said nothing"
fi
# Calibrating again ignores the loaded calibration (measures the raw head): same temperatures.
"$BIN" calibrate -m "$MODEL" -d "$TMP/d" --prompts "$HELDOUT" --max-tokens 64 -t 2 -o "$TMP/again.json" >/dev/null 2>&1 ||
  fail "calibrate a calibrated drafter"
py "
import json
a=json.load(open('$TMP/d/calibration.json'));b=json.load(open('$TMP/again.json'))
assert a['temperatures']==b['temperatures'] and a['ece_before']==b['ece_before'], (a, b)" ||
  fail "recalibration depends on the loaded calibration"

# 3. generate loads calibration.json; greedy output stays the target's, with every schedule.
tokens() { "$BIN" generate -m "$MODEL" -p "$1" -n 48 -t 2 --json "${@:2}" 2>"$TMP/gen.err" | grep -o '"tokens":\[[^]]*\]'; }
for p in "Once upon a time" "The little dog"; do
  base=$(tokens "$p" --spec none)
  [ -n "$base" ] || fail "plain generate"
  [ "$(tokens "$p" -d "$TMP/d")" = "$base" ] || fail "calibrated drafter changed the greedy output ($p)"
  [ "$(tokens "$p" -d "$TMP/d" --conf-threshold 0.3)" = "$base" ] || fail "threshold schedule changed the output ($p)"
done

# 4. A broken calibration.json makes generate fail with one line naming it.
check_error() {
  local want=$1
  shift
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  if [ $rc -eq 0 ] || [ $rc -ge 128 ]; then fail "exit $rc for: $*"; return; fi
  grep -qi -- "$want" "$TMP/err" || fail "stderr lacks '$want' for: $* (got: $(cat "$TMP/err"))"
  [ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "more than one line for: $* ($(cat "$TMP/err"))"
}
cp "$TMP/d/calibration.json" "$TMP/good.json"
printf '{"method": "sts", "temperatures": [1.0, -2.0, 1.0]}\n' >"$TMP/d/calibration.json"
check_error "calibration.json" "$BIN" generate -m "$MODEL" -p "Once" -n 4 -d "$TMP/d"
printf '{"method": "sts", "temperatures": [1.0, 2.0' >"$TMP/d/calibration.json"
check_error "calibration.json" "$BIN" generate -m "$MODEL" -p "Once" -n 4 -d "$TMP/d"
printf '{"method": "sts", "temperatures": [1, 1, 1, 1, 1, 1, 1, 1]}\n' >"$TMP/d/calibration.json" # > block size
check_error "calibration.json" "$BIN" generate -m "$MODEL" -p "Once" -n 4 -d "$TMP/d"
cp "$TMP/good.json" "$TMP/d/calibration.json"

# 5. Refusals and bad arguments.
"$BIN" init-drafter -m "$MODEL" -o "$TMP/noconf" --no-confidence --seed 1 2>/dev/null || fail "init-drafter --no-confidence"
check_error "no confidence head" "$BIN" calibrate -m "$MODEL" -d "$TMP/noconf" --prompts "$HELDOUT"
check_error "prompts" "$BIN" calibrate -m "$MODEL" -d "$TMP/d"
check_error "drafter" "$BIN" calibrate -m "$MODEL" --prompts "$HELDOUT"
check_error "missing.txt" "$BIN" calibrate -m "$MODEL" -d "$TMP/d" --prompts "$TMP/missing.txt"
check_error "temp" "$BIN" calibrate -m "$MODEL" -d "$TMP/d" --prompts "$HELDOUT" --temp -1
check_error "nowhere" "$BIN" calibrate -m "$MODEL" -d "$TMP/d" --prompts "$HELDOUT" -o "$TMP/nowhere/x.json"

# 6. profile: a cost table with positive SPS (slower steps at bigger batches), the drafter's round
# cost, the default file name, and generate --schedule auto using it losslessly.
"$BIN" profile -m "$MODEL" -d "$TMP/d" -t 1 --bmax 16 --ctx 64 --repeats 3 -o "$TMP/costs.json" >"$TMP/prof.out" 2>"$TMP/prof.err" ||
  fail "profile: $(cat "$TMP/prof.err")"
grep -q "tokens/s" "$TMP/prof.out" || fail "profile printed no table"
[ "$(grep -cE '^ +[0-9]+ +[0-9.]+ +[0-9.]+' "$TMP/prof.out")" -eq 16 ] || fail "profile table lacks rows: $(cat "$TMP/prof.out")"
py "
import json
j=json.load(open('$TMP/costs.json'))
s=j['sps']
assert len(s)==16 and all(x>0 for x in s), s
assert s[0]>s[-1], 'SPS(1) %g <= SPS(16) %g'%(s[0],s[-1])
assert j['threads']==1 and 0<j['draft_round_s']<1 and j['draft_block']==7, j
print('SPS(1) %.0f, SPS(16) %.0f, draft %.3f ms'%(s[0],s[-1],j['draft_round_s']*1e3))" || fail "cost table"
(cd "$TMP" && "$BIN" profile -m "$MODEL" -t 1 --bmax 8 --repeats 2 --quick >/dev/null 2>&1) || fail "profile --quick"
[ -s "$TMP/stories260K.t1.costs.json" ] || fail "profile's default output name"
grep -q draft_round_s "$TMP/stories260K.t1.costs.json" && fail "draft_round_s without -d"
for p in "Once upon a time" "Max the dog"; do
  base=$(tokens "$p" --spec none)
  [ "$(tokens "$p" -d "$TMP/d" --schedule auto --costs "$TMP/costs.json")" = "$base" ] ||
    fail "--schedule auto --costs changed the greedy output ($p): $(cat "$TMP/gen.err")"
done
check_error "bmax" "$BIN" profile -m "$MODEL" --bmax 0
check_error "costs.json" "$BIN" profile -m "$MODEL" --bmax 2 --repeats 1 -o "$TMP/nowhere/costs.json"

if [ $fails -ne 0 ]; then
  echo "$fails check(s) failed"
  exit 1
fi
echo "calibrate and profile: all checks passed"
