#!/usr/bin/env bash
# The option tables (cli/options.c): the README's command reference is exactly `dspark help
# --markdown` (so the two cannot drift; scripts/cli_reference.sh rewrites it), every command's
# --help comes from the same table, and the one parser gives each kind of bad argument its line.
set -u
BIN=${DSPARK_BIN:?}/dspark
SRC=${DSPARK_SRC:?}
TMP=${DSPARK_TMP:-/tmp}/cli_reference.$$
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# err CMD... : exit status 2 and exactly this one line on stderr
err() {
  local want=$1; shift
  "$BIN" "$@" >/dev/null 2>"$TMP/err" </dev/null
  local rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && [ "$(cat "$TMP/err")" = "dspark: $want" ] ||
    fail "$*: exit $rc, stderr '$(cat "$TMP/err")', wanted 'dspark: $want'"
}

# 1. README.md between the markers = dspark help --markdown.
"$BIN" help --markdown >"$TMP/ref.md" || fail "help --markdown: exit status"
sed -n '/^<!-- cli-reference:begin/,/^<!-- cli-reference:end/p' "$SRC/README.md" | sed '1d;$d' >"$TMP/readme.md"
[ -s "$TMP/readme.md" ] || fail "README.md has no <!-- cli-reference:begin/end --> block"
diff -u "$TMP/readme.md" "$TMP/ref.md" >"$TMP/diff" ||
  fail "README.md's command reference differs from dspark help --markdown (run scripts/cli_reference.sh): $(head -20 "$TMP/diff")"

# 2. Every command: --help (and -h) on stdout, exit 0, starting with its usage line; each option the
# help shows is a row of its reference section.
cmds=$("$BIN" --help | sed -n 's/^  \([a-z-]*\) .*/\1/p' | grep -v '^version$')
[ "$(echo "$cmds" | wc -w)" -eq 15 ] || fail "dspark --help lists $(echo $cmds)"
for c in $cmds; do
  "$BIN" $c --help >"$TMP/h" 2>"$TMP/e" || fail "$c --help: exit status"
  [ -s "$TMP/e" ] && fail "$c --help wrote to stderr"
  head -1 "$TMP/h" | grep -q "^usage: dspark $c" || fail "$c --help: first line $(head -1 "$TMP/h")"
  "$BIN" $c -h | cmp -s - "$TMP/h" || fail "$c -h differs from --help"
  grep -q "^#### dspark $c\$" "$TMP/ref.md" || fail "no reference section for $c"
  section=$(sed -n "/^#### dspark $c\$/,/^#### /p" "$TMP/ref.md")
  for o in $(sed -n 's/^  \(--[a-z][a-z0-9-]*\).*/\1/p' "$TMP/h"); do
    [[ $section == *"\`$o\`"* ]] || fail "$c: $o is in --help, not in the reference"
  done
done

# 3. The parser's lines: unknown options (also last), missing values, bad values from the tables'
# ranges and choices, lists and repeatable options, positional arguments.
err "unknown option '--frob' (see dspark generate --help)" generate -p x --frob
err "unknown option '--frob' (see dspark eval --help)" eval --frob 1
err "unknown option 'stray' (see dspark generate --help)" generate -p x stray
err "option --temp needs a value" generate -p x --temp
err "-t expects 1..1024, got '0'" generate -p x -t 0
err "-n expects a count, got '-5'" generate -p x -n -5
err "--spec expects none, dspark or ngram, got 'x'" generate -p x --spec x
err "--schedule expects auto, fixed, threshold or none, got 'x'" serve --schedule x
err "--steps expects 1..100000000, got '0'" train --steps 0
err "--lr expects a number in [1e-09, 10], got 'fast'" train --lr fast
err "--eval-temp expects up to 4 comma-separated temperatures, got '0,1,2,3,4'" train --eval-temp 0,1,2,3,4
err "--taps expects comma-separated layer ids, got '1,x'" init-drafter --taps 1,x
err "--markov-head expects vanilla, gated or rnn, got 'x'" init-drafter --markov-head x
err "--dtype expects bf16 or f32, got 'f16'" inflate --dtype f16
err "--logit-bias expects TOKEN_ID:BIAS with BIAS in -100..100, got '5'" generate -p x --logit-bias 5
err "quantize takes SRC_DIR OUT_DIR (extra argument 'c')" quantize a b c
err "unknown argument '--frob' (see dspark chat-template --help)" chat-template --frob
err "tokenize takes one TEXT argument" tokenize --tokenizer x a b
# (a value that looks like an option is still the value; -- ends the options of tokenize)
err "-n expects a count, got '--json'" generate -p x -n --json
MODEL=${DSPARK_SHARED:?}/models/stories260K/stories260K.gguf
out=$("$BIN" tokenize --tokenizer "$MODEL" -- --decode 2>&1)
[[ $out == "[1,"* ]] || fail "tokenize -- --decode: $out"
# (repeatable: two biases, the second token pushed to the top; the last value of an option wins)
a=$("$BIN" generate -m "$MODEL" -p "Once" -n 1 --json --logit-bias 403:-100 --logit-bias 13:100 2>/dev/null | grep -o '"tokens":\[[0-9]*\]')
[ "$a" = '"tokens":[13]' ] || fail "--logit-bias twice: $a"
b=$("$BIN" generate -m "$MODEL" -p "Once" -n 3 --json -n 1 2>/dev/null | grep -o '"generated_tokens":[0-9]*')
[ "$b" = '"generated_tokens":1' ] || fail "the last -n does not win: $b"

[ $fails -eq 0 ] && echo "PASS test_cli_reference" || { echo "$fails failures"; exit 1; }
