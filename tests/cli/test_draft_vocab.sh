#!/usr/bin/env bash
# dspark draft-vocab on stories260K: the k most frequent response tokens of datagen data go to
# DRAFTER/draft_vocab.json (most frequent first, counted independently here), the drafter loads it
# and greedy speculative decoding still gives plain decoding's text (that drafts stay in the set is
# tests/unit/test_draft_vocab.c); --full removes the file; bad input is refused with one line.
set -u
BIN=${DSPARK_BIN:?}/dspark
MODEL=${DSPARK_SHARED:?}/models/stories260K/stories260K.gguf
TMP=$(cd "${DSPARK_TMP:-/tmp}" && pwd)/cli_draft_vocab.$$
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

printf 'Once upon a time\nThe little dog\nLily and Ben\n' >"$TMP/p.txt"
"$BIN" datagen -m "$MODEL" --prompts "$TMP/p.txt" -n 12 --max-tokens 60 --seed 2 -o "$TMP/data.bin" 2>/dev/null ||
  fail "datagen"
"$BIN" init-drafter -m "$MODEL" -o "$TMP/d" --layers 1 --seed 5 >/dev/null 2>&1 || fail "init-drafter"

"$BIN" draft-vocab -m "$MODEL" -d "$TMP/d" --data "$TMP/data.bin" -k 40 >"$TMP/out" 2>"$TMP/err" ||
  fail "draft-vocab: $(cat "$TMP/err")"
grep -q "40 of 512 token ids, covering" "$TMP/out" || fail "summary: $(cat "$TMP/out")"
# The ids are the 40 most frequent response tokens, by an independent count of the data file
# (header: magic, version, flags, vocab u64, count u64; then per sequence n, n_prompt, ids).
/usr/bin/python3 - "$TMP/data.bin" "$TMP/d/draft_vocab.json" <<'PY' || fail "draft_vocab.json is not the top 40"
import json, struct, sys, collections
b = open(sys.argv[1], "rb").read()
vocab, n = struct.unpack_from("<QQ", b, 16)
off, c = 32, collections.Counter()
for _ in range(n):
    nt, npr = struct.unpack_from("<II", b, off)
    ids = struct.unpack_from("<%dI" % nt, b, off + 8)
    c.update(ids[npr:])
    off += 8 + 4 * nt
want = [t for t, _ in sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))][:40]
got = json.load(open(sys.argv[2]))["token_ids"]
sys.exit(0 if got == want else 1)
PY

# Greedy speculative decoding with the restricted drafter: plain decoding's text.
"$BIN" generate -m "$MODEL" -p "Once upon a time" -n 48 --temp 0 --json >"$TMP/plain.json" 2>/dev/null
"$BIN" generate -m "$MODEL" -p "Once upon a time" -n 48 --temp 0 -d "$TMP/d" --json >"$TMP/spec.json" 2>/dev/null
/usr/bin/python3 -c '
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
sys.exit(0 if a["text"] == b["text"] else 1)' "$TMP/plain.json" "$TMP/spec.json" || fail "greedy text differs from plain decoding"

"$BIN" draft-vocab -d "$TMP/d" --full >/dev/null || fail "--full"
[ ! -e "$TMP/d/draft_vocab.json" ] || fail "--full left draft_vocab.json"

# Refusals.
"$BIN" draft-vocab -m "$MODEL" -d "$TMP/d" --data "$TMP/data.bin" 2>"$TMP/err" && fail "accepted without -k"
grep -q -- "-k" "$TMP/err" || fail "missing -k message: $(cat "$TMP/err")"
"$BIN" draft-vocab -m "$MODEL" -d "$TMP/d" --data "$TMP/nope.bin" -k 4 2>"$TMP/err" && fail "accepted a missing data file"
grep -q "nope.bin" "$TMP/err" || fail "missing-file message: $(cat "$TMP/err")"
printf '{"token_ids": [1, 1]}\n' >"$TMP/d/draft_vocab.json"
"$BIN" generate -m "$MODEL" -p "Once" -n 4 -d "$TMP/d" 2>"$TMP/err" >/dev/null && fail "loaded a bad draft_vocab.json"
grep -q "draft_vocab.json.*twice" "$TMP/err" || fail "bad-file message: $(cat "$TMP/err")"

[ "$fails" = 0 ] && echo "ok" || exit 1
