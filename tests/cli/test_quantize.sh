#!/usr/bin/env bash
# dspark quantize end to end on stories260K: refusals (nothing written), the drafter policy and
# layout (keep/override, both config blocks, format mlx, sharding), atomic output on failure and on
# Ctrl-C, training refuses a quantized drafter, and the acceptance A/B on a trained drafter: tau of
# 8-bit within 1% and of 4-bit within 5% of the unquantized drafter, greedy output identical to plain
# decoding. Target mode (GGUF -> HF, 8-bit) is checked against logits in
# tests/reference/test_quant_target.py; here: its greedy generation works with the carried tokenizer.
set -u
BIN=${DSPARK_BIN:?}/dspark
MODEL=${DSPARK_SHARED:?}/models/stories260K/stories260K.gguf
SRC=${DSPARK_SRC:?}
HELDOUT=$SRC/docs/prompts/stories-heldout.txt
TMP=$(cd "${DSPARK_TMP:-/tmp}" && pwd)/cli_quantize.$$
CACHE=$(cd "$DSPARK_BIN/.." && pwd)/testcache/quant # the trained drafter, made once per build dir
mkdir -p "$TMP" "$CACHE"
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
py() { /usr/bin/python3 -c "$@"; }

# refuse NAME PATTERN OUT ARGS...: must exit nonzero with one line matching PATTERN, leaving neither
# OUT nor a temporary directory next to it.
refuse() {
  local name=$1 pat=$2 out=$3
  shift 3
  if "$BIN" quantize "$@" >"$TMP/r.out" 2>"$TMP/r.err"; then
    fail "$name: accepted"
  else
    grep -q -- "$pat" "$TMP/r.err" || fail "$name: message '$(tail -1 "$TMP/r.err")' lacks '$pat'"
  fi
  [ ! -e "$out" ] || fail "$name: $out was written"
  ls -d "$out".tmp.* >/dev/null 2>&1 && fail "$name: a temporary directory was left behind"
  return 0
}

"$BIN" init-drafter -m "$MODEL" -o "$TMP/d" --layers 2 --seed 4 2>/dev/null || fail "init-drafter"

# 1. Refusals.
refuse "gguf in drafter mode" "use --target" "$TMP/o1" "$MODEL" "$TMP/o1" --bits 4 --group-size 64
refuse "bits 3" "supported are bits 4 or 8" "$TMP/o2" "$TMP/d" "$TMP/o2" --bits 3 --group-size 64
refuse "group 128" "group size 32 or 64" "$TMP/o3" "$TMP/d" "$TMP/o3" --bits 4 --group-size 128
refuse "no bits" "needs --bits" "$TMP/o4" "$TMP/d" "$TMP/o4"
mkdir -p "$TMP/exists"
"$BIN" quantize "$TMP/d" "$TMP/exists" --bits 4 --group-size 64 2>"$TMP/r.err" && fail "overwrote an existing OUT_DIR"
grep -q "already exists" "$TMP/r.err" || fail "existing OUT_DIR: $(cat "$TMP/r.err")"
# A group size that divides no tensor: a drafter-shaped directory whose only matrix is 4 x 40.
mkdir -p "$TMP/narrow"
cp "$TMP/d/config.json" "$TMP/narrow/"
py "
import json,struct,numpy as np
a=np.ones((4,40),np.float32); h=json.dumps({'fc.weight':{'dtype':'F32','shape':[4,40],'data_offsets':[0,a.nbytes]}}).encode()
h+=b' '*(-len(h)%8); open('$TMP/narrow/model.safetensors','wb').write(struct.pack('<Q',len(h))+h+a.tobytes())"
refuse "divides no tensor" "divides no eligible tensor" "$TMP/o5" "$TMP/narrow" "$TMP/o5" --bits 4 --group-size 32
# A failure half-way (a non-finite weight in a late tensor): nothing is left behind.
mkdir -p "$TMP/nan"
cp "$TMP/d/config.json" "$TMP/nan/"
py "
import sys; sys.path.insert(0,'$SRC/tests/reference')
import json,struct,numpy as np,mlx_quant_ref as r
t,_=r.read_dir('$TMP/d'); hdr={}; blobs=[]; off=0
for n,(dt,a) in sorted(t.items()):
    a=np.array(a,np.float32)
    if n=='markov_head.markov_w2.weight': a[3,5]=np.nan
    hdr[n]={'dtype':'F32','shape':list(a.shape),'data_offsets':[off,off+a.nbytes]}; off+=a.nbytes; blobs.append(a.tobytes())
h=json.dumps(hdr).encode(); h+=b' '*(-len(h)%8)
open('$TMP/nan/model.safetensors','wb').write(struct.pack('<Q',len(h))+h+b''.join(blobs))"
refuse "non-finite weight" "non-finite value" "$TMP/o6" "$TMP/nan" "$TMP/o6" --bits 8 --group-size 32

# 2. Policy and layout: keep layer 0, lm_head at 8 bits, the rest 4-bit groups of 32; sharded.
"$BIN" quantize "$TMP/d" "$TMP/q" --bits 4 --group-size 32 --keep 'layers.0.*' --override 'lm_head=8:64' \
  --max-shard-mb 0.15 >"$TMP/q.json" 2>"$TMP/q.err" || fail "quantize: $(cat "$TMP/q.err")"
grep -q "load smoke test" "$TMP/q.err" || fail "no smoke test reported on stderr"
grep -q "\[ *1/" "$TMP/q.err" || fail "no progress on stderr"
py "
import json,os,sys; sys.path.insert(0,'$SRC/tests/reference')
import mlx_quant_ref as r
d='$TMP/q'; c=json.load(open(d+'/config.json')); q=c['quantization']
assert c['quantization_config']==q and q['bits']==4 and q['group_size']==32 and q['mode']=='affine', q
assert q['confidence_head.proj'] is False and q['layers.0.self_attn.q_proj'] is False, q
assert q['lm_head']=={'bits':8,'group_size':64}, q.get('lm_head')
idx=json.load(open(d+'/model.safetensors.index.json')); shards=set(idx['weight_map'].values())
assert len(shards)>=2 and not os.path.exists(d+'/model.safetensors'), shards
t,meta=r.read_dir(d); assert meta['format']=='mlx', meta
V,H=t['lm_head.scales'][1].shape[0],64
assert t['lm_head.weight'][0]=='U32' and t['lm_head.weight'][1].shape==(V,H*8//32) and t['lm_head.scales'][1].shape==(V,1)
assert t['embed_tokens.weight'][1].shape==(V,H*4//32) and t['embed_tokens.scales'][1].shape==(V,2)
assert 'markov_head.markov_w1.scales' in t and 'layers.0.self_attn.q_proj.scales' not in t
assert t['layers.1.self_attn.q_proj.weight'][0]=='U32' and t['confidence_head.proj.weight'][0]=='F32'
assert not any(n.endswith('.scales') for n in t if n.startswith('confidence_head')) and 'norm.scales' not in t
print('layout ok: %d shards' % len(shards))" || fail "layout of the quantized drafter"
# Mixed precision (full-precision layer 0, 8-bit lm_head, 4-bit rest, sharded) runs losslessly.
mixed=$("$BIN" generate -m "$MODEL" -d "$TMP/q" -p "Once upon a time" -n 32 --temp 0 2>"$TMP/m.err") ||
  fail "generate with the mixed-precision drafter: $(cat "$TMP/m.err")"
[ "$mixed" = "$("$BIN" generate -m "$MODEL" -p "Once upon a time" -n 32 --temp 0 2>/dev/null)" ] ||
  fail "mixed-precision drafter changed the greedy output"
j=$(cat "$TMP/q.json")
py "import json; j=json.loads('''$j'''); assert j['shards']>=2 and 0<j['ratio']<0.6, j" || fail "summary: $j"

# 3. Ctrl-C during quantize: the signal is sent once the temporary directory exists (mid-run); the
# run must stop with status 130 leaving neither OUT nor the temporary directory. (If a fast machine
# finishes first, the output must be whole.)
"$BIN" init-drafter -m "$MODEL" -o "$TMP/big" --layers 64 --seed 4 2>/dev/null || fail "init-drafter (64 layers)"
"$BIN" quantize "$TMP/big" "$TMP/int" --bits 4 --group-size 64 >/dev/null 2>"$TMP/int.err" &
pid=$!
until ls -d "$TMP"/int.tmp.* >/dev/null 2>&1 || ! kill -0 $pid 2>/dev/null; do :; done
kill -INT $pid 2>/dev/null
wait $pid
rc=$?
if [ $rc -eq 130 ]; then
  [ ! -e "$TMP/int" ] || fail "Ctrl-C left $TMP/int"
  grep -q "interrupted" "$TMP/int.err" || fail "Ctrl-C message: $(tail -1 "$TMP/int.err")"
  echo "Ctrl-C: interrupted mid-run, nothing left behind"
else
  [ $rc -eq 0 ] && [ -s "$TMP/int/config.json" ] || fail "Ctrl-C: exit $rc with $(ls "$TMP" | grep int)"
  echo "Ctrl-C: the run finished before the signal"
fi
ls -d "$TMP"/int.tmp.* >/dev/null 2>&1 && fail "Ctrl-C left a temporary directory"

# 4. Training refuses a quantized drafter.
"$BIN" datagen -m "$MODEL" --prompts "$HELDOUT" -n 4 --max-tokens 16 -t 1 -o "$TMP/tiny.bin" 2>/dev/null || fail "datagen"
"$BIN" train -m "$MODEL" --data "$TMP/tiny.bin" --init "$TMP/q" -o "$TMP/tq" --steps 1 -t 1 >/dev/null 2>"$TMP/t.err" &&
  fail "train accepted a quantized drafter"
grep -q "quantized" "$TMP/t.err" || fail "train: $(cat "$TMP/t.err")"

# 5. Acceptance A/B on a trained drafter (trained once, about a minute, and cached). Training is
# not what this test checks, so it runs on the optimized build when there is one (under the
# sanitizers it would take minutes), and the sanitizer build reuses that drafter: it is only data.
trained() { [ -f "$1/trainer_state.json" ] && grep -q '"step":	200' "$1/trainer_state.json"; }
TBIN=$BIN
TCACHE=$CACHE
if [ -x "$SRC/build/bin/dspark" ]; then
  TBIN=$SRC/build/bin/dspark
  TCACHE=$SRC/build/testcache/quant
fi
D=$TCACHE/drafter
if ! trained "$D"; then
  rm -rf "$D"
  mkdir -p "$TCACHE"
  "$TBIN" datagen -m "$MODEL" --prompts "$SRC/docs/prompts/stories-train.txt" -n 200 --max-tokens 128 --temp 0.7 \
    --top-p 0.8 --top-k 20 --seed 1 -t 2 -o "$TCACHE/data.bin" 2>/dev/null || fail "datagen (A/B)"
  "$TBIN" train -m "$MODEL" --data "$TCACHE/data.bin" -o "$D" --layers 2 --block 7 --steps 200 --batch 8 --anchors 64 \
    --lr 3e-3 --seed 1 -t 2 >/dev/null 2>&1 || fail "train (A/B)"
fi
"$BIN" quantize "$D" "$TMP/q8" --bits 8 --group-size 64 >/dev/null 2>&1 || fail "quantize 8-bit"
"$BIN" quantize "$D" "$TMP/q4" --bits 4 --group-size 32 >/dev/null 2>&1 || fail "quantize 4-bit"
for v in base q8 q4; do
  dir=$D
  [ $v = base ] || dir=$TMP/$v
  "$BIN" eval -m "$MODEL" --prompts "$HELDOUT" -d "$dir" --temp 0 --max-tokens 64 -t 2 --json >"$TMP/ev_$v.json" \
    2>"$TMP/ev.err" || fail "eval $v: $(cat "$TMP/ev.err")"
done
py "
import json
b,q8,q4=(json.load(open('$TMP/ev_%s.json'%v)) for v in ('base','q8','q4'))
for n,j in (('base',b),('q8',q8),('q4',q4)): assert j['lossless_checked'] is True and j['temp']==0, (n,j)
t,t8,t4=b['tau'],q8['tau'],q4['tau']
print('tau: unquantized %.4f, 8-bit %.4f (%+.2f%%), 4-bit %.4f (%+.2f%%)'%(t,t8,100*(t8/t-1),t4,100*(t4/t-1)))
assert t>1.2, 'the drafter is not trained (tau %.3f)'%t
assert abs(t8/t-1)<=0.01, '8-bit tau off by more than 1%'
assert abs(t4/t-1)<=0.05, '4-bit tau off by more than 5%'" || fail "acceptance A/B"
plain=$("$BIN" generate -m "$MODEL" -p "Once upon a time" -n 64 --temp 0 2>/dev/null)
for v in q8 q4; do
  got=$("$BIN" generate -m "$MODEL" -d "$TMP/$v" -p "Once upon a time" -n 64 --temp 0 2>/dev/null)
  [ "$got" = "$plain" ] || fail "greedy output with the $v drafter differs from plain decoding"
done

# 6. Target mode: the GGUF written out as an HF directory, 8-bit; greedy generation with the carried tokenizer.
refuse "drafter in target mode" "quantize it with --drafter" "$TMP/o7" "$D" "$TMP/o7" --target --bits 8 --group-size 32
"$BIN" quantize "$MODEL" "$TMP/t8" --target --bits 8 --group-size 32 >/dev/null 2>"$TMP/t8.err" ||
  fail "quantize --target: $(cat "$TMP/t8.err")"
[ -s "$TMP/t8/tokenizer.gguf" ] || fail "no tokenizer.gguf"
got=$("$BIN" generate -m "$TMP/t8" -p "Once upon a time" -n 16 --temp 0 2>"$TMP/g.err") || fail "generate with the 8-bit target: $(cat "$TMP/g.err")"
case "$got" in
", there was a little girl named Lily"*) ;;
*) fail "8-bit target greedy text: '$got'" ;;
esac
# Both quantized: the 8-bit drafter on the 8-bit target, still lossless (= the target's own greedy text).
t8plain=$("$BIN" generate -m "$TMP/t8" -p "Once upon a time" -n 48 --temp 0 2>/dev/null)
t8spec=$("$BIN" generate -m "$TMP/t8" -d "$TMP/q8" -p "Once upon a time" -n 48 --temp 0 2>"$TMP/g2.err") ||
  fail "quantized drafter on the quantized target: $(cat "$TMP/g2.err")"
[ -n "$t8plain" ] && [ "$t8spec" = "$t8plain" ] || fail "speculative greedy text on the 8-bit target differs"
# The integer path on the target (DSPARK_INT8_INPUTS=1: inputs rounded to int8, kernels/qmatmul.h): its
# log-probabilities move (the rounding is real), and speculation on it is still lossless (a verified row
# is bitwise the row decoded alone on that path too).
lp() { "$BIN" generate -m "$TMP/t8" -p "Once upon a time" -n 8 --temp 0 --json --logprobs 0 2>/dev/null |
  py 'import json, sys; print(json.load(sys.stdin)["logprobs"])'; }
lp_f32=$(lp) && lp_i8=$(DSPARK_INT8_INPUTS=1 lp) || fail "generate --logprobs on the 8-bit target"
[ -n "$lp_f32" ] && [ "$lp_f32" != "$lp_i8" ] || fail "DSPARK_INT8_INPUTS=1 did not change the target's numbers"
i8plain=$(DSPARK_INT8_INPUTS=1 "$BIN" generate -m "$TMP/t8" -p "Once upon a time" -n 48 --temp 0 2>/dev/null)
i8spec=$(DSPARK_INT8_INPUTS=1 "$BIN" generate -m "$TMP/t8" -d "$TMP/q8" -p "Once upon a time" -n 48 --temp 0 2>"$TMP/g3.err") ||
  fail "quantized drafter on the int8-input target: $(cat "$TMP/g3.err")"
[ -n "$i8plain" ] && [ "$i8spec" = "$i8plain" ] || fail "speculative greedy text on the int8-input target differs"
# A GGUF Q8_0 target: its products round their inputs to int8 per block by default (llama.cpp's
# numerics, as every other GGUF block type), DSPARK_INT8_INPUTS=0 puts them on f32 inputs, =1 changes
# nothing more there (it adds MLX affine weights). Speculation is lossless on both paths.
"$BIN" quantize "$MODEL" "$TMP/s8.gguf" --gguf Q8_0 >/dev/null 2>"$TMP/s8.err" || fail "quantize --gguf Q8_0: $(cat "$TMP/s8.err")"
lpg() { "$BIN" generate -m "$TMP/s8.gguf" -p "Once upon a time" -n 8 --temp 0 --json --logprobs 0 2>/dev/null |
  py 'import json, sys; print(json.load(sys.stdin)["logprobs"])'; }
lpg_def=$(lpg) && lpg_f32=$(DSPARK_INT8_INPUTS=0 lpg) && lpg_one=$(DSPARK_INT8_INPUTS=1 lpg) ||
  fail "generate --logprobs on the Q8_0 GGUF"
[ -n "$lpg_def" ] && [ "$lpg_def" != "$lpg_f32" ] || fail "DSPARK_INT8_INPUTS=0 did not change the Q8_0 file's numbers"
[ "$lpg_def" = "$lpg_one" ] || fail "DSPARK_INT8_INPUTS=1 changed the Q8_0 file's numbers (default: int8 already)"
for v in "" 0; do
  gplain=$(DSPARK_INT8_INPUTS=$v "$BIN" generate -m "$TMP/s8.gguf" -p "Once upon a time" -n 48 --temp 0 2>/dev/null)
  gspec=$(DSPARK_INT8_INPUTS=$v "$BIN" generate -m "$TMP/s8.gguf" -d "$TMP/q8" -p "Once upon a time" -n 48 --temp 0 \
    2>"$TMP/g4.err") || fail "quantized drafter on the Q8_0 GGUF (DSPARK_INT8_INPUTS='$v'): $(tail -1 "$TMP/g4.err")"
  [ -n "$gplain" ] && [ "$gspec" = "$gplain" ] || fail "speculative greedy text on the Q8_0 GGUF differs (DSPARK_INT8_INPUTS='$v')"
done
refuse "already quantized" "already quantized" "$TMP/o8" "$TMP/t8" "$TMP/o8" --target --bits 4 --group-size 64
refuse "target in drafter mode" "use --target" "$TMP/o9" "$TMP/t8" "$TMP/o9" --bits 4 --group-size 64

[ $fails -eq 0 ] && echo "OK"
exit $((fails > 0))
