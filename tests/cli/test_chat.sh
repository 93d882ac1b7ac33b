#!/usr/bin/env bash
# dspark chat and generate --chat on stories260K (no chat template: the plain format). Each reply
# must be exactly what plain generation gives for the rendered conversation, the conversation must
# carry the earlier turns, and bad input gives one clear line.
set -u
BIN=${DSPARK_BIN:?}/dspark
MODEL=${DSPARK_SHARED:?}/models/stories260K/stories260K.gguf
TMP=${DSPARK_TMP:-/tmp}/cli_chat.$$
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# 1. Two turns on piped stdin: two reply lines, the first equal to plain generation on
#    "user: ...\nassistant:" and the second to generation on the whole conversation so far.
printf 'Hello there\nOnce upon a time\n' | "$BIN" chat -m "$MODEL" -n 24 >"$TMP/out" 2>"$TMP/err"
rc=$?
[ $rc -eq 0 ] || fail "chat exit $rc: $(cat "$TMP/err")"
grep -q "chat format plain" "$TMP/err" || fail "chat did not report the plain format: $(cat "$TMP/err")"
# Replies are printed one after the other, each followed by a newline (a reply may hold newlines).
want1=$("$BIN" generate -m "$MODEL" -p "$(printf 'user: Hello there\nassistant:')" -n 24 2>/dev/null)
want2=$("$BIN" generate -m "$MODEL" -p "$(printf 'user: Hello there\nassistant: %s\nuser: Once upon a time\nassistant:' "$want1")" -n 24 2>/dev/null)
nohist=$("$BIN" generate -m "$MODEL" -p "$(printf 'user: Once upon a time\nassistant:')" -n 24 2>/dev/null)
[ -n "$want1" ] && [ "$nohist" != "$want2" ] || fail "the history should change the second reply: '$want2' '$nohist'"
printf '%s\n%s\n' "$want1" "$want2" >"$TMP/want"
cmp -s "$TMP/out" "$TMP/want" || fail "chat replies differ from generation on the rendered conversation:
--- want
$(cat "$TMP/want")
--- got
$(cat "$TMP/out")"
r1=$want1

# 2. /exit stops before later lines; empty lines are skipped.
printf '\nHello there\n/exit\nnever answered\n' | "$BIN" chat -m "$MODEL" -n 24 >"$TMP/out" 2>/dev/null
printf '%s\n' "$want1" >"$TMP/want"
cmp -s "$TMP/out" "$TMP/want" || fail "/exit: expected only the first reply, got: $(cat "$TMP/out")"

# 3. A system message is the first plain line.
printf 'Hi\n' | "$BIN" chat -m "$MODEL" -n 12 --system "Be kind." >"$TMP/out" 2>/dev/null
want=$("$BIN" generate -m "$MODEL" -p "$(printf 'system: Be kind.\nuser: Hi\nassistant:')" -n 12 2>/dev/null)
[ "$(cat "$TMP/out")" = "$want" ] || fail "--system: '$(cat "$TMP/out")' != '$want'"

# 4. generate --chat renders the prompt as one user turn.
a=$("$BIN" generate -m "$MODEL" --chat -p "Once upon" -n 16 --json 2>/dev/null)
b=$("$BIN" generate -m "$MODEL" -p "$(printf 'user: Once upon\nassistant:')" -n 16 --json 2>/dev/null)
strip() { sed 's/"prompt_tok_per_s".*//'; }
[ -n "$a" ] && [ "$(echo "$a" | strip)" = "$(echo "$b" | strip)" ] || fail "generate --chat: $a != $b"

# 5. Speculative options are accepted (ngram needs no drafter) and do not change greedy output.
printf 'Hello there\n' | "$BIN" chat -m "$MODEL" -n 24 --spec ngram >"$TMP/out" 2>/dev/null
[ "$(cat "$TMP/out")" = "$r1" ] || fail "--spec ngram changed the greedy reply: $(cat "$TMP/out")"

# 6. Bad input.
check_error() { # expected-substring, command...
  local want=$1
  shift
  "$@" </dev/null >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  if [ $rc -eq 0 ] || [ $rc -ge 128 ]; then fail "exit $rc for: $*"; return; fi
  grep -q -- "$want" "$TMP/err" || fail "stderr lacks '$want' for: $* (got: $(cat "$TMP/err"))"
}
check_error "no such file" "$BIN" chat -m "$TMP/missing.gguf"
check_error "unknown option" "$BIN" chat -m "$MODEL" --bogus 1
check_error "-n" "$BIN" chat -m "$MODEL" -n 0
check_error "needs a drafter" "$BIN" chat -m "$MODEL" --spec dspark
printf 'bad \377 byte\n' | "$BIN" chat -m "$MODEL" -n 4 >"$TMP/out" 2>"$TMP/err"
rc=$?
{ [ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -q "UTF-8" "$TMP/err"; } || fail "invalid UTF-8 line: exit $rc, $(cat "$TMP/err")"

[ $fails -eq 0 ] && echo "cli chat: all checks passed"
exit $((fails > 0))
