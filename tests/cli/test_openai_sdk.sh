#!/usr/bin/env bash
# The official `openai` npm SDK (tests/node, installed by scripts/setup.sh) against `dspark serve`
# with a drafter, --schedule auto, --api-key and --cors: models, completions (greedy = generate,
# streaming, batched prompts with n, logprobs, echo), chat (text parts, developer, n, logprobs,
# streaming), 4 concurrent seeded requests = generate --seed --spec none, 400s for tools and
# response_format, 401 for a wrong key (tests/node/openai_client.mjs). Plus, with curl: /health
# stays open, CORS headers and the OPTIONS preflight, /tokenize and /detokenize.
set -u
BIN=${DSPARK_BIN:?}/dspark
MODEL=${DSPARK_SHARED:?}/models/stories260K/stories260K.gguf
SRC=${DSPARK_SRC:?}
TMP=${DSPARK_TMP:-/tmp}/cli_openai_sdk.$$
mkdir -p "$TMP"
server=
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
py() { /usr/bin/python3 -c "$@"; }
[ -d "$SRC/tests/node/node_modules/openai" ] || { echo "FAIL: the openai npm package is missing (run scripts/setup.sh)"; exit 1; }

"$BIN" init-drafter -m "$MODEL" -o "$TMP/d" --layers 1 --seed 3 >/dev/null 2>&1 || fail "init-drafter"
"$BIN" generate -m "$MODEL" -p "Once upon a time" -n 24 --json >"$TMP/g.json" 2>/dev/null || fail "generate"
"$BIN" generate -m "$MODEL" -p "The cat" -n 24 --temp 1 --seed 11 --spec none --json >"$TMP/s.json" 2>/dev/null || fail "generate --seed"
py "
import json
g, s = json.load(open('$TMP/g.json')), json.load(open('$TMP/s.json'))
json.dump({'model': 'stories', 'greedy': {'prompt': 'Once upon a time', 'max_tokens': 24, 'text': g['text']},
           'seeded': {'prompt': 'The cat', 'seed': 11, 'max_tokens': 24, 'text': s['text']}}, open('$TMP/expect.json', 'w'))"

"$BIN" serve -m "$MODEL" -d "$TMP/d" --schedule auto --port 0 --max-concurrency 4 -t 2 --name stories \
  --api-key sekrit --cors "http://app.example" 2>"$TMP/serve.err" &
server=$!
port=
for _ in $(seq 1 300); do
  port=$(sed -n 's/.*on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$TMP/serve.err")
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { echo "FAIL: the server did not start: $(cat "$TMP/serve.err")"; exit 1; }
U=http://127.0.0.1:$port

(cd "$SRC/tests/node" && timeout 240 node openai_client.mjs "$U/v1" sekrit "$TMP/expect.json") || fail "the openai SDK client"

# Access: /health needs no key, everything else does; CORS on every response and the preflight.
code() { curl -s -o "$TMP/body" -w '%{http_code}' "$@"; }
[ "$(code "$U/health")" = 200 ] || fail "/health without a key: $(cat "$TMP/body")"
[ "$(code "$U/v1/models")" = 401 ] && grep -q "invalid or missing API key" "$TMP/body" || fail "no key: $(cat "$TMP/body")"
[ "$(code -H 'Authorization: Bearer wrong' "$U/metrics")" = 401 ] || fail "/metrics with a wrong key"
[ "$(code -H 'Authorization: Bearer sekrit' "$U/metrics")" = 200 ] || fail "/metrics with the key"
h=$(curl -s -D - -o /dev/null -X OPTIONS "$U/v1/chat/completions" -H "Origin: http://app.example" \
  -H "Access-Control-Request-Method: POST" -H "Access-Control-Request-Headers: authorization, content-type")
echo "$h" | grep -q "^HTTP/1.1 204" && echo "$h" | grep -qi "^Access-Control-Allow-Origin: http://app.example" &&
  echo "$h" | grep -qi "^Access-Control-Allow-Headers: .*Authorization" || fail "preflight: $h"
h=$(curl -s -D - -o /dev/null "$U/v1/completions" -H 'Authorization: Bearer sekrit' -d '{"prompt": "x", "max_tokens": 2, "stream": true}')
echo "$h" | grep -qi "^Access-Control-Allow-Origin: http://app.example" || fail "no CORS header on a stream: $h"
# /tokenize and /detokenize (llama-server's shapes): generate's prompt ids, and back.
A=(-H 'Authorization: Bearer sekrit')
t=$(curl -s "${A[@]}" "$U/tokenize" -d '{"content": "Once upon a time", "add_special": true}')
want=$(py "import json; print(json.dumps({'tokens': json.load(open('$TMP/g.json'))['prompt_ids']}, separators=(',', ':')))")
[ "$t" = "$want" ] || fail "/tokenize: $t != $want"
t=$(curl -s "${A[@]}" "$U/tokenize" -d '{"content": "Once upon", "with_pieces": true}')
py "import json,sys; j=json.loads(sys.argv[1]); assert [p['piece'] for p in j['tokens']] == [' Once', ' upon'], j" "$t" ||
  fail "/tokenize with_pieces: $t"
d=$(curl -s "${A[@]}" "$U/detokenize" -d "$want")
[ "$d" = '{"content":"Once upon a time"}' ] || fail "/detokenize: $d"
[ "$(code "${A[@]}" "$U/detokenize" -d '{"tokens": [5, 99999]}')" = 400 ] && grep -q "'tokens' must be integers" "$TMP/body" ||
  fail "/detokenize of a bad id: $(cat "$TMP/body")"
[ "$(code "${A[@]}" "$U/tokenize" -d '{"text": "x"}')" = 400 ] && grep -q "'content' must be a string" "$TMP/body" ||
  fail "/tokenize without content: $(cat "$TMP/body")"
[ "$(code "${A[@]}" "$U/v1/models/other")" = 404 ] && grep -q '"code":"model_not_found"' "$TMP/body" ||
  fail "/v1/models/other: $(cat "$TMP/body")"

if [ "$fails" -ne 0 ]; then
  echo "test_openai_sdk: $fails failure(s)"
  exit 1
fi
echo "test_openai_sdk: all checks passed"
