#!/usr/bin/env bash
# dspark train on stories260K data: the loss falls, a resumed run continues bit-identically, two MPI
# ranks follow the one-process loss curve, the DFlash baseline trains, held-out evaluation records
# what dspark eval reports, a checkpoint killed mid-save resumes exactly, --plot spawns no shell, and
# bad input fails cleanly.
set -u
BIN=${DSPARK_BIN:?}/dspark
MODEL=${DSPARK_SHARED:?}/models/stories260K/stories260K.gguf
TMP=${DSPARK_TMP:-/tmp}/cli_train.$$
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
py() { /usr/bin/python3 -c "$@"; }

printf 'Once upon a time\nThe little dog\nTom and Sue went\nOne day, a bird\n' >"$TMP/prompts.txt"
"$BIN" datagen -m "$MODEL" --prompts "$TMP/prompts.txt" -n 48 --max-tokens 96 --seed 1 -o "$TMP/data.bin" 2>/dev/null ||
  fail "datagen"
common=(-m "$MODEL" --data "$TMP/data.bin" --layers 2 --block 5 --markov-rank 16 --anchors 24 --batch 4 --seed 3 -t 2)

# 1. The loss falls: mean of the last 5 steps well below the mean of the first 5.
"$BIN" train "${common[@]}" --steps 40 --lr 3e-3 -o "$TMP/a" 2>/dev/null || fail "train"
py "
import json,sys
l=[json.loads(x)['loss'] for x in open('$TMP/a/metrics.jsonl')]
assert len(l)==40, len(l)
first,last=sum(l[:5])/5,sum(l[-5:])/5
print('loss %.4f -> %.4f'%(first,last))
sys.exit(0 if last < 0.85*first else 1)" || fail "loss did not fall"
for k in step loss ce l1 conf ptau; do
  head -1 "$TMP/a/metrics.jsonl" | grep -q "\"$k\":" || fail "metrics.jsonl lacks $k"
done
# The checkpoint is a DeepSpec drafter that generates losslessly.
g0=$("$BIN" generate -m "$MODEL" -p "Once upon a time" -n 32 --json 2>/dev/null | grep -o '"tokens":\[[^]]*\]')
g1=$("$BIN" generate -m "$MODEL" -p "Once upon a time" -n 32 -d "$TMP/a" --json 2>/dev/null | grep -o '"tokens":\[[^]]*\]')
[ -n "$g0" ] && [ "$g0" = "$g1" ] || fail "trained drafter changed the greedy output"

# 2. Resume: 12 steps straight == 5 steps, stop, resume to 12 (model, optimizer, metrics).
"$BIN" train "${common[@]}" --steps 12 -o "$TMP/r1" 2>/dev/null || fail "train r1"
"$BIN" train "${common[@]}" --steps 12 -o "$TMP/r2" --stop-after 5 2>/dev/null || fail "train r2 part 1"
grep -q '"step":	5' "$TMP/r2/trainer_state.json" || fail "stop-after did not checkpoint step 5"
"$BIN" train "${common[@]}" --steps 12 -o "$TMP/r2" --resume 2>/dev/null || fail "train r2 resume"
cmp -s "$TMP/r1/model.safetensors" "$TMP/r2/model.safetensors" || fail "resumed weights differ"
cmp -s "$TMP/r1/optimizer.safetensors" "$TMP/r2/optimizer.safetensors" || fail "resumed optimizer state differs"
cmp -s "$TMP/r1/metrics.jsonl" "$TMP/r2/metrics.jsonl" || fail "resumed metrics differ"

# 3. Two MPI ranks on the same global batch follow the same loss curve.
if command -v mpirun >/dev/null; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  one=(-m "$MODEL" --data "$TMP/data.bin" --layers 2 --block 5 --markov-rank 16 --anchors 24 --batch 4 --seed 3 -t 1 --steps 6)
  "$BIN" train "${one[@]}" -o "$TMP/p1" 2>/dev/null || fail "single-process run"
  # (OpenMPI's runtime keeps allocations until exit: under ASan only its leak report is silenced.)
  ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0 mpirun -np 2 "$BIN" train "${one[@]}" -o "$TMP/p2" >/dev/null 2>&1 ||
    fail "mpirun -np 2"
  py "
import json,sys
a=[json.loads(x)['loss'] for x in open('$TMP/p1/metrics.jsonl')]
b=[json.loads(x)['loss'] for x in open('$TMP/p2/metrics.jsonl')]
ok=len(a)==len(b)==6 and all(abs(x-y)<=1e-4*max(1,abs(x)) for x,y in zip(a,b))
print('1 rank', a); print('2 ranks', b); sys.exit(0 if ok else 1)" || fail "2-rank loss curve differs"
else
  echo "note: mpirun not installed; the MPI check was skipped"
fi

# 4. The DFlash baseline (no Markov head, CE only) trains with the same machinery.
"$BIN" train -m "$MODEL" --data "$TMP/data.bin" --layers 2 --block 5 --markov-rank 0 --ce 1 --l1 0 --conf 0 \
  --anchors 24 --batch 4 --steps 5 -o "$TMP/dflash" 2>/dev/null || fail "DFlash baseline"
grep -q '"markov_rank":	0' "$TMP/dflash/config.json" || fail "DFlash config lacks markov_rank 0"

# 5. Held-out evaluation inside training: the tau recorded at a step is what `dspark eval` reports for
# the drafter saved at that step (same prompts, T and seed), --keep-best keeps the argmax.
printf 'Once upon a time, there was\nThe big cat\nLily wanted to\n' >"$TMP/heldout.txt"
ev=(--eval-prompts "$TMP/heldout.txt" --eval-temp 0,1 --eval-max-tokens 40)
"$BIN" train "${common[@]}" --steps 16 --lr 3e-3 "${ev[@]}" --eval-every 4 --keep-best -o "$TMP/e" 2>"$TMP/e.err" ||
  fail "train with --eval-prompts"
grep -q "held-out" "$TMP/e.err" || fail "no held-out line in the progress output"
evtau() { # drafter temp -> tau reported by dspark eval
  "$BIN" eval -m "$MODEL" -d "$1" --prompts "$TMP/heldout.txt" --temp "$2" --max-tokens 40 -t 2 --json 2>/dev/null |
    py "import json,sys; print(json.load(sys.stdin)['tau'])"
}
final0=$(evtau "$TMP/e" 0) final1=$(evtau "$TMP/e" 1) best0=$(evtau "$TMP/e/best" 0) best1=$(evtau "$TMP/e/best" 1)
py "
import json,sys
rows=[json.loads(x) for x in open('$TMP/e/metrics.jsonl')]
ev=[r for r in rows if 'heldout' in r]
assert [r['step'] for r in ev]==[4,8,12,16], [r['step'] for r in ev]
for r in ev:
    assert [h['temp'] for h in r['heldout']]==[0,1] and all(len(h['accept'])>=1 for h in r['heldout']), r
t0=[r['heldout'][0]['tau'] for r in ev]
b=max(range(len(ev)), key=lambda i: (t0[i], -i))   # the first argmax
hj=json.load(open('$TMP/e/best/heldout.json'))
ok=hj['step']==ev[b]['step']
ok&=abs(ev[-1]['heldout'][0]['tau']-$final0)<1e-4 and abs(ev[-1]['heldout'][1]['tau']-$final1)<1e-4
ok&=abs(ev[b]['heldout'][0]['tau']-$best0)<1e-4 and abs(ev[b]['heldout'][1]['tau']-$best1)<1e-4
print('held-out T=0', t0, 'best step', hj['step'], 'eval final', $final0, $final1, 'best', $best0, $best1)
sys.exit(0 if ok else 1)" || fail "held-out tau in metrics.jsonl differs from dspark eval on the saved drafters"
# A lower lr cannot move tau: --patience 1 stops at the second evaluation, its checkpoint saved.
"$BIN" train "${common[@]}" --steps 40 --lr 1e-9 "${ev[@]}" --eval-every 2 --patience 1 -o "$TMP/pat" 2>"$TMP/pat.err" ||
  fail "train --patience"
grep -q "stopped early at step 4" "$TMP/pat.err" || fail "--patience did not stop at step 4: $(cat "$TMP/pat.err")"
grep -q '"step":	4' "$TMP/pat/trainer_state.json" || fail "--patience did not checkpoint its step"

# 6. A checkpoint killed between its files: the next --resume continues exactly. (Before the
# checkpoint was one directory, a kill after model.safetensors left the new weights with the old
# optimizer state and step.) ulimit -f lets model.safetensors through and kills the process
# (SIGXFSZ) inside optimizer.safetensors, at the first save after step 5.
k=(-m "$MODEL" --data "$TMP/data.bin" --layers 2 --block 5 --markov-rank 64 --anchors 24 --batch 4 --seed 3 -t 2 --steps 12 --save-every 4)
"$BIN" train "${k[@]}" -o "$TMP/k1" 2>/dev/null || fail "train k1"
"$BIN" train "${k[@]}" -o "$TMP/k2" --stop-after 5 2>/dev/null || fail "train k2 part 1"
ms=$(stat -L -c %s "$TMP/k1/model.safetensors") os=$(stat -L -c %s "$TMP/k1/optimizer.safetensors")
if [ "$os" -gt $((ms + 8192)) ]; then
  { (ulimit -f $(((ms + os) / 2 / 1024)); exec "$BIN" train "${k[@]}" -o "$TMP/k2" --resume) >/dev/null 2>&1; } 2>/dev/null
  [ $? -ge 128 ] || fail "the size limit did not kill the run inside a checkpoint"
  grep -q '"step":	5' "$TMP/k2/trainer_state.json" || fail "a killed save changed the checkpoint"
  "$BIN" train "${k[@]}" -o "$TMP/k2" --resume 2>"$TMP/k2.err" || fail "resume after a killed save: $(cat "$TMP/k2.err")"
  cmp -s "$TMP/k1/model.safetensors" "$TMP/k2/model.safetensors" || fail "weights after a killed save differ"
  cmp -s "$TMP/k1/optimizer.safetensors" "$TMP/k2/optimizer.safetensors" || fail "optimizer after a killed save differs"
  cmp -s "$TMP/k1/metrics.jsonl" "$TMP/k2/metrics.jsonl" || fail "metrics after a killed save differ"
  ls -d "$TMP"/k2/checkpoint.tmp.* "$TMP"/k2/checkpoints/*.tmp.* >/dev/null 2>&1 &&
    fail "the killed save's temporary directory was not cleaned"
  [ "$(ls "$TMP/k2/checkpoints")" = "$(printf 'step-00000008\nstep-00000012')" ] ||
    fail "checkpoints kept (default --keep 2): $(ls "$TMP/k2/checkpoints")"
else
  fail "the kill check needs optimizer.safetensors ($os) larger than model.safetensors ($ms)"
fi

# 7. --plot runs gnuplot without a shell: a path with quotes, spaces and $(...) is a path.
if command -v gnuplot >/dev/null; then
  png="$TMP/it's a \$(touch pwned) plot.png"
  (cd "$TMP" && "$BIN" train "${common[@]}" --steps 4 "${ev[@]}" --eval-every 2 -o "$TMP/pl" --plot "$png" 2>"$TMP/pl.err") ||
    fail "train --plot"
  [ -s "$png" ] || fail "--plot wrote nothing: $(cat "$TMP/pl.err")"
  [ -e "$TMP/pwned" ] && fail "--plot ran a shell command from its path"
else
  echo "note: gnuplot not installed; the --plot check was skipped"
fi

# 8. Bad input: one line, exit 1 or 2, nothing crashes.
check_error() {
  local want=$1
  shift
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  if [ $rc -eq 0 ] || [ $rc -ge 128 ]; then fail "exit $rc for: $*"; return; fi
  grep -qi -- "$want" "$TMP/err" || fail "stderr lacks '$want' for: $* (got: $(cat "$TMP/err"))"
}
check_error "already holds" "$BIN" train "${common[@]}" --steps 12 -o "$TMP/r1"
check_error "resume" "$BIN" train "${common[@]}" --steps 99 -o "$TMP/r1" --resume
check_error "data.missing" "$BIN" train "${common[@]}" --steps 2 -o "$TMP/x" --data "$TMP/data.missing"
head -c 100 "$TMP/data.bin" >"$TMP/cut.bin"
check_error "cut.bin" "$BIN" train "${common[@]}" --steps 2 -o "$TMP/y" --data "$TMP/cut.bin"
check_error "--data" "$BIN" train -m "$MODEL" -o "$TMP/z"
check_error "eval-prompts" "$BIN" train "${common[@]}" --steps 2 -o "$TMP/w" --keep-best
printf 'ok\n\xff\xfe\n' >"$TMP/bad.txt"
check_error "bad.txt:2" "$BIN" train "${common[@]}" --steps 2 -o "$TMP/w2" --eval-prompts "$TMP/bad.txt"
check_error "eval-temp" "$BIN" train "${common[@]}" --steps 2 -o "$TMP/w3" --eval-prompts "$TMP/heldout.txt" --eval-temp 0,,1

[ $fails -eq 0 ] && echo "cli train: all checks passed"
exit $((fails > 0))
