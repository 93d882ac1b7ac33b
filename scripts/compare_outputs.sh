#!/usr/bin/env bash
# scripts/compare_outputs.sh BIN_DIR OUT_DIR: runs every dspark command that has a deterministic
# result on the demo's small inputs (stories260K, docs/prompts/, fixed seeds, one thread, few tokens
# and steps) and stores what each prints and writes under OUT_DIR, run timings left out, so that
#   scripts/compare_outputs.sh old/bin A && scripts/compare_outputs.sh new/bin B && diff -r A B
# is empty when a refactor changed no output. About two minutes on one core.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 BIN_DIR OUT_DIR" >&2; exit 2; }
SRC=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(cd "$1" && pwd)/dspark
[ -x "$BIN" ] || { echo "compare_outputs: $BIN: not an executable" >&2; exit 2; }
OUT=$2
rm -rf "$OUT"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
SHARED=${DSPARK_SHARED:-$SRC/../shared}
# The model path is fixed (not found next to the executable) so that no output names the BIN_DIR.
export DSPARK_MODEL=${DSPARK_MODEL:-$(cd "$SHARED/models/stories260K" && pwd)/stories260K.gguf}
export DSPARK_REGISTRY=$OUT/cwd/registry
PY=/usr/bin/python3
# Everything runs in OUT/cwd with relative paths, so that no output names OUT_DIR either.
W=$OUT/cwd
mkdir -p "$W"
cd "$W"
cp "$SRC"/docs/prompts/stories-*.txt .
head -4 stories-heldout.txt >heldout4.txt
head -8 stories-train.txt >train8.txt
T=(-t 1)
run() { # NAME CMD...: stdout to OUT/NAME.out, the exit status to OUT/NAME.rc (stderr has timings)
  local name=$1
  shift
  local rc=0
  "$BIN" "$@" >"$OUT/$name.out" 2>"$W/$name.err" || rc=$?
  echo "$rc" >"$OUT/$name.rc"
}
# Keys whose values are timings (or depend on them) are dropped from JSON outputs.
strip_json() { # FILE [FILE..]: rewrite JSON / JSON-lines files in place without timing keys
  "$PY" - "$@" <<'EOF'
import json, re, sys
TIMING = re.compile(r"(tok_s|tok/s|_s$|^s$|seconds|time|wall|elapsed|speed|_ms$|^ms$|speedup|sps|rate)", re.I)
def strip(o):
    if isinstance(o, dict):
        return {k: strip(v) for k, v in o.items() if not TIMING.search(k)}
    if isinstance(o, list):
        return [strip(v) for v in o]
    return o
for path in sys.argv[1:]:
    text = open(path).read()
    try:
        docs = [json.loads(text)]
        lines = False
    except ValueError:
        docs = [json.loads(l) for l in text.splitlines() if l.strip()]
        lines = True
    out = [json.dumps(strip(d), sort_keys=True) for d in docs]
    open(path, "w").write("\n".join(out) + "\n" if lines else out[0] + "\n")
EOF
}
keep_files() { # DIR NAME: copy DIR's files (recursively) under OUT/NAME, JSON stripped of timings
  local d=$1 name=$2
  mkdir -p "$OUT/$name"
  (cd "$d" && find . -type f | LC_ALL=C sort) | while read -r f; do
    mkdir -p "$OUT/$name/$(dirname "$f")"
    cp "$d/$f" "$OUT/$name/$f"
    case "$f" in *.json | *.jsonl) strip_json "$OUT/$name/$f" ;; esac
  done
}

# --- tokenizer-level commands
run tokenize tokenize -m "$DSPARK_MODEL" "Once upon a time, there was a little dog."
run tokenize_decode tokenize -m "$DSPARK_MODEL" --decode "[1, 403, 407, 261, 378, 432, 383]"
printf '[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]' >m.json
run chat_template chat-template --template "$SRC/tests/fixtures/templates/lenml-llama3.jinja" \
  --messages m.json --bos '<|begin_of_text|>'

# --- drafter files: init-drafter, then data, training, calibration, a vocabulary
run init_drafter init-drafter -o init --layers 1 --seed 4
keep_files init init_drafter.files
run datagen datagen --prompts stories-train.txt -n 48 --max-tokens 96 --seed 1 "${T[@]}" -o data.bin
run datagen_holdout datagen --prompts train8.txt -n 12 --max-tokens 32 --seed 2 --concurrency 3 \
  --holdout 0.25 --holdout-out hold.bin "${T[@]}" -o data2.bin
run datagen_uncond datagen --unconditional -n 4 --max-tokens 24 --seed 3 --temp 0 "${T[@]}" -o data3.bin
cp data.bin data2.bin hold.bin data3.bin "$OUT/"
run train train --data data.bin -o drafter --layers 1 --block 5 --markov-rank 16 --anchors 16 --batch 4 \
  --steps 30 --lr 3e-3 --save-every 15 --seed 3 --eval-prompts heldout4.txt --eval-every 10 \
  --eval-max-tokens 24 --eval-temp 0,1 --keep-best --register "${T[@]}"
keep_files drafter train.files
run train_dflash train --data data.bin -o dflash --layers 1 --block 5 --markov-rank 0 --ce 1 --l1 0 \
  --conf 0 --anchors 8 --batch 2 --steps 3 --seed 1 "${T[@]}"
keep_files dflash train_dflash.files
run calibrate calibrate -d drafter --prompts heldout4.txt --max-tokens 24 --seed 2 "${T[@]}" -o cal.json
cp cal.json "$OUT/" && strip_json "$OUT/cal.json"
run draft_vocab draft-vocab -d init --data data.bin -k 40
cp init/draft_vocab.json "$OUT/draft_vocab.json"

# --- generation
P="Once upon a time"
run gen_greedy generate -p "$P" -n 48 --temp 0 "${T[@]}"
run gen_greedy_json generate -p "$P" -n 24 --temp 0 --json --logprobs 2 "${T[@]}"
run gen_seeded generate -p "$P" -n 48 --temp 0.8 --top-k 20 --top-p 0.9 --seed 7 "${T[@]}"
run gen_drafter generate -p "$P" -n 48 --temp 0 -d drafter "${T[@]}"
run gen_drafter_seeded generate -p "$P" -n 48 --temp 0.8 --seed 7 -d drafter "${T[@]}"
run gen_drafter_residual generate -p "$P" -n 48 --temp 0.8 --seed 7 -d drafter --verify residual --json "${T[@]}"
run gen_vocab generate -p "$P" -n 32 --temp 0 -d init --json "${T[@]}"
run gen_ngram generate -p "$P" -n 48 --temp 0 --spec ngram --json "${T[@]}"
run gen_chat generate -p "$P" -n 16 --chat --json "${T[@]}"
for f in "$OUT"/gen_*json.out "$OUT"/gen_drafter_residual.out "$OUT"/gen_vocab.out "$OUT"/gen_ngram.out "$OUT"/gen_chat.out; do
  [ -s "$f" ] && strip_json "$f"
done
printf 'Hello there\nOnce upon a time\n' | run chat chat -n 24 "${T[@]}"
printf 'Hi\n' | run chat_system chat -n 12 --system "Be kind." --temp 0.7 --seed 5 -d drafter "${T[@]}"

# --- eval: tokens and tau only (its speeds are timings)
run eval eval --prompts heldout4.txt -d drafter --max-tokens 24 --json "${T[@]}"
run eval_sampled eval --prompts heldout4.txt -d drafter --temp 1 --seed 3 --max-tokens 24 --concurrency 2 --json "${T[@]}"
run eval_ngram eval --prompts heldout4.txt --spec ngram --max-tokens 24 --json "${T[@]}"
strip_json "$OUT"/eval*.out

# --- quantize and inflate
run quantize_q4 quantize drafter/best q4 --bits 4 --group-size 32
keep_files q4 quantize_q4.files
run quantize_q8 quantize init q8 --bits 8 --group-size 64 --keep 'layers.0.*'
keep_files q8 quantize_q8.files
run quantize_gguf quantize "$DSPARK_MODEL" t.gguf --gguf Q8_0
cp t.gguf "$OUT/quantize_gguf.gguf"
run gen_q4 generate -p "$P" -n 32 --temp 0 -d q4 "${T[@]}"
run inflate inflate -d init -o big --hidden 128 --ffn 256 --layers 6 --dtype f32
keep_files big inflate.files
run gen_inflated generate -m big/target -d big/drafter -p "$P" -n 32 --temp 0 "${T[@]}"

# --- registry
run drafters drafters
sed -i "s|$W|<W>|g" "$OUT/drafters.out"

cd "$OUT"
# The stderr logs hold timings and progress; only the exit statuses are compared.
rm -rf "$W"
echo "compare_outputs: $(find "$OUT" -type f | wc -l) files in $OUT"
