#!/usr/bin/env bash
# dspark generate: the known stories260K continuation, determinism of sampling, the JSON fields,
# and a clear one-line error (no crash) for every kind of bad input.
set -u
BIN=${DSPARK_BIN:?}/dspark
MODEL=${DSPARK_SHARED:?}/models/stories260K/stories260K.gguf
TMP=${DSPARK_TMP:-/tmp}/cli_generate.$$
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# 1. The known greedy continuation (README of the model), streamed to stdout.
expected=$(sed -n '/^```$/,/^```$/p' "$DSPARK_SHARED/models/stories260K/README.md" | sed '1d;$d')
got="Once upon a time$("$BIN" generate -m "$MODEL" -p "Once upon a time" -n 64 --temp 0 2>/dev/null)"
[ "$got" = "$expected" ] || fail "greedy continuation differs:
--- expected
$expected
--- got
$got"

# 2. Same seed, same text, whatever the thread count; another seed, another text.
a=$("$BIN" generate -m "$MODEL" -p "The cat" -n 48 --temp 1 --top-k 40 --top-p 0.9 --seed 7 -t 1 2>/dev/null)
b=$("$BIN" generate -m "$MODEL" -p "The cat" -n 48 --temp 1 --top-k 40 --top-p 0.9 --seed 7 -t 2 2>/dev/null)
c=$("$BIN" generate -m "$MODEL" -p "The cat" -n 48 --temp 1 --top-k 40 --top-p 0.9 --seed 8 -t 1 2>/dev/null)
[ "$a" = "$b" ] || fail "sampling with the same seed differs between 1 and 2 threads"
[ "$a" != "$c" ] || fail "seeds 7 and 8 gave the same sampled text"

# 3. --json carries every field, and its text equals the streamed text.
json=$("$BIN" generate -m "$MODEL" -p "Once upon a time" -n 16 --temp 0 --json 2>/dev/null)
for k in text prompt_ids tokens prompt_tokens generated_tokens prompt_tok_per_s gen_tok_per_s; do
  echo "$json" | grep -q "\"$k\":" || fail "--json lacks \"$k\": $json"
done
echo "$json" | grep -q '"prompt_ids":\[1,403,407,261,378\]' || fail "prompt ids: $json"
echo "$json" | grep -q '"generated_tokens":16' || fail "generated_tokens: $json"

# 4. Bad input: exit status 1 or 2, one line on stderr naming the problem, never a crash (>= 128).
check_error() { # expected-substring, command...
  local want=$1
  shift
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  if [ $rc -eq 0 ] || [ $rc -ge 128 ]; then fail "exit $rc for: $*"; return; fi
  grep -q -- "$want" "$TMP/err" || fail "stderr lacks '$want' for: $* (got: $(cat "$TMP/err"))"
}
printf 'GGUF\003\000\000\000' >"$TMP/trunc.gguf"
head -c 5000 "$MODEL" >"$TMP/cut.gguf"
echo '{"architectures": ["LlamaForCausalLM"], "hidden_size": 64' >"$TMP/config.json"
mkdir -p "$TMP/hf" && cp "$TMP/config.json" "$TMP/hf/config.json"
check_error "no such file" "$BIN" generate -m "$TMP/missing.gguf" -p hi
check_error "truncated" "$BIN" generate -m "$TMP/trunc.gguf" -p hi
check_error "cut.gguf" "$BIN" generate -m "$TMP/cut.gguf" -p hi
check_error "not a GGUF file" "$BIN" generate -m "$DSPARK_SHARED/models/stories260K/README.md" -p hi
check_error "config.json" "$BIN" generate -m "$TMP/hf" -p hi
check_error "needs a prompt" "$BIN" generate -m "$MODEL"
check_error "invalid UTF-8" "$BIN" generate -m "$MODEL" -p "$(printf 'bad \377 byte')"
check_error "--temp" "$BIN" generate -m "$MODEL" -p hi --temp abc
check_error "--top-p" "$BIN" generate -m "$MODEL" -p hi --top-p 0
check_error "-n" "$BIN" generate -m "$MODEL" -p hi -n -5
check_error "context" "$BIN" generate -m "$MODEL" -p hi -n 100000
check_error "unknown option" "$BIN" generate -m "$MODEL" -p hi --bogus 1
check_error "unknown command" "$BIN" frobnicate
check_error "DSPARK_INT8_INPUTS must be 0 or 1, not 'true'" env DSPARK_INT8_INPUTS=true "$BIN" generate -m "$MODEL" -p hi
check_error "DSPARK_BF16_INPUTS must be 0 or 1, not '2'" env DSPARK_BF16_INPUTS=2 "$BIN" generate -m "$MODEL" -p hi
check_error "DSPARK_KV_F16 must be 0 or 1, not 'yes'" env DSPARK_KV_F16=yes "$BIN" generate -m "$MODEL" -p hi
[ "$(DSPARK_BF16_INPUTS= "$BIN" generate -m "$MODEL" -p "Once upon a time" -n 8 --temp 0 2>/dev/null)" = \
  "$("$BIN" generate -m "$MODEL" -p "Once upon a time" -n 8 --temp 0 2>/dev/null)" ] || fail "an empty DSPARK_BF16_INPUTS is not unset"

[ $fails -eq 0 ] && echo "cli generate: all checks passed"
exit $((fails > 0))
