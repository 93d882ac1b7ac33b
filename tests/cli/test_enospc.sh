#!/usr/bin/env bash
# A full disk: every writer (train's checkpoints and metrics.jsonl, quantize, inflate, init-drafter,
# datagen, calibrate's calibration.json, profile's cost table) on a small tmpfs filled to leave room
# for 0 blocks, one block (a header's worth), half the output and all but the last block of it:
# each fails (exit 1) with one line naming the file and "No space left on device", the previous
# version stays byte-identical, and no temporary file is left.
#
# Needs root (mount -t tmpfs). When the mount fails the test fails, unless DSPARK_SKIP_ENOSPC=1
# (then it says so and passes).
set -u
BIN=${DSPARK_BIN:?}/dspark
MODEL=${DSPARK_SHARED:?}/models/stories260K/stories260K.gguf
TMP=${DSPARK_TMP:-/tmp}/cli_enospc.$$
MNT=$TMP/mnt
mkdir -p "$MNT"
trap 'umount "$MNT" 2>/dev/null; rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

if ! mount -t tmpfs -o size=48m tmpfs "$MNT" 2>"$TMP/mount.err"; then
  if [ "${DSPARK_SKIP_ENOSPC:-0}" = 1 ]; then
    echo "note: cannot mount a tmpfs ($(cat "$TMP/mount.err")); skipped as DSPARK_SKIP_ENOSPC=1 asks"
    exit 0
  fi
  echo "FAIL: cannot mount a tmpfs at $MNT: $(cat "$TMP/mount.err") (the test needs root; DSPARK_SKIP_ENOSPC=1 skips it)"
  exit 1
fi
BS=$(stat -f -c %S "$MNT")
avail() { stat -f -c %a "$MNT"; }
# fill_leaving N: a filler file takes all free blocks but N.
fill_leaving() {
  rm -f "$MNT/fill"
  local n=$(($(avail) - $1))
  [ $n -le 0 ] || fallocate -l $((n * BS)) "$MNT/fill" || fail "fallocate $n blocks"
}
# blocks_of PATH: the blocks PATH (a file or a tree) takes on the tmpfs (measured by copying it there).
blocks_of() {
  rm -rf "${MNT:?}"/*
  local a=$(avail)
  cp -a "$1" "$MNT/probe"
  echo $((a - $(avail)))
  rm -rf "$MNT/probe"
}

# check NAME PREV OUT CMD...: PREV (on disk) is the previous version copied to OUT (on the tmpfs);
# CMD writes OUT again. At every fill level it fails as it should. The output's size is PREV's, or
# that of $NEED_OF when set (what CMD adds: train adds one checkpoint).
check() {
  local name=$1 prev=$2 out=$3
  shift 3
  local need
  need=$(blocks_of "${NEED_OF:-$prev}")
  local levels
  levels=$(printf '%s\n' 0 1 $((need / 2)) $((need - 1)) | awk -v n="$need" '$1 < n' | sort -nu)
  for left in $levels; do
    rm -rf "${MNT:?}"/*
    cp -a "$prev" "$out"
    fill_leaving "$left"
    "$@" >/dev/null 2>"$TMP/err"
    local rc=$?
    local what="$name, $left of $need blocks free"
    [ $rc -eq 1 ] || fail "$what: exit $rc: $(tail -2 "$TMP/err")"
    local last
    last=$(tail -1 "$TMP/err")
    case "$last" in
      "dspark: "*"$out"*"No space left on device"*) ;;
      *) fail "$what: the last line does not name the file and the full disk: $last" ;;
    esac
    [ "$(grep -c "No space left" "$TMP/err")" -eq 1 ] || fail "$what: not one line: $(cat "$TMP/err")"
    diff -r --no-dereference "$prev" "$out" >"$TMP/diff" 2>&1 || fail "$what: the previous version changed: $(head -3 "$TMP/diff")"
    local left_over
    left_over=$(find "$MNT" -name '*.tmp.*')
    [ -z "$left_over" ] || fail "$what: temporaries left: $left_over"
    echo "  $left free: $last"
  done
  echo "$name: $(echo $levels | wc -w) fill levels (output $need blocks of $BS bytes)"
}

P=$TMP/prompts.txt
printf 'Once upon a time\nThe little dog\nTom and Sue went\n' >"$P"
# Previous versions, written on the disk by the same commands.
"$BIN" init-drafter -m "$MODEL" -o "$TMP/d" --layers 2 --seed 4 2>/dev/null || fail "init-drafter"
"$BIN" quantize "$TMP/d" "$TMP/q" --bits 4 --group-size 64 >/dev/null 2>&1 || fail "quantize"
S=(--hidden 128 --ffn 256 --layers 6)
"$BIN" inflate -m "$MODEL" -d "$TMP/d" -o "$TMP/big" "${S[@]}" >/dev/null 2>&1 || fail "inflate"
"$BIN" datagen -m "$MODEL" --prompts "$P" -n 24 --max-tokens 48 --seed 1 -o "$TMP/data.bin" 2>/dev/null || fail "datagen"
"$BIN" calibrate -m "$MODEL" -d "$TMP/d" --prompts "$P" --max-tokens 16 -t 2 -o "$TMP/cal.json" >/dev/null 2>&1 ||
  fail "calibrate"
prof=(-m "$MODEL" -t 1 --bmax 4 --ctx 16 --repeats 1 --quick)
"$BIN" profile "${prof[@]}" -o "$TMP/costs.json" >/dev/null 2>&1 || fail "profile"
tr=(-m "$MODEL" --data "$TMP/data.bin" --layers 1 --block 4 --markov-rank 8 --anchors 8 --batch 2 --seed 5 -t 1
  --steps 10 --save-every 1)
"$BIN" train "${tr[@]}" --stop-after 1 -o "$TMP/run" 2>/dev/null || fail "train"
rm -rf "$TMP/run/init" # (resume does not read it; it would take room of the tmpfs only)

check init-drafter "$TMP/d" "$MNT/d" "$BIN" init-drafter -m "$MODEL" -o "$MNT/d" --layers 2 --seed 4
check quantize "$TMP/q" "$MNT/q" "$BIN" quantize "$TMP/d" "$MNT/q" --bits 4 --group-size 64
check inflate "$TMP/big" "$MNT/big" "$BIN" inflate -m "$MODEL" -d "$TMP/d" -o "$MNT/big" "${S[@]}"
check datagen "$TMP/data.bin" "$MNT/data.bin" "$BIN" datagen -m "$MODEL" --prompts "$P" -n 24 --max-tokens 48 --seed 1 \
  -o "$MNT/data.bin"
check calibrate "$TMP/cal.json" "$MNT/cal.json" "$BIN" calibrate -m "$MODEL" -d "$TMP/d" --prompts "$P" --max-tokens 16 \
  -t 2 -o "$MNT/cal.json"
check profile "$TMP/costs.json" "$MNT/costs.json" "$BIN" profile "${prof[@]}" -o "$MNT/costs.json"
# Training: the previous version is the run with its checkpoint of step 1 and metrics.jsonl; the
# resumed run fails rewriting metrics.jsonl, appending to it, or inside the checkpoint of step 2.
NEED_OF=$TMP/run/checkpoints/step-00000001 check "train (checkpoint, metrics.jsonl)" "$TMP/run" "$MNT/run" "$BIN" train "${tr[@]}" --stop-after 1 --resume -o "$MNT/run"

[ $fails -eq 0 ] && echo "cli enospc: all checks passed"
exit $((fails > 0))
