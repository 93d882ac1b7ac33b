#!/usr/bin/env bash
# dspark chat-template: a fixture template rendered exactly (no newline added; the byte-exact
# parity with jinja2 over many templates is tests/reference/test_chat_template.py), the options
# (--tools, --kwargs, --bos/--eos, --no-generation-prompt), and one clear line for every kind of
# bad input (missing files, invalid JSON, template syntax errors, features left out,
# raise_exception) naming the file and the problem.
set -u
BIN=${DSPARK_BIN:?}/dspark
T=${DSPARK_SRC:?}/tests/fixtures/templates
TMP=${DSPARK_TMP:-/tmp}/cli_chat_template.$$
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

printf '[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi ✓"}]' >"$TMP/m.json"
printf '[{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}}]' >"$TMP/tools.json"

# 1. Llama 3 (lenml): the text exactly, BOS from --bos; Qwen2.5 without the generation prompt.
"$BIN" chat-template --template "$T/lenml-llama3.jinja" --messages "$TMP/m.json" --bos '<|begin_of_text|>' >"$TMP/out" || fail "llama3 render"
printf '<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi ✓<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n' >"$TMP/want"
cmp -s "$TMP/out" "$TMP/want" || fail "llama3 text: $(od -c "$TMP/out" | tail -3)"
"$BIN" chat-template --template "$T/Qwen-Qwen2.5-7B-Instruct.jinja" --messages "$TMP/m.json" --no-generation-prompt >"$TMP/out2" || fail "no-generation-prompt"
[ "$(tail -c 11 "$TMP/out2" | tr '\n' N)" = "<|im_end|>N" ] || fail "--no-generation-prompt still opens a turn: $(tail -c 40 "$TMP/out2")"

# 2. Qwen3: tools are offered in the system turn; enable_thinking false adds the empty think block.
out=$("$BIN" chat-template --template "$T/Qwen-Qwen3-0.6B.jinja" --messages "$TMP/m.json" --tools "$TMP/tools.json")
case $out in *'<tools>'*'"name": "f"'*) ;; *) fail "qwen3 tools: $out" ;; esac
out=$("$BIN" chat-template --template "$T/Qwen-Qwen3-0.6B.jinja" --messages "$TMP/m.json" --kwargs '{"enable_thinking": false}')
case $out in *'<|im_start|>assistant'$'\n''<think>'$'\n\n''</think>') ;; *) fail "qwen3 enable_thinking: $out" ;; esac

# 3. Bad input: exit status 1 or 2, one line on stderr naming the problem, nothing on stdout.
check_error() { # expected-substring, command...
  local want=$1
  shift
  "$@" >"$TMP/o" 2>"$TMP/e"
  local rc=$?
  [ $rc -eq 1 ] || [ $rc -eq 2 ] || fail "exit $rc for: $* ($(cat "$TMP/e"))"
  [ "$(wc -l <"$TMP/e")" -eq 1 ] || fail "not one line for: $*: $(cat "$TMP/e")"
  grep -qF -- "$want" "$TMP/e" || fail "'$want' not in: $(cat "$TMP/e")"
  [ ! -s "$TMP/o" ] || fail "stdout not empty for: $*"
}
printf '{%% if x %%}never closed' >"$TMP/open.jinja"
printf 'line one\n{{ x | frobnicate }}' >"$TMP/filter.jinja"
printf '{{ raise_exception("Only user roles") }}' >"$TMP/raise.jinja"
printf '{{ messages[0].content.nope.deeper }}' >"$TMP/undef.jinja"
printf '[{"role": "user", "content": "x"' >"$TMP/bad.json"
check_error "no-such.jinja: No such file" "$BIN" chat-template --template "$TMP/no-such.jinja" --messages "$TMP/m.json"
check_error "no-such.json: No such file" "$BIN" chat-template --template "$T/lenml-llama3.jinja" --messages "$TMP/no-such.json"
check_error "bad.json: messages is not valid JSON" "$BIN" chat-template --template "$T/lenml-llama3.jinja" --messages "$TMP/bad.json"
check_error "bad.json: tools is not valid JSON" "$BIN" chat-template --template "$T/lenml-llama3.jinja" --messages "$TMP/m.json" --tools "$TMP/bad.json"
check_error "--kwargs: kwargs must be a JSON object" "$BIN" chat-template --template "$T/lenml-llama3.jinja" --messages "$TMP/m.json" --kwargs '[1]'
check_error "open.jinja:1: unexpected end of template" "$BIN" chat-template --template "$TMP/open.jinja" --messages "$TMP/m.json"
check_error "filter.jinja:2: no filter named 'frobnicate' (not supported)" "$BIN" chat-template --template "$TMP/filter.jinja" --messages "$TMP/m.json"
check_error "raise.jinja:1: raise_exception: Only user roles" "$BIN" chat-template --template "$TMP/raise.jinja" --messages "$TMP/m.json"
check_error "has no attribute 'nope'" "$BIN" chat-template --template "$TMP/undef.jinja" --messages "$TMP/m.json"
check_error "needs --template FILE" "$BIN" chat-template --messages "$TMP/m.json"
check_error "unknown argument" "$BIN" chat-template --frob

[ $fails -eq 0 ] || { echo "test_chat_template: $fails failure(s)"; exit 1; }
echo "test_chat_template: ok"
