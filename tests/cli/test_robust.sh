#!/usr/bin/env bash
# Hostile input and faults at the command line (issue 12): outputs that are not regular files are
# refused in one line and left alone; temporaries of killed runs are cleaned by the next run.
set -u
BIN=${DSPARK_BIN:?}/dspark
MODEL=${DSPARK_SHARED:?}/models/stories260K/stories260K.gguf
TMP=${DSPARK_TMP:-/tmp}/cli_robust.$$
mkdir -p "$TMP"
trap '[ -n "${KEEP:-}" ] || rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# one_line FILE WANT: the command failed with exactly one line on stderr that contains WANT.
one_line() {
  [ "$(wc -l <"$1")" -eq 1 ] && grep -qF -- "$2" "$1" || fail "expected one line with '$2', got: $(cat "$1")"
}
py() { /usr/bin/python3 -c "$@"; }
# poke FILE OFFSET HEXBYTES: overwrite bytes in place.
poke() { py "
f=open('$1','r+b'); f.seek($2); f.write(bytes.fromhex('$3')); f.close()"; }
# gguf_offset TENSOR: the absolute offset of a stories260K tensor's data (tests/reference/gguf_py.py).
gguf_offset() { py "
import sys; sys.path.insert(0, '${DSPARK_SRC:?}/tests/reference')
import gguf_py
print(gguf_py.GGUFFile('$MODEL').tensors['$1'].offset)"; }
# st_offset FILE TENSOR: the absolute offset of a safetensors tensor's data.
st_offset() { py "
import json, struct
b=open('$1','rb').read(); n=struct.unpack('<Q', b[:8])[0]; h=json.loads(b[8:8+n])
print(8 + n + h['$2']['data_offsets'][0])"; }
dead_pid() { bash -c 'echo $$'; } # a process that has exited

# 1. -o naming a FIFO, a device, a directory or a link to a device: one line, exit 1, nothing replaced.
mkfifo "$TMP/fifo"
ln -s /dev/null "$TMP/to_null"
mkdir "$TMP/adir"
for spec in "fifo:is a FIFO, not a regular file" "adir:is a directory, not a regular file" \
  "to_null:is a symbolic link to a character device"; do
  out=$TMP/${spec%%:*}
  timeout 20 "$BIN" datagen -m "$MODEL" --unconditional -n 2 --max-tokens 4 -o "$out" 2>"$TMP/err"
  rc=$?
  [ $rc -eq 1 ] || fail "datagen -o ${spec%%:*}: exit $rc"
  one_line "$TMP/err" "${spec#*:}"
done
[ -p "$TMP/fifo" ] || fail "the FIFO was replaced"
[ -L "$TMP/to_null" ] || fail "the link to /dev/null was replaced"
timeout 20 "$BIN" datagen -m "$MODEL" --unconditional -n 2 --max-tokens 4 -o /dev/null 2>"$TMP/err"
[ $? -eq 1 ] || fail "datagen -o /dev/null did not fail"
one_line "$TMP/err" "/dev/null: is a character device, not a regular file"
[ -c /dev/null ] || fail "/dev/null is no longer a device"
# calibrate/profile check their -o before the work (cli_check_writable).
timeout 20 "$BIN" profile -m "$MODEL" -o "$TMP/fifo" 2>"$TMP/err"
[ $? -ne 0 ] || fail "profile -o FIFO succeeded"
one_line "$TMP/err" "is a FIFO, not a regular file"
# A link to a regular file is written through: the link stays, its target gets the data.
: >"$TMP/real.dat"
ln -s real.dat "$TMP/link.dat"
"$BIN" datagen -m "$MODEL" --unconditional -n 2 --max-tokens 4 -o "$TMP/link.dat" 2>"$TMP/err" ||
  fail "datagen through a symlink: $(cat "$TMP/err")"
[ -L "$TMP/link.dat" ] && [ -s "$TMP/real.dat" ] || fail "the symlink was not written through"

# 11. A datagen killed with -9 leaves OUT.tmp.PID; the next run to the same OUT removes it. The
# same for a directory writer's OUT.tmp.PID (init-drafter; quantize shares the code).
"$BIN" datagen -m "$MODEL" --unconditional -n 100000 --max-tokens 200 -o "$TMP/k.dat" 2>/dev/null &
pid=$!
for _ in $(seq 100); do [ -e "$TMP/k.dat.tmp.$pid" ] && break; sleep 0.1; done
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
[ -e "$TMP/k.dat.tmp.$pid" ] || fail "no temporary file seen from the killed datagen"
"$BIN" datagen -m "$MODEL" --unconditional -n 2 --max-tokens 4 -o "$TMP/k.dat" 2>/dev/null || fail "datagen after a kill"
[ -e "$TMP/k.dat.tmp.$pid" ] && fail "the killed run's temporary file was not removed"
dp=$(dead_pid)
mkdir "$TMP/drafter.tmp.$dp" && echo '{}' >"$TMP/drafter.tmp.$dp/config.json"
"$BIN" init-drafter -m "$MODEL" -o "$TMP/drafter" --layers 1 2>"$TMP/err" || fail "init-drafter: $(cat "$TMP/err")"
[ -e "$TMP/drafter.tmp.$dp" ] && fail "the stale OUT.tmp.PID directory was not removed"
ls "$TMP" | grep -q '\.tmp\.' && fail "temporaries left: $(ls "$TMP" | grep '\.tmp\.')"

# 9. Misleading messages: an unknown last option is unknown (not "needs a value"); a known one
# without its value says so; --plot into a missing folder fails before training, naming the folder.
for cmd in generate train datagen eval calibrate profile serve chat init-drafter; do
  "$BIN" $cmd --no-such-option 2>"$TMP/err"
  [ $? -eq 2 ] || fail "$cmd --no-such-option: exit status"
  one_line "$TMP/err" "unknown option '--no-such-option' (see dspark $cmd --help)"
done
"$BIN" generate -p x -t 2>"$TMP/err"
one_line "$TMP/err" "option -t needs a value"
"$BIN" quantize a b --bits 2>"$TMP/err"
one_line "$TMP/err" "option --bits needs a value"
"$BIN" train -m "$MODEL" --data "$TMP/k.dat" -o "$TMP/run" --steps 1 --plot "$TMP/missing/loss.png" 2>"$TMP/err"
[ $? -eq 1 ] || fail "train --plot into a missing folder: exit status"
one_line "$TMP/err" "$TMP/missing"
grep -q gnuplot "$TMP/err" && fail "a missing --plot folder is blamed on gnuplot"
[ -e "$TMP/run" ] && fail "train ran although --plot cannot be written"

# 5. NaN/Inf weights: a norm vector is refused at load naming the tensor; NaN in a matrix (not
# scanned at load) is caught on the logits of the first forward; never tokens of garbage, exit 0.
cp "$MODEL" "$TMP/nan_norm.gguf"
poke "$TMP/nan_norm.gguf" "$(gguf_offset blk.0.attn_norm.weight)" 0000c07f
"$BIN" generate -m "$TMP/nan_norm.gguf" -p "Once upon a time" -n 4 --json >"$TMP/out" 2>"$TMP/err"
[ $? -eq 1 ] && [ ! -s "$TMP/out" ] || fail "NaN norm: exit status or output $(cat "$TMP/out")"
one_line "$TMP/err" "nan_norm.gguf: tensor 'blk.0.attn_norm.weight' holds NaN or Inf values"
cp "$MODEL" "$TMP/inf_ffn.gguf"
poke "$TMP/inf_ffn.gguf" "$(( $(gguf_offset blk.0.ffn_down.weight) + 40 ))" 0000807f
"$BIN" generate -m "$TMP/inf_ffn.gguf" -p "Once upon a time" -n 4 --json >"$TMP/out" 2>"$TMP/err"
[ $? -eq 1 ] && [ ! -s "$TMP/out" ] || fail "Inf matrix: exit status or output $(cat "$TMP/out")"
one_line "$TMP/err" "inf_ffn.gguf: the model computed NaN or infinite logits"

# 5 and 4. Training that diverges stops with one line, before the update, keeping the last
# checkpoint; metrics.jsonl stays JSON. Then kill -9 early in --resume never empties metrics.jsonl.
"$BIN" datagen -m "$MODEL" --unconditional -n 8 --max-tokens 24 --seed 2 -o "$TMP/t.dat" 2>/dev/null || fail "datagen t.dat"
# (The killed runs write no checkpoint: --save-every beyond the kill window. A kill between the files
# of one checkpoint: tests/cli/test_train.sh, section 6.)
tr=(-m "$MODEL" --data "$TMP/t.dat" --layers 1 --block 4 --markov-rank 8 --anchors 8 --batch 2 -t 1 --steps 100000)
"$BIN" train "${tr[@]}" --save-every 1 --stop-after 2 -o "$TMP/tr" 2>/dev/null || fail "train 2 steps"
[ "$(wc -l <"$TMP/tr/metrics.jsonl")" -eq 2 ] || fail "metrics after 2 steps: $(cat "$TMP/tr/metrics.jsonl")"
for i in 1 2 3 4 5 6; do
  "$BIN" train "${tr[@]}" --save-every 100000 --resume -o "$TMP/tr" 2>/dev/null &
  pid=$!
  sleep "0.0$((i * 15))"
  kill -9 $pid 2>/dev/null
  wait $pid 2>/dev/null
  py "
import json
l=[json.loads(x) for x in open('$TMP/tr/metrics.jsonl')]
s=json.load(open('$TMP/tr/trainer_state.json'))['step']
assert [x['step'] for x in l][:s] == list(range(1, s + 1)), (s, l)" 2>"$TMP/err" ||
    fail "kill -9 $i during --resume: metrics.jsonl lost steps: $(tail -1 "$TMP/err")"
done
ls "$TMP/tr" | grep -q '\.tmp\.' && "$BIN" train "${tr[@]}" --save-every 1 --stop-after 1 --resume -o "$TMP/tr" 2>/dev/null
ls "$TMP/tr" | grep -q '\.tmp\.' && fail "temporaries left in the run: $(ls "$TMP/tr")"
step=$(py "import json; print(json.load(open('$TMP/tr/trainer_state.json'))['step'])")
cp "$TMP/tr/trainer_state.json" "$TMP/state.before"
poke "$TMP/tr/model.safetensors" "$(st_offset "$TMP/tr/model.safetensors" fc.weight)" 0000c07f
"$BIN" train "${tr[@]}" --save-every 1 --resume -o "$TMP/tr" 2>"$TMP/err.all"
[ $? -eq 1 ] || fail "a diverging run did not fail"
grep -q "^dspark: resuming from $TMP/tr/checkpoints/step-0*$step (step $step)" "$TMP/err.all" ||
  fail "--resume did not say which checkpoint: $(cat "$TMP/err.all")"
grep -v "^dspark: resuming from" "$TMP/err.all" >"$TMP/err"
one_line "$TMP/err" "training diverged at step $((step + 1))"
grep -qF "the checkpoint of step $step in $TMP/tr is kept" "$TMP/err" || fail "divergence message: $(cat "$TMP/err")"
cmp -s "$TMP/state.before" "$TMP/tr/trainer_state.json" || fail "the diverging run replaced the checkpoint"
py "
import json
for x in open('$TMP/tr/metrics.jsonl'): json.loads(x)" || fail "metrics.jsonl is not JSON lines"
grep -qi nan "$TMP/tr/metrics.jsonl" && fail "metrics.jsonl holds nan"
"$BIN" train "${tr[@]}" --resume -o "$TMP/empty_run" 2>"$TMP/err"
one_line "$TMP/err" "$TMP/empty_run: nothing to resume"

# 8 and 10. Token ids in a Hugging Face config: out of int range (22147483647 was read as INT_MIN)
# or outside the vocabulary are refused at load, naming the file.
/usr/bin/python3 "${DSPARK_SRC:?}/tests/reference/make_hf_llama.py" "$TMP/hf" --seed 1 --dim 32 --layers 1 --heads 2 \
  --kv-heads 1 --ffn 48 --vocab 300 >/dev/null || fail "make_hf_llama"
cp "$TMP/hf/config.json" "$TMP/config.orig"
set_cfg() { py "
import json; c=json.load(open('$TMP/config.orig')); c.update($1); json.dump(c, open('$TMP/hf/config.json', 'w'))"; }
for spec in "{'eos_token_id': 22147483647}|config.json: eos_token_id must be a token id" \
  "{'eos_token_id': [2, 1e300]}|config.json: eos_token_id must be a token id" \
  "{'eos_token_id': 300}|eos_token_id 300 is outside the vocabulary (0..299)" \
  "{'bos_token_id': 1e300}|config.json: bos_token_id must be a token id" \
  "{'bos_token_id': 4000}|bos_token_id 4000 is outside the vocabulary (0..299)"; do
  set_cfg "${spec%%|*}"
  "$BIN" generate -m "$TMP/hf" -p x -n 1 2>"$TMP/err"
  [ $? -eq 1 ] || fail "config ${spec%%|*} accepted"
  one_line "$TMP/err" "${spec#*|}"
done
cp "$TMP/config.orig" "$TMP/hf/config.json"
echo '{"eos_token_id": [1, 5000]}' >"$TMP/hf/generation_config.json"
"$BIN" generate -m "$TMP/hf" -p x -n 1 2>"$TMP/err"
one_line "$TMP/err" "stop id 5000 (eos_token_id) is outside the vocabulary (0..299)"

# 3. chat bounds a line (stdin without a newline used to grow without end), and tells a read error
# or a NUL byte from the end of input: exit 1 with one line (after the format banner).
last_line() { # last_line FILE WANT: the last line of stderr contains WANT, and no other line is an error
  tail -1 "$1" | grep -qF -- "$2" && [ "$(grep -c '^dspark: ' "$1")" -eq 2 ] || fail "expected a last line with '$2', got: $(cat "$1")"
}
tr '\0' a </dev/zero | timeout 30 "$BIN" chat -m "$MODEL" -n 2 >/dev/null 2>"$TMP/err"
[ $? -eq 1 ] || fail "chat: an endless line: exit status"
last_line "$TMP/err" "line 1 of standard input is longer than 131072 bytes"
printf 'Hello\nhi\0there\n' | "$BIN" chat -m "$MODEL" -n 2 >/dev/null 2>"$TMP/err"
[ $? -eq 1 ] || fail "chat: a NUL byte: exit status"
last_line "$TMP/err" "line 2 of standard input holds a NUL byte"
"$BIN" chat -m "$MODEL" -n 2 </ >/dev/null 2>"$TMP/err"
[ $? -eq 1 ] || fail "chat: a read error taken for the end of input"
last_line "$TMP/err" "reading standard input: Is a directory"
printf 'Hello\r\nOne more without a newline' | "$BIN" chat -m "$MODEL" -n 2 >"$TMP/out" 2>"$TMP/err" || fail "chat: $(cat "$TMP/err")"
[ "$(wc -l <"$TMP/out")" -eq 2 ] || fail "chat: two lines in, $(wc -l <"$TMP/out") replies"

# 9. A newline in a GGUF string from the file stays one line (escaped); the model name reaching JSON
# output is valid UTF-8.
cp "$MODEL" "$TMP/arch.gguf"
py "
b=bytearray(open('$TMP/arch.gguf','rb').read())
i=b.index(b'general.architecture') + len('general.architecture') + 4 + 8
assert b[i:i+5] == b'llama'; b[i+2:i+3] = b'\\n'
open('$TMP/arch.gguf','wb').write(b)"
"$BIN" generate -m "$TMP/arch.gguf" -p x -n 1 2>"$TMP/err"
one_line "$TMP/err" "architecture 'll\\nma' is not supported"

# 9 and 10. Drafter and calibration files: rms_norm_eps, layer_types, acceptance, method.
d=$TMP/drafter
cp "$d/config.json" "$TMP/dcfg.orig"
dset() { py "
import json; c=json.load(open('$TMP/dcfg.orig')); c.update($1); json.dump(c, open('$d/config.json', 'w'))"; }
for spec in "{'rms_norm_eps': -1}|config.json: rms_norm_eps must be positive" \
  "{'layer_types': []}|layer_types must list one type per layer (1), not 0" \
  "{'layer_types': ['full_attention', 'full_attention']}|layer_types must list one type per layer (1), not 2"; do
  dset "${spec%%|*}"
  "$BIN" generate -m "$MODEL" -d "$d" -p x -n 1 2>"$TMP/err"
  [ $? -eq 1 ] || fail "drafter config ${spec%%|*} accepted"
  one_line "$TMP/err" "${spec#*|}"
done
cp "$TMP/dcfg.orig" "$d/config.json"
for spec in '{"method": "sts", "temperatures": [1, 1], "acceptance": [0.5, 0.7]}|"acceptance" must not increase' \
  '{"method": "platt", "temperatures": [1, 1]}|calibration method '"'"'platt'"'"' is not supported'; do
  echo "${spec%%|*}" >"$d/calibration.json"
  "$BIN" generate -m "$MODEL" -d "$d" -p x -n 1 2>"$TMP/err"
  [ $? -eq 1 ] || fail "calibration ${spec%%|*} accepted"
  one_line "$TMP/err" "${spec#*|}"
done
echo '{"method": "sts", "temperatures": [1, 1], "acceptance": [0.7, 0.5, null]}' >"$d/calibration.json"
"$BIN" generate -m "$MODEL" -d "$d" -p x -n 1 >/dev/null 2>"$TMP/err" || fail "a valid calibration refused: $(cat "$TMP/err")"

# 10. serve: two Content-Length headers that disagree get 400, not the first one's reading.
py "
import re, socket, subprocess, sys, time
log = open('$TMP/serve.log', 'w')
p = subprocess.Popen(['$BIN', 'serve', '-m', '$MODEL', '--port', '0', '-t', '1'], stdout=subprocess.DEVNULL, stderr=log)
try:
    port = None
    for _ in range(600):
        m = re.search(r'on http://127\\.0\\.0\\.1:(\\d+) ', open('$TMP/serve.log').read())
        if m: port = int(m.group(1)); break
        time.sleep(0.05)
    assert port, open('$TMP/serve.log').read()
    def send(raw):
        s = socket.create_connection(('127.0.0.1', port), timeout=30)
        s.sendall(raw)
        s.shutdown(socket.SHUT_WR)
        out = b''
        while True:
            b = s.recv(65536)
            if not b: break
            out += b
        s.close()
        return out
    body = b'{\"prompt\": \"Once\", \"max_tokens\": 2}'
    r = send(b'POST /v1/completions HTTP/1.1\\r\\nHost: x\\r\\nContent-Type: application/json\\r\\nContent-Length: %d\\r\\n'
             b'Content-Length: %d\\r\\nConnection: close\\r\\n\\r\\n' % (len(body), len(body) + 40) + body + b' ' * 40)
    assert r.startswith(b'HTTP/1.1 400') and b'conflicting Content-Length headers' in r, r[:300]
    r = send(b'GET /health HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n')
    assert r.startswith(b'HTTP/1.1 200'), r[:200]
finally:
    p.terminate(); p.wait(30)
" 2>"$TMP/err" || fail "serve with conflicting Content-Length headers: $(tail -3 "$TMP/err")"

[ $fails -eq 0 ] && echo "all robustness CLI checks passed"
exit $((fails > 0))
