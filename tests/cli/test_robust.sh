#!/usr/bin/env bash
# Hostile input and faults at the command line (issue 12): outputs that are not regular files are
# refused in one line and left alone; temporaries of killed runs are cleaned by the next run.
set -u
BIN=${DSPARK_BIN:?}/dspark
MODEL=${DSPARK_SHARED:?}/models/stories260K/stories260K.gguf
TMP=${DSPARK_TMP:-/tmp}/cli_robust.$$
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# one_line FILE WANT: the command failed with exactly one line on stderr that contains WANT.
one_line() {
  [ "$(wc -l <"$1")" -eq 1 ] && grep -qF -- "$2" "$1" || fail "expected one line with '$2', got: $(cat "$1")"
}
dead_pid() { bash -c 'echo $$'; } # a process that has exited

# 1. -o naming a FIFO, a device, a directory or a link to a device: one line, exit 1, nothing replaced.
mkfifo "$TMP/fifo"
ln -s /dev/null "$TMP/to_null"
mkdir "$TMP/adir"
for spec in "fifo:is a FIFO, not a regular file" "adir:is a directory, not a regular file" \
  "to_null:is a symbolic link to a character device"; do
  out=$TMP/${spec%%:*}
  timeout 20 "$BIN" datagen -m "$MODEL" --unconditional -n 2 --max-tokens 4 -o "$out" 2>"$TMP/err"
  rc=$?
  [ $rc -eq 1 ] || fail "datagen -o ${spec%%:*}: exit $rc"
  one_line "$TMP/err" "${spec#*:}"
done
[ -p "$TMP/fifo" ] || fail "the FIFO was replaced"
[ -L "$TMP/to_null" ] || fail "the link to /dev/null was replaced"
timeout 20 "$BIN" datagen -m "$MODEL" --unconditional -n 2 --max-tokens 4 -o /dev/null 2>"$TMP/err"
[ $? -eq 1 ] || fail "datagen -o /dev/null did not fail"
one_line "$TMP/err" "/dev/null: is a character device, not a regular file"
[ -c /dev/null ] || fail "/dev/null is no longer a device"
# calibrate/profile check their -o before the work (cli_check_writable).
timeout 20 "$BIN" profile -m "$MODEL" -o "$TMP/fifo" 2>"$TMP/err"
[ $? -ne 0 ] || fail "profile -o FIFO succeeded"
one_line "$TMP/err" "is a FIFO, not a regular file"
# A link to a regular file is written through: the link stays, its target gets the data.
: >"$TMP/real.dat"
ln -s real.dat "$TMP/link.dat"
"$BIN" datagen -m "$MODEL" --unconditional -n 2 --max-tokens 4 -o "$TMP/link.dat" 2>"$TMP/err" ||
  fail "datagen through a symlink: $(cat "$TMP/err")"
[ -L "$TMP/link.dat" ] && [ -s "$TMP/real.dat" ] || fail "the symlink was not written through"

# 11. A datagen killed with -9 leaves OUT.tmp.PID; the next run to the same OUT removes it. The
# same for a directory writer's OUT.tmp.PID (init-drafter; quantize shares the code).
"$BIN" datagen -m "$MODEL" --unconditional -n 100000 --max-tokens 200 -o "$TMP/k.dat" 2>/dev/null &
pid=$!
for _ in $(seq 100); do [ -e "$TMP/k.dat.tmp.$pid" ] && break; sleep 0.1; done
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
[ -e "$TMP/k.dat.tmp.$pid" ] || fail "no temporary file seen from the killed datagen"
"$BIN" datagen -m "$MODEL" --unconditional -n 2 --max-tokens 4 -o "$TMP/k.dat" 2>/dev/null || fail "datagen after a kill"
[ -e "$TMP/k.dat.tmp.$pid" ] && fail "the killed run's temporary file was not removed"
dp=$(dead_pid)
mkdir "$TMP/drafter.tmp.$dp" && echo '{}' >"$TMP/drafter.tmp.$dp/config.json"
"$BIN" init-drafter -m "$MODEL" -o "$TMP/drafter" --layers 1 2>"$TMP/err" || fail "init-drafter: $(cat "$TMP/err")"
[ -e "$TMP/drafter.tmp.$dp" ] && fail "the stale OUT.tmp.PID directory was not removed"
ls "$TMP" | grep -q '\.tmp\.' && fail "temporaries left: $(ls "$TMP" | grep '\.tmp\.')"

# 9. Misleading messages: an unknown last option is unknown (not "needs a value"); a known one
# without its value says so; --plot into a missing folder fails before training, naming the folder.
for cmd in generate train datagen eval calibrate profile serve chat init-drafter; do
  "$BIN" $cmd --no-such-option 2>"$TMP/err"
  [ $? -eq 2 ] || fail "$cmd --no-such-option: exit status"
  one_line "$TMP/err" "unknown option '--no-such-option' (see dspark $cmd --help)"
done
"$BIN" generate -p x -t 2>"$TMP/err"
one_line "$TMP/err" "option -t needs a value"
"$BIN" quantize a b --bits 2>"$TMP/err"
one_line "$TMP/err" "option --bits needs a value"
"$BIN" train -m "$MODEL" --data "$TMP/k.dat" -o "$TMP/run" --steps 1 --plot "$TMP/missing/loss.png" 2>"$TMP/err"
[ $? -eq 1 ] || fail "train --plot into a missing folder: exit status"
one_line "$TMP/err" "$TMP/missing"
grep -q gnuplot "$TMP/err" && fail "a missing --plot folder is blamed on gnuplot"
[ -e "$TMP/run" ] && fail "train ran although --plot cannot be written"

[ $fails -eq 0 ] && echo "all robustness CLI checks passed"
exit $((fails > 0))
