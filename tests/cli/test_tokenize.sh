#!/usr/bin/env bash
# dspark tokenize: GGUF (model or tokenizer-only), --no-special, --decode round trip, and one clear
# line for every kind of bad input (including hostile tokenizer.json files). Parity with the
# reference tokenizers is tests/reference/test_tokenizer_hf.py.
set -u
BIN=${DSPARK_BIN:?}/dspark
MODEL=${DSPARK_SHARED:?}/models/stories260K/stories260K.gguf
TMP=${DSPARK_TMP:-/tmp}/cli_tokenize.$$
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# 1. The known prompt ids (test_generate.sh), with and without BOS, from -m and --tokenizer.
[ "$("$BIN" tokenize -m "$MODEL" "Once upon a time" 2>/dev/null)" = "[1,403,407,261,378]" ] || fail "-m ids"
[ "$("$BIN" tokenize --tokenizer "$MODEL" "Once upon a time")" = "[1,403,407,261,378]" ] || fail "--tokenizer ids"
[ "$("$BIN" tokenize --tokenizer "$MODEL" --no-special "Once upon a time")" = "[403,407,261,378]" ] || fail "--no-special"
[ "$("$BIN" tokenize --tokenizer "$MODEL" --decode "[1,403,407,261,378]")" = "Once upon a time" ] || fail "--decode"
[ "$("$BIN" tokenize --tokenizer "$MODEL" "")" = "[1]" ] || fail "empty text"

# 2. A minimal tokenizer.json written here: byte-level BPE with two merges and an added token.
mkdir -p "$TMP/tok"
cat >"$TMP/tok/tokenizer.json" <<'JSON'
{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "Ġ": 3, "Ġab": 4, "c": 5},
           "merges": ["a b", "Ġ ab"]},
 "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
 "decoder": {"type": "ByteLevel"},
 "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                    {"Sequence": {"id": "A", "type_id": 0}}], "special_tokens": {"<s>": {"id": "<s>", "ids": [6]}}},
 "added_tokens": [{"id": 6, "content": "<s>", "special": true}]}
JSON
[ "$("$BIN" tokenize --tokenizer "$TMP/tok" "ab abc")" = "[6,2,4,5]" ] || fail "mini BPE: $("$BIN" tokenize --tokenizer "$TMP/tok" "ab abc" 2>&1)"
[ "$("$BIN" tokenize --tokenizer "$TMP/tok/tokenizer.json" --no-special "<s>ab")" = "[6,2]" ] || fail "mini special"
[ "$("$BIN" tokenize --tokenizer "$TMP/tok" --decode "[6,2,4,5]")" = "<s>ab abc" ] || fail "mini decode"
[ "$("$BIN" tokenize --tokenizer "$TMP/tok" --no-special --decode "[6,2,4,5]")" = "ab abc" ] || fail "mini decode skip"

# 3. Bad input: exit 1 or 2, one line naming the problem, never a crash.
check_error() { # expected-substring, command...
  local want=$1
  shift
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  if [ $rc -eq 0 ] || [ $rc -ge 128 ]; then fail "exit $rc for: $*"; return; fi
  [ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "more than one line for: $* ($(cat "$TMP/err"))"
  grep -q -- "$want" "$TMP/err" || fail "stderr lacks '$want' for: $* (got: $(cat "$TMP/err"))"
}
mkdir -p "$TMP/bad" "$TMP/empty"
check_error "exactly one" "$BIN" tokenize "text"
check_error "needs a TEXT" "$BIN" tokenize --tokenizer "$MODEL"
check_error "no such file" "$BIN" tokenize --tokenizer "$TMP/missing.json" hi
check_error "no tokenizer.json" "$BIN" tokenize --tokenizer "$TMP/empty" hi
check_error "invalid UTF-8" "$BIN" tokenize --tokenizer "$TMP/tok" "$(printf 'bad \377')"
check_error "JSON array" "$BIN" tokenize --tokenizer "$TMP/tok" --decode "[1, two]"
check_error "out of range" "$BIN" tokenize --tokenizer "$TMP/tok" --decode "[99]"
bad() { echo "$2" >"$TMP/bad/tokenizer.json"; check_error "$1" "$BIN" tokenize --tokenizer "$TMP/bad" hi; }
bad "tokenizer.json" '{"model": {"type": "BPE", "vocab": {"a": 0}'
bad "only BPE" '{"model": {"type": "Unigram", "vocab": []}}'
bad "bad id" '{"model": {"type": "BPE", "vocab": {"a": -4}, "merges": []}}'
bad "bad id" '{"model": {"type": "BPE", "vocab": {"a": 1e12}, "merges": []}}'
bad "appears twice" '{"model": {"type": "BPE", "vocab": {"a": 0, "b": 0}, "merges": []}}'
bad "missing from the vocabulary" '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a zz"]}}'
bad "not \"left right\"" '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["ab"]}}'
bad "does not compile" '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated"}}'
bad "unsupported normalizer" '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "normalizer": {"type": "NFKD"}}'
bad "unsupported decoder" '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "decoder": {"type": "WordPiece"}}'
bad "out of range" '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "x"}}], "special_tokens": {"x": {"ids": [7]}}}}'
bad "differs from the vocab" '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "added_tokens": [{"id": 0, "content": "zz"}]}'

[ $fails -eq 0 ] && echo "cli tokenize: all checks passed"
exit $((fails > 0))
