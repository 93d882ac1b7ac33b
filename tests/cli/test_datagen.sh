#!/usr/bin/env bash
# dspark datagen and eval on stories260K: a data file the reader accepts, with the right counts and
# prompt lengths; the same bytes whatever --concurrency; --append, --holdout, --unconditional;
# --plain; Ctrl-C keeps what is complete; bad prompt files give one line naming file:line and write nothing.
# eval: the JSON fields for ngram, none and a fresh drafter, and the greedy losslessness check.
set -u
BIN=${DSPARK_BIN:?}/dspark
DUMP=${DSPARK_BIN:?}/ds_data_dump
MODEL=${DSPARK_SHARED:?}/models/stories260K/stories260K.gguf
TMP=${DSPARK_TMP:-/tmp}/cli_datagen.$$
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# Plain lines, JSONL lines (with an escape and extra fields) and a blank line: 4 prompts.
printf '%s\n' 'Once upon a time' '{"prompt": "The cat sat", "id": 1}' '' '  {"prompt": "Lily \u00e9 went"}' 'Tom had a dog' >"$TMP/p.txt"
# Token counts with BOS, from generate --json.
plen() { "$BIN" generate -m "$MODEL" -p "$1" -n 1 --json 2>/dev/null | sed 's/.*"prompt_tokens":\([0-9]*\).*/\1/'; }
P=("$(plen 'Once upon a time')" "$(plen 'The cat sat')" "$(plen 'Lily é went')" "$(plen 'Tom had a dog')")

# 1. Ten sequences, cycling through the 4 prompts; the reader accepts the file.
"$BIN" datagen -m "$MODEL" --prompts "$TMP/p.txt" -n 10 --max-tokens 40 --seed 3 --concurrency 1 -o "$TMP/a.dat" 2>"$TMP/err" ||
  fail "datagen failed: $(cat "$TMP/err")"
grep -q "wrote 10 sequences" "$TMP/err" || fail "summary: $(cat "$TMP/err")"
"$DUMP" "$TMP/a.dat" >"$TMP/a.txt" 2>&1 || fail "reader rejects the file: $(cat "$TMP/a.txt")"
head -1 "$TMP/a.txt" | grep -q '^count 10 vocab 512 ' || fail "header: $(head -1 "$TMP/a.txt")"
i=0
while read -r idx n np; do
  want=${P[$((i % 4))]}
  [ "$np" = "$want" ] || fail "sequence $idx: n_prompt $np, expected $want"
  [ "$n" -gt "$np" ] && [ "$n" -le $((np + 41)) ] || fail "sequence $idx: n_tokens $n with n_prompt $np"
  i=$((i + 1))
done < <(tail -n +2 "$TMP/a.txt")
[ $i -eq 10 ] || fail "dumped $i sequences"
ls "$TMP" | grep -q '\.tmp\.' && fail "temporary file left: $(ls "$TMP")"

# 2. Same seed, same bytes with 1, 4, 3 and 10 sequences in flight; another seed, other bytes.
"$BIN" datagen -m "$MODEL" --prompts "$TMP/p.txt" -n 10 --max-tokens 40 --seed 3 --concurrency 4 -o "$TMP/b.dat" 2>/dev/null
cmp -s "$TMP/a.dat" "$TMP/b.dat" || fail "--concurrency 1 and 4 give different files"
"$BIN" datagen -m "$MODEL" --prompts "$TMP/p.txt" -n 10 --max-tokens 40 --seed 3 --concurrency 3 -t 2 -o "$TMP/b.dat" 2>/dev/null
cmp -s "$TMP/a.dat" "$TMP/b.dat" || fail "--concurrency 1 and 3 (2 threads) give different files"
# 10 rows per forward: where sgemm would take over from the multi-row kernel.
"$BIN" datagen -m "$MODEL" --prompts "$TMP/p.txt" -n 10 --max-tokens 40 --seed 3 --concurrency 16 -o "$TMP/b.dat" 2>/dev/null
cmp -s "$TMP/a.dat" "$TMP/b.dat" || fail "--concurrency 1 and 16 give different files"
"$BIN" datagen -m "$MODEL" --prompts "$TMP/p.txt" -n 10 --max-tokens 40 --seed 4 -o "$TMP/c.dat" 2>/dev/null
cmp -s "$TMP/a.dat" "$TMP/c.dat" && fail "seeds 3 and 4 give the same file"

# 3. --append adds, keeping what was there; --unconditional starts from BOS alone.
cp "$TMP/a.dat" "$TMP/app.dat"
"$BIN" datagen -m "$MODEL" --unconditional -n 3 --max-tokens 20 --seed 100 --append -o "$TMP/app.dat" 2>"$TMP/err" ||
  fail "append failed: $(cat "$TMP/err")"
grep -q "(13 in the file)" "$TMP/err" || fail "append summary: $(cat "$TMP/err")"
"$DUMP" "$TMP/app.dat" --tokens >"$TMP/app.txt" || fail "reader rejects the appended file"
head -1 "$TMP/app.txt" | grep -q '^count 13 ' || fail "after append: $(head -1 "$TMP/app.txt")"
"$DUMP" "$TMP/a.dat" --tokens | tail -n +2 >"$TMP/a_tok.txt"
sed -n '2,11p' "$TMP/app.txt" | cmp -s - "$TMP/a_tok.txt" || fail "append changed the existing sequences"
tail -n 3 "$TMP/app.txt" | awk '$3 != 1 || $4 != 1 { bad = 1 } END { exit bad }' ||
  fail "unconditional sequences do not start from BOS alone: $(tail -n 3 "$TMP/app.txt" | cut -c1-60)"

# EOS ends a sequence and is kept as its last token (stories260K's EOS is 2; at temperature 5 some
# sequences reach it: about 6% in 300 tokens, 4 of these 40 seeds); it never appears inside one.
"$BIN" datagen -m "$MODEL" --unconditional -n 40 --max-tokens 300 --temp 5 --top-k 0 --top-p 1 --plain 0 --seed 1000 -o "$TMP/eos.dat" 2>/dev/null
"$DUMP" "$TMP/eos.dat" --tokens | tail -n +2 | awk '
  $2 < 301 { short++; if ($NF != 2) bad = bad " " $1 }
  { for (i = 4; i < NF; i++) if ($i == 2) bad = bad " " $1 }
  END { if (!short || bad != "") { print "short sequences " short ", bad:" bad; exit 1 } }' >"$TMP/eos.txt" ||
  fail "EOS handling: $(cat "$TMP/eos.txt")"

# 4. --holdout routes a deterministic share to the other file; together they hold every sequence.
"$BIN" datagen -m "$MODEL" --prompts "$TMP/p.txt" -n 20 --max-tokens 10 --holdout 0.3 --holdout-out "$TMP/h.dat" \
  -o "$TMP/m.dat" 2>"$TMP/err" || fail "holdout failed: $(cat "$TMP/err")"
nm=$("$DUMP" "$TMP/m.dat" | sed -n 's/^count \([0-9]*\).*/\1/p')
nh=$("$DUMP" "$TMP/h.dat" | sed -n 's/^count \([0-9]*\).*/\1/p')
[ -n "$nm" ] && [ -n "$nh" ] && [ $((nm + nh)) -eq 20 ] && [ "$nh" -gt 0 ] && [ "$nm" -gt 0 ] ||
  fail "holdout split: main $nm + held out $nh != 20"
"$BIN" datagen -m "$MODEL" --prompts "$TMP/p.txt" -n 20 --max-tokens 10 --holdout 0.3 --holdout-out "$TMP/h2.dat" \
  -o "$TMP/m2.dat" --concurrency 5 2>/dev/null
cmp -s "$TMP/m.dat" "$TMP/m2.dat" && cmp -s "$TMP/h.dat" "$TMP/h2.dat" || fail "the holdout split is not deterministic"

# 4b. --plain F: sequence i is sampled from the target's own distribution (the tokens of a run with
# --temp 1 --top-k 0 --top-p 1, same seed) exactly when floor((i+1)F) > floor(iF) -- here 3 and 7 of
# 0..9 with F = 0.25 -- and the others are the run's own sampler's (--plain 0); the default is 0.5
# (sequences 1, 3, 5, ...).
"$BIN" datagen -m "$MODEL" --prompts "$TMP/p.txt" -n 10 --max-tokens 30 --seed 5 --plain 0.25 -o "$TMP/pl.dat" 2>/dev/null ||
  fail "--plain failed"
"$BIN" datagen -m "$MODEL" --prompts "$TMP/p.txt" -n 10 --max-tokens 30 --seed 5 --plain 0 -o "$TMP/pl0.dat" 2>/dev/null
"$BIN" datagen -m "$MODEL" --prompts "$TMP/p.txt" -n 10 --max-tokens 30 --seed 5 --temp 1 --top-k 0 --top-p 1 -o "$TMP/pl1.dat" 2>/dev/null
for f in pl pl0 pl1; do "$DUMP" "$TMP/$f.dat" --tokens | tail -n +2 >"$TMP/$f.txt"; done
for i in 0 1 2 3 4 5 6 7 8 9; do
  case $i in 3 | 7) src=pl1 ;; *) src=pl0 ;; esac
  cmp -s <(sed -n "$((i + 1))p" "$TMP/pl.txt") <(sed -n "$((i + 1))p" "$TMP/$src.txt") ||
    fail "--plain 0.25: sequence $i is not the $src run's"
done
cmp -s "$TMP/pl0.txt" "$TMP/pl1.txt" && fail "--plain check: temperature 1 and the defaults gave the same sequences"
"$BIN" datagen -m "$MODEL" --prompts "$TMP/p.txt" -n 10 --max-tokens 30 --seed 5 -o "$TMP/pld.dat" 2>/dev/null
"$DUMP" "$TMP/pld.dat" --tokens | tail -n +2 >"$TMP/pld.txt"
for i in 0 1 2 3 4 5 6 7 8 9; do
  src=$([ $((i % 2)) -eq 1 ] && echo pl1 || echo pl0)
  cmp -s <(sed -n "$((i + 1))p" "$TMP/pld.txt") <(sed -n "$((i + 1))p" "$TMP/$src.txt") ||
    fail "default --plain 0.5: sequence $i is not the $src run's"
done
"$BIN" datagen -m "$MODEL" --prompts "$TMP/p.txt" -n 2 --max-tokens 5 --plain 1.5 -o "$TMP/plx.dat" 2>"$TMP/err"
[ $? -eq 2 ] && grep -q -- "--plain expects a fraction" "$TMP/err" || fail "--plain 1.5: $(cat "$TMP/err")"

# 5. Ctrl-C: stops, says so, and commits the completed sequences (a valid file, fewer than asked).
"$BIN" datagen -m "$MODEL" --unconditional -n 1000000 --max-tokens 200 -t 1 -o "$TMP/int.dat" 2>"$TMP/int.err" &
pid=$!
for _ in $(seq 1 600); do # (up to 60 s: a sanitized build on a loaded machine is slow)
  grep -q "datagen [1-9][0-9]*/1000000" "$TMP/int.err" 2>/dev/null && break
  sleep 0.1
done
sleep 0.5
kill -INT $pid
wait $pid
rc=$?
[ $rc -eq 130 ] || fail "interrupted datagen exited $rc"
grep -q "interrupted: committing the" "$TMP/int.err" || fail "no interruption message: $(tail -2 "$TMP/int.err")"
n_int=$("$DUMP" "$TMP/int.dat" 2>&1 | sed -n 's/^count \([0-9]*\).*/\1/p')
[ -n "$n_int" ] && [ "$n_int" -gt 0 ] && [ "$n_int" -lt 1000000 ] || fail "interrupted file: count '$n_int'"
ls "$TMP" | grep -q '\.tmp\.' && fail "temporary file left after Ctrl-C: $(ls "$TMP")"

# 5b. Chat / instruction JSONL: a conversation is rendered with the target's chat format (stories260K:
# the plain "role: content" transcript) and its trailing assistant turn dropped; the OpenAI, ShareGPT
# and Alpaca shapes of the same conversation give the same sequences.
chat_plen=$("$BIN" generate -m "$MODEL" -p "Tell a story" --chat -n 1 --json 2>/dev/null | sed 's/.*"prompt_tokens":\([0-9]*\).*/\1/')
printf '%s\n' '{"messages": [{"role": "user", "content": "Tell a story"}, {"role": "assistant", "content": "No."}]}' >"$TMP/msg.jsonl"
printf '%s\n' '{"conversations": [{"from": "human", "value": "Tell a story"}, {"from": "gpt", "value": "Once"}]}' >"$TMP/sg.jsonl"
printf '%s\n' '{"instruction": "Tell a story", "input": ""}' >"$TMP/al.jsonl"
for f in msg sg al; do
  "$BIN" datagen -m "$MODEL" --prompts "$TMP/$f.jsonl" -n 3 --max-tokens 12 --seed 5 -o "$TMP/$f.dat" 2>"$TMP/err" ||
    fail "datagen from $f.jsonl: $(cat "$TMP/err")"
done
cmp -s "$TMP/msg.dat" "$TMP/sg.dat" && cmp -s "$TMP/msg.dat" "$TMP/al.dat" || fail "messages, conversations and instruction differ"
np=$("$DUMP" "$TMP/msg.dat" | sed -n '2p' | awk '{print $3}')
[ -n "$chat_plen" ] && [ "$np" = "$chat_plen" ] || fail "a conversation's prompt is $np tokens, generate --chat says $chat_plen"
# A system turn is rendered too (a longer prompt than the user turn alone).
printf '%s\n' '{"messages": [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Tell a story"}]}' >"$TMP/sys.jsonl"
"$BIN" datagen -m "$MODEL" --prompts "$TMP/sys.jsonl" -n 1 --max-tokens 4 -o "$TMP/sys.dat" 2>/dev/null || fail "datagen with a system turn"
np2=$("$DUMP" "$TMP/sys.dat" | sed -n '2p' | awk '{print $3}')
[ -n "$np2" ] && [ "$np2" -gt "$np" ] || fail "the system turn is not in the prompt ($np2 vs $np tokens)"

# 5c. mpirun -np 2: the sequences split over the ranks, one file, the same bytes as one process
# (with a held-out file, and an odd count).
if command -v mpirun >/dev/null; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  dg=(-m "$MODEL" --prompts "$TMP/p.txt" -n 11 --max-tokens 30 --seed 7 -t 1 --holdout 0.3)
  "$BIN" datagen "${dg[@]}" --holdout-out "$TMP/mh1.dat" -o "$TMP/m1.dat" 2>/dev/null || fail "datagen (1 process)"
  ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0 mpirun --oversubscribe -np 2 "$BIN" datagen "${dg[@]}" \
    --holdout-out "$TMP/mh2.dat" -o "$TMP/m2.dat" >/dev/null 2>"$TMP/mpi.err" || fail "mpirun -np 2 datagen: $(tail -3 "$TMP/mpi.err")"
  cmp -s "$TMP/m1.dat" "$TMP/m2.dat" && cmp -s "$TMP/mh1.dat" "$TMP/mh2.dat" ||
    fail "mpirun -np 2 datagen differs from one process"
  grep -c "wrote" "$TMP/mpi.err" | grep -qx 1 || fail "more than one rank reported: $(cat "$TMP/mpi.err")"
else
  echo "note: mpirun not installed; the MPI datagen check was skipped"
fi

# 6. Bad input: exit 1 or 2, one line naming the problem (file:line for prompt files), no output file.
check_error() { # expected-substring, command...
  local want=$1
  shift
  rm -f "$TMP/out.dat"
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  if [ $rc -eq 0 ] || [ $rc -ge 128 ]; then fail "exit $rc for: $*"; return; fi
  grep -q -- "$want" "$TMP/err" || fail "stderr lacks '$want' for: $* (got: $(cat "$TMP/err"))"
  [ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "more than one line on stderr for: $*: $(cat "$TMP/err")"
  [ -e "$TMP/out.dat" ] && fail "an output file was written for: $*"
  ls "$TMP" | grep -q '\.tmp\.' && fail "temporary file left for: $*"
}
printf '%s\n' 'Once upon a time' '{"prompt": "x"}' '{"prompt": "unterminated' >"$TMP/bad.jsonl"
printf 'ok\nbad \377 byte\n' >"$TMP/bad_utf8.txt"
printf '{"text": "no prompt field"}\n' >"$TMP/noprompt.jsonl"
printf '\n\n' >"$TMP/blank.txt"
check_error "bad.jsonl:3:" "$BIN" datagen -m "$MODEL" --prompts "$TMP/bad.jsonl" -n 2 --max-tokens 4 -o "$TMP/out.dat"
check_error "bad_utf8.txt:2: invalid UTF-8" "$BIN" datagen -m "$MODEL" --prompts "$TMP/bad_utf8.txt" -n 2 --max-tokens 4 -o "$TMP/out.dat"
check_error "noprompt.jsonl:1:" "$BIN" datagen -m "$MODEL" --prompts "$TMP/noprompt.jsonl" -n 2 --max-tokens 4 -o "$TMP/out.dat"
printf '%s\n' 'x' '{"messages": "hi"}' >"$TMP/c1.jsonl"
printf '%s\n' '{"messages": [{"role": "wizard", "content": "hi"}]}' >"$TMP/c2.jsonl"
printf '%s\n' '{"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}' >"$TMP/c3.jsonl"
printf '%s\n' '{"messages": [{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}]}' >"$TMP/c4.jsonl"
printf '%s\n' '{"conversations": [{"from": "bot", "value": "hi"}]}' >"$TMP/c5.jsonl"
printf '%s\n' '{"instruction": 3}' >"$TMP/c6.jsonl"
printf '%s\n' '{"messages": []}' >"$TMP/c7.jsonl"
printf '%s\n' '{"messages": [{"role": "user", "content": "\ud800"}]}' >"$TMP/c8.jsonl"
check_error "c1.jsonl:2: \"messages\" must be a non-empty array" "$BIN" datagen -m "$MODEL" --prompts "$TMP/c1.jsonl" -n 2 --max-tokens 4 -o "$TMP/out.dat"
check_error "c2.jsonl:1: messages\[0\]: \"role\" is 'wizard'" "$BIN" datagen -m "$MODEL" --prompts "$TMP/c2.jsonl" -n 2 --max-tokens 4 -o "$TMP/out.dat"
check_error "c3.jsonl:1: messages\[0\] has no \"content\" string" "$BIN" datagen -m "$MODEL" --prompts "$TMP/c3.jsonl" -n 2 --max-tokens 4 -o "$TMP/out.dat"
check_error "c4.jsonl:1: the conversation has no user turn" "$BIN" datagen -m "$MODEL" --prompts "$TMP/c4.jsonl" -n 2 --max-tokens 4 -o "$TMP/out.dat"
check_error "c5.jsonl:1: conversations\[0\]: \"from\" is 'bot'" "$BIN" datagen -m "$MODEL" --prompts "$TMP/c5.jsonl" -n 2 --max-tokens 4 -o "$TMP/out.dat"
check_error "c6.jsonl:1: \"instruction\" must be a string" "$BIN" datagen -m "$MODEL" --prompts "$TMP/c6.jsonl" -n 2 --max-tokens 4 -o "$TMP/out.dat"
check_error "c7.jsonl:1:" "$BIN" datagen -m "$MODEL" --prompts "$TMP/c7.jsonl" -n 2 --max-tokens 4 -o "$TMP/out.dat"
check_error "c8.jsonl:1:" "$BIN" datagen -m "$MODEL" --prompts "$TMP/c8.jsonl" -n 2 --max-tokens 4 -o "$TMP/out.dat"
check_error "msg.jsonl:1: a chat conversation" "$BIN" eval -m "$MODEL" --prompts "$TMP/msg.jsonl" --spec ngram
check_error "no prompts" "$BIN" datagen -m "$MODEL" --prompts "$TMP/blank.txt" -n 2 --max-tokens 4 -o "$TMP/out.dat"
check_error "missing.txt" "$BIN" datagen -m "$MODEL" --prompts "$TMP/missing.txt" -n 2 --max-tokens 4 -o "$TMP/out.dat"
check_error "exactly one of" "$BIN" datagen -m "$MODEL" --prompts "$TMP/p.txt" --unconditional -n 2 --max-tokens 4 -o "$TMP/out.dat"
check_error "exactly one of" "$BIN" datagen -m "$MODEL" -n 2 --max-tokens 4 -o "$TMP/out.dat"
check_error "-n COUNT" "$BIN" datagen -m "$MODEL" --unconditional --max-tokens 4 -o "$TMP/out.dat"
check_error "--max-tokens" "$BIN" datagen -m "$MODEL" --unconditional -n 2 -o "$TMP/out.dat"
check_error "go together" "$BIN" datagen -m "$MODEL" --unconditional -n 2 --max-tokens 4 --holdout 0.1 -o "$TMP/out.dat"
check_error "--holdout" "$BIN" datagen -m "$MODEL" --unconditional -n 2 --max-tokens 4 --holdout 2 --holdout-out "$TMP/h9.dat" -o "$TMP/out.dat"
check_error "p.txt:1: prompt" "$BIN" datagen -m "$MODEL" --prompts "$TMP/p.txt" -n 2 --max-tokens 100000 -o "$TMP/out.dat"
check_error "no-such-dir" "$BIN" datagen -m "$MODEL" --unconditional -n 2 --max-tokens 4 -o "$TMP/no-such-dir/out.dat"
check_error "cannot append" "$BIN" datagen -m "$MODEL" --unconditional -n 2 --max-tokens 4 --append -o "$TMP/p.txt"
check_error "bad.jsonl:3:" "$BIN" eval -m "$MODEL" --prompts "$TMP/bad.jsonl" --spec ngram
check_error "needs a prompt file" "$BIN" eval -m "$MODEL" --spec ngram
check_error "needs a drafter" "$BIN" eval -m "$MODEL" --prompts "$TMP/p.txt" --spec dspark

# 7. eval: JSON fields for ngram and none; at temp 0 the losslessness check runs and passes.
fields="spec prompts rounds tau acceptance_by_position generated_tokens tok_per_s baseline_tok_per_s speedup"
for spec in ngram none; do
  json=$("$BIN" eval -m "$MODEL" --prompts "$TMP/p.txt" --spec $spec --max-tokens 48 --temp 0 --json 2>"$TMP/err") ||
    fail "eval --spec $spec failed: $(cat "$TMP/err")"
  for k in $fields; do
    echo "$json" | grep -q "\"$k\":" || fail "eval --spec $spec JSON lacks \"$k\": $json"
  done
  echo "$json" | grep -q "\"spec\":\"$spec\"" || fail "eval spec: $json"
  echo "$json" | grep -q '"prompts":4' || fail "eval prompts: $json"
  echo "$json" | grep -q '"generated_tokens":192' || fail "eval generated_tokens (4 x 48): $json"
  echo "$json" | grep -Eq '"speedup":[0-9]' || fail "eval speedup: $json"
  echo "$json" | grep -q '"lossless_checked":true' || fail "eval did not check losslessness at temp 0: $json"
done
echo "$json" | grep -q '"tau":1,' || fail "--spec none: tau must be 1: $json"
table=$("$BIN" eval -m "$MODEL" --prompts "$TMP/p.txt" --spec ngram --max-tokens 32 2>/dev/null)
echo "$table" | grep -q "^speedup " || fail "eval table lacks the speedup: $table"
echo "$table" | grep -q "^lossless" || fail "eval table lacks the lossless line: $table"
# Sampled with the residual rule: no token check, but it runs; with the coupled rule (the default)
# the tokens are the seed's whatever is drafted, so they are checked.
json=$("$BIN" eval -m "$MODEL" --prompts "$TMP/p.txt" --spec ngram --max-tokens 32 --temp 0.8 --top-k 20 --verify residual --json 2>/dev/null)
echo "$json" | grep -q '"lossless_checked":false' || fail "sampled eval: $json"
json=$("$BIN" eval -m "$MODEL" --prompts "$TMP/p.txt" --spec ngram --max-tokens 32 --temp 0.8 --top-k 20 --json 2>/dev/null)
echo "$json" | grep -q '"lossless_checked":true' || fail "sampled eval, coupled: $json"

# 8. eval with a fresh drafter from init-drafter.
"$BIN" init-drafter -m "$MODEL" -o "$TMP/drafter" --layers 1 2>/dev/null || fail "init-drafter failed"
json=$("$BIN" eval -m "$MODEL" -d "$TMP/drafter" --prompts "$TMP/p.txt" --max-tokens 24 --json 2>"$TMP/err") ||
  fail "eval with a drafter failed: $(cat "$TMP/err")"
for k in $fields; do
  echo "$json" | grep -q "\"$k\":" || fail "eval --spec dspark JSON lacks \"$k\": $json"
done
echo "$json" | grep -q '"spec":"dspark"' || fail "eval with -d: $json"
echo "$json" | grep -q '"lossless_checked":true' || fail "eval with -d: $json"

[ $fails -eq 0 ] && echo "cli datagen/eval: all checks passed"
exit $((fails > 0))
