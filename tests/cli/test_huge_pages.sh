#!/usr/bin/env bash
# Weights in huge pages (ds_mapfile_populate_huge, docs/architecture.md "Weights in huge pages"): a
# target whose file sits in the page cache in small pages, as a file just written or downloaded often
# does, is read again at load into huge ones, and a decode step then streams it ~1.4x faster
# (docs/results.md). Checked with an independent reader of the page cache (tests/reference/
# page_cache.py): on a 54 MB inflated f32 target left in small pages, `generate --stats` reports the
# re-read and at least half of the weights huge, the file's pages are huge for any later mapping, a
# second load finds them so and reads nothing again, and the greedy text is stories260K's every time.
# Skipped, with the reason, where this kernel or file system does not cache files in huge pages.
set -u
BIN=${DSPARK_BIN:?}/dspark
MODEL=${DSPARK_SHARED:?}/models/stories260K/stories260K.gguf
SRC=${DSPARK_SRC:?}
PC="/usr/bin/python3 $SRC/tests/reference/page_cache.py"
TMP=$(cd "${DSPARK_TMP:-/tmp}" && pwd)/cli_huge_pages.$$
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
export OMP_WAIT_POLICY=passive
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

if ! share=$($PC probe "$TMP"); then
  echo "SKIP: this kernel / file system does not cache a file in huge pages (a fresh file read through an advised mapping: $share huge)"
  exit 0
fi

"$BIN" init-drafter -m "$MODEL" -o "$TMP/d" --layers 1 --seed 4 2>/dev/null || fail "init-drafter"
"$BIN" inflate -m "$MODEL" -d "$TMP/d" -o "$TMP/big" --hidden 512 --ffn 1376 --layers 6 --dtype f32 >/dev/null 2>&1 ||
  fail "inflate"
W="$TMP/big/target/model.safetensors"
$PC small "$W"
before=$($PC share "$W")
if ! awk -v x="$before" 'BEGIN { exit !(x < 0.5) }'; then
  echo "SKIP: the file's pages stayed huge after being dropped and read 4 KiB at a time ($before)"
  exit 0
fi

want=$("$BIN" generate -m "$MODEL" -p "Once upon a time" -n 24 --temp 0 -t 1 2>/dev/null)
# run N EXPECT_REREAD: one generate; its text and its weights line checked.
run() {
  local out
  out=$("$BIN" generate -m "$TMP/big/target" -p "Once upon a time" -n 24 --temp 0 -t 1 --stats 2>"$TMP/err$1")
  [ "$out" = "$want" ] || fail "run $1: text '$out' differs from stories260K's '$want'"
  local line pct
  line=$(grep "dspark: weights:" "$TMP/err$1")
  pct=$(echo "$line" | sed -n 's/.*resident, \([0-9]*\)% in huge pages.*/\1/p')
  [ -n "$pct" ] && [ "$pct" -ge 50 ] || fail "run $1: '$line': under half the weights in huge pages"
  if [ "$2" = 1 ]; then
    echo "$line" | grep -q "read again into huge pages" || fail "run $1: '$line': the small pages were not read again"
  else
    echo "$line" | grep -q "read again" && fail "run $1: '$line': read again though the pages were huge already"
  fi
  return 0
}
run 1 1
after=$($PC share "$W")
awk -v x="$after" 'BEGIN { exit !(x >= 0.5) }' || fail "after the load, a plain mapping of the file maps $after of it huge"
run 2 0
echo "page cache huge share: $before before the load, $after after"
[ "$fails" = 0 ] && echo "test_huge_pages: all passed"
exit $((fails > 0))
