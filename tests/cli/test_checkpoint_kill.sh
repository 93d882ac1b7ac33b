#!/usr/bin/env bash
# A training checkpoint is one unit: a run on stories260K data checkpointing every step is killed
# (SIGKILL) at 30 points spread over the checkpoint write, each time resumed; the final weights,
# optimizer state, trainer state and metrics are bit-identical to an uninterrupted run, nothing
# temporary is left, and --keep bounds what stays.
#
# The kills come from the test points compiled into the writers (src/base/testpoint.h):
# DSPARK_TEST_KILL_AT_POINT=N raises SIGKILL at the N-th point a process reaches: after the
# temporary directory is made, halfway through each safetensors file, before each file's rename,
# after each file, after the fsyncs, after the directory's rename, after OUT/checkpoint switches,
# during pruning. Each resumed run counts from 1, so N = 2..31 lands on every point of the first
# and second save after a resume. Five more kills come from outside at whatever moment a sleep
# ends, with every point slowed (DSPARK_TEST_POINT_DELAY_US), so they land inside a save too.
set -u
BIN=${DSPARK_BIN:?}/dspark
MODEL=${DSPARK_SHARED:?}/models/stories260K/stories260K.gguf
TMP=${DSPARK_TMP:-/tmp}/cli_ckpt_kill.$$
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

printf 'Once upon a time\nThe little dog\nTom and Sue went\n' >"$TMP/prompts.txt"
"$BIN" datagen -m "$MODEL" --prompts "$TMP/prompts.txt" -n 12 --max-tokens 48 --seed 1 -o "$TMP/data.bin" 2>/dev/null ||
  fail "datagen"
# Enough steps that the five outside kills (each after at most 0.4 s, ~6 steps on an idle machine)
# can never finish the run: the last resume must still have work, and every outside run is killed.
STEPS=72
tr=(-m "$MODEL" --data "$TMP/data.bin" --layers 1 --block 4 --markov-rank 8 --anchors 8 --batch 2 --seed 5 -t 1
  --steps $STEPS --save-every 1 --keep 2)
"$BIN" train "${tr[@]}" -o "$TMP/ref" 2>/dev/null || fail "the uninterrupted run"

# A kill inside the very first save leaves no complete checkpoint: --resume says so, a fresh start
# (the leftover is no run) works.
{ DSPARK_TEST_KILL_AT_POINT=4 "$BIN" train "${tr[@]}" -o "$TMP/k" >/dev/null 2>&1; } 2>/dev/null
[ $? -eq 137 ] || fail "the first kill did not happen"
"$BIN" train "${tr[@]}" --resume -o "$TMP/k" 2>"$TMP/err" && fail "resumed a run without a complete checkpoint"
grep -q "nothing to resume" "$TMP/err" || fail "resume without a checkpoint: $(cat "$TMP/err")"
"$BIN" train "${tr[@]}" --stop-after 1 -o "$TMP/k" 2>"$TMP/err" || fail "fresh start after a killed first save: $(cat "$TMP/err")"

kills=0
resume() { # resume once, killed at point $1 (or from outside when $1 is "outside")
  local rc
  if [ "$1" = outside ]; then
    DSPARK_TEST_POINT_DELAY_US=3000 "$BIN" train "${tr[@]}" --resume -o "$TMP/k" >/dev/null 2>"$TMP/err" &
    local pid=$!
    sleep 0.$((RANDOM % 4 + 1))
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
    rc=$?
  else
    { DSPARK_TEST_KILL_AT_POINT=$1 "$BIN" train "${tr[@]}" --resume -o "$TMP/k" >/dev/null 2>"$TMP/err"; } 2>/dev/null
    rc=$?
  fi
  [ $rc -eq 137 ] && kills=$((kills + 1))
  [ $rc -eq 0 ] || [ $rc -eq 137 ] || fail "resume (kill at $1) exited $rc: $(cat "$TMP/err")"
  # Whatever the kill left: the current checkpoint is complete and consistent (its step in the
  # state, the optimizer and the directory name agree), which --resume checks when it loads it.
  # (A kill from outside may come before the message: the next resume checks that one.)
  [ "$1" = outside ] || grep -q "^dspark: resuming from $TMP/k/checkpoints/step-" "$TMP/err" ||
    fail "resume (kill at $1) did not say which checkpoint: $(cat "$TMP/err")"
}
for n in $(seq 2 31); do resume "$n"; done
for i in 1 2 3 4 5; do resume outside; done
[ $kills -ge 30 ] || fail "only $kills of the runs were killed"
step=$(/usr/bin/python3 -c "import json; print(json.load(open('$TMP/k/trainer_state.json'))['step'])")
[ "$step" -lt $STEPS ] || fail "the kills left no work for the last resume (step $step)"
"$BIN" train "${tr[@]}" --resume -o "$TMP/k" 2>"$TMP/err" || fail "the last resume: $(cat "$TMP/err")"
for f in model.safetensors optimizer.safetensors trainer_state.json config.json metrics.jsonl; do
  cmp -s "$TMP/ref/$f" "$TMP/k/$f" || fail "$f after $kills kills differs from the uninterrupted run"
done
left=$(find "$TMP/k" -name '*.tmp.*')
[ -z "$left" ] || fail "temporaries left: $left"
[ "$(ls "$TMP/k/checkpoints")" = "$(printf 'step-%08d\nstep-%08d' $((STEPS - 1)) $STEPS)" ] ||
  fail "--keep 2 kept: $(ls "$TMP/k/checkpoints")"
[ "$(readlink "$TMP/k/checkpoint")" = "checkpoints/step-$(printf %08d $STEPS)" ] ||
  fail "OUT/checkpoint is $(readlink "$TMP/k/checkpoint")"
# The drafter of the run generates what the target alone does (it is a drafter directory).
g0=$("$BIN" generate -m "$MODEL" -p "Once upon a time" -n 16 --json 2>/dev/null | grep -o '"tokens":\[[^]]*\]')
g1=$("$BIN" generate -m "$MODEL" -p "Once upon a time" -n 16 -d "$TMP/k" --json 2>/dev/null | grep -o '"tokens":\[[^]]*\]')
[ -n "$g0" ] && [ "$g0" = "$g1" ] || fail "the resumed drafter changed the greedy output"

# A newer checkpoint directory that is not complete (no marker) is passed over, with a note.
cp -a "$TMP/k/checkpoints/step-$(printf %08d $STEPS)" "$TMP/k/checkpoints/step-00000099"
rm "$TMP/k/checkpoints/step-00000099/.dspark-output"
"$BIN" train "${tr[@]}" --resume -o "$TMP/k" 2>"$TMP/err" || fail "resume past an incomplete checkpoint"
grep -q "resuming from $TMP/k/checkpoints/step-$(printf %08d $STEPS) (step $STEPS) (newer incomplete" "$TMP/err" ||
  fail "the incomplete checkpoint was not passed over: $(cat "$TMP/err")"

echo "kills: $kills"
[ $fails -eq 0 ] && echo "cli checkpoint kill: all checks passed"
exit $((fails > 0))
