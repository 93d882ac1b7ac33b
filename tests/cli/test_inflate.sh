#!/usr/bin/env bash
# dspark inflate end to end: refusals with one-line messages (bad arguments, a drafter made for
# another target, a target that is not a llama GGUF, an existing output), nothing left behind, and
# a small inflation whose greedy text equals stories260K's. The construction and the numerics are
# checked in tests/reference/test_inflate.py.
set -u
BIN=${DSPARK_BIN:?}/dspark
MODEL=${DSPARK_SHARED:?}/models/stories260K/stories260K.gguf
SRC=${DSPARK_SRC:?}
TMP=$(cd "${DSPARK_TMP:-/tmp}" && pwd)/cli_inflate.$$
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
export OMP_WAIT_POLICY=passive
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# refuse NAME STATUS PATTERN OUT ARGS...: exit STATUS with exactly one line on stderr matching
# PATTERN, leaving neither OUT nor a temporary directory next to it.
refuse() {
  local name=$1 want=$2 pat=$3 out=$4
  shift 4
  "$BIN" inflate "$@" >"$TMP/r.out" 2>"$TMP/r.err"
  local rc=$?
  [ "$rc" = "$want" ] || fail "$name: exit status $rc, expected $want"
  grep -q -- "$pat" "$TMP/r.err" || fail "$name: message '$(tail -1 "$TMP/r.err")' lacks '$pat'"
  [ "$(wc -l <"$TMP/r.err")" = 1 ] || fail "$name: $(wc -l <"$TMP/r.err") lines on stderr, expected one"
  [ ! -e "$out" ] || fail "$name: $out was written"
  ls -d "$out".tmp.* >/dev/null 2>&1 && fail "$name: a temporary directory was left behind"
  return 0
}

"$BIN" init-drafter -m "$MODEL" -o "$TMP/d" --layers 1 --seed 4 2>/dev/null || fail "init-drafter"
/usr/bin/python3 "$SRC/tests/reference/make_hf_llama.py" "$TMP/other" --dim 128 --layers 2 --heads 4 --kv-heads 2 \
  --ffn 192 --vocab 512 >/dev/null 2>&1 || fail "make_hf_llama"
"$BIN" init-drafter -m "$TMP/other" -o "$TMP/d_other" --layers 1 --seed 4 2>/dev/null || fail "init-drafter (other)"

S=(--hidden 128 --ffn 256 --layers 6)
refuse "no drafter" 2 "needs -d DRAFTER and -o OUT" "$TMP/o" -m "$MODEL" -o "$TMP/o"
refuse "no output" 2 "needs -d DRAFTER and -o OUT" "$TMP/o" -m "$MODEL" -d "$TMP/d"
refuse "bad dtype" 2 "expects bf16 or f32" "$TMP/o" -m "$MODEL" -d "$TMP/d" -o "$TMP/o" --dtype f16
refuse "bad number" 2 "expects a positive integer" "$TMP/o" -m "$MODEL" -d "$TMP/d" -o "$TMP/o" --hidden 2k
refuse "unknown option" 2 "unknown option '--heads'" "$TMP/o" -m "$MODEL" -d "$TMP/d" -o "$TMP/o" --heads 8
refuse "hidden too small" 1 "hidden size 32 must be in 64..65536" "$TMP/o" -m "$MODEL" -d "$TMP/d" -o "$TMP/o" --hidden 32
refuse "fewer layers" 1 "3 layers must be in 5..4096" "$TMP/o" -m "$MODEL" -d "$TMP/d" -o "$TMP/o" --layers 3
refuse "ffn too small" 1 "FFN size 100 must be at least 172" "$TMP/o" -m "$MODEL" -d "$TMP/d" -o "$TMP/o" --ffn 100
refuse "drafter of another target" 1 "drafter hidden_size 128 does not match the target's hidden size 64" "$TMP/o" \
  -m "$MODEL" -d "$TMP/d_other" -o "$TMP/o" "${S[@]}"
refuse "no such drafter" 1 "$TMP/none/config.json" "$TMP/o" -m "$MODEL" -d "$TMP/none" -o "$TMP/o" "${S[@]}"
refuse "HF target" 1 "only llama GGUF targets" "$TMP/o" -m "$TMP/other" -d "$TMP/d_other" -o "$TMP/o" "${S[@]}"
mkdir -p "$TMP/exists"
"$BIN" inflate -m "$MODEL" -d "$TMP/d" -o "$TMP/exists" "${S[@]}" 2>"$TMP/r.err" && fail "existing output: accepted"
grep -q "already exists" "$TMP/r.err" || fail "existing output: message '$(tail -1 "$TMP/r.err")'"

# A small inflation: the JSON summary, both directories, greedy text equal to stories260K's.
if "$BIN" inflate -m "$MODEL" -d "$TMP/d" -o "$TMP/big" "${S[@]}" --dtype f32 >"$TMP/inf.json" 2>"$TMP/inf.err"; then
  grep -q '"layer_map": \[0, 1, 2, 3, 4\]' "$TMP/inf.json" || fail "summary: $(cat "$TMP/inf.json")"
  [ -f "$TMP/big/target/tokenizer.gguf" ] && [ -f "$TMP/big/drafter/config.json" ] || fail "missing output files"
  ls -d "$TMP"/big.tmp.* >/dev/null 2>&1 && fail "a temporary directory was left behind"
  grep -q "done in" "$TMP/inf.err" || fail "no progress on stderr"
  want=$("$BIN" generate -m "$MODEL" -p "Once upon a time" -n 48 --temp 0 -t 1 2>/dev/null)
  got=$("$BIN" generate -m "$TMP/big/target" -p "Once upon a time" -n 48 --temp 0 -t 1 2>/dev/null)
  spec=$("$BIN" generate -m "$TMP/big/target" -d "$TMP/big/drafter" -p "Once upon a time" -n 48 --temp 0 -t 1 2>/dev/null)
  [ "$got" = "$want" ] || fail "inflated greedy text differs: '$got' vs '$want'"
  [ "$spec" = "$want" ] || fail "speculative greedy text differs: '$spec' vs '$want'"
else
  fail "inflate: $(tail -1 "$TMP/inf.err")"
fi

[ "$fails" = 0 ] && echo "test_inflate: all passed"
exit $((fails > 0))
