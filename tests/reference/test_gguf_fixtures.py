#!/usr/bin/python3
"""dspark against llama.cpp on the GGUF files llama.cpp's own tools wrote
(../shared/models/gguf-fixtures: MANIFEST.md says how; reference.jsonl holds llama.cpp's prompt ids,
greedy continuations, top-10 log-probabilities and top-1/top-2 margins, one line per file x prompt).

For every line whose file dspark loads:
  - prompt ids: `dspark generate --json` tokenizes the prompt exactly as llama.cpp did;
  - teacher-forced log-probabilities: the prompt and llama.cpp's 32 greedy ids fed through our forward
    pass (the prompt as one chunk, then one token per forward, as decoding runs), log_softmax in double:
    at the 8 positions reference.jsonl keeps, every one of llama.cpp's top-10 ids within TOL_LP[type]
    of llama.cpp's value; at all 32 positions our top-1 log-probability within the same tolerance, and
    our argmax equal to llama.cpp's greedy id wherever llama.cpp's own top-1/top-2 margin is at least
    MARGIN (below it, two correct engines that round differently may pick either);
  - free-running greedy: `dspark generate --temp 0` gives llama.cpp's greedy ids up to the first
    position whose margin is below MARGIN.

Why the tolerances: llama.cpp keeps K and V in f16 (relative error 2^-11 per element) and, for quantized
weights, rounds every activation vector to int8 per block before the product (relative error up to
1/254 of the block's largest element per element); dspark keeps f32 K/V and its own rounding of
activations (kernels/matmul.h). Over 4-8 layers with logits of scale ~8-10 (MANIFEST.md: std(output) x
sqrt(n_embd)), the two agree to a few hundredths of a nat on 16-bit weights and Q8_0, and to about a
tenth on 4-bit types whose activation rounding llama.cpp does per 32 or 256 elements against our per-32
rounding. TOL_LP is set at about twice the largest difference measured over the public prompts (the
figures are printed, so a drift shows before it fails), MARGIN above the largest log-prob difference.
Files dspark does not load are listed with the one-line reason and fail the test only if their type
is one dspark claims to support (SUPPORTED).
"""

import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

# Types dspark must load (general.file_type names of the fixtures' files).
SUPPORTED = {"BF16", "Q8_0"}
# Absolute log-probability tolerance per file type (nats).
TOL_LP = {"BF16": 0.02, "Q8_0": 0.05}
TOL_LP_DEFAULT = 0.15
# Positions whose llama.cpp top-1/top-2 margin is below this may flip between correct engines.
MARGIN = 0.25


def fixtures_dir():
    return os.path.join(common.shared_dir(), "models", "gguf-fixtures")


def load_lines():
    path = os.path.join(fixtures_dir(), "reference.jsonl")
    if not os.path.isfile(path):
        common.fail(f"{path} not found (set DSPARK_SHARED)")
    with open(path, encoding="utf-8") as f:
        return [json.loads(ln) for ln in f if ln.strip()]


def try_generate(path, prompt, n):
    """`dspark generate --temp 0 --json`: (parsed JSON, None), or (None, stderr's last line) when it fails."""
    p = subprocess.run([common.tool("dspark"), "generate", "-m", path, "-p", prompt, "-n", str(n), "--temp", "0",
                        "--json", "-t", "1"], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
        return None, lines[-1] if lines else f"exit status {p.returncode}"
    objs = [ln for ln in p.stdout.splitlines() if ln.strip().startswith("{")]
    return json.loads(objs[-1]), None


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def first_low_margin(margins, lo):
    return next((i for i, m in enumerate(margins) if m < lo), len(margins))


def check_line(chk, ln, stats):
    path = os.path.join(fixtures_dir(), ln["file"])
    label = f"{ln['file']} {ln['prompt']!r}"
    want_ids = ln["greedy_ids"]
    n = len(want_ids)
    out, err = try_generate(path, ln["prompt"], n)
    if out is None:
        stats.setdefault("refused", {})[ln["file"]] = err
        if ln["type"] in SUPPORTED:
            chk._fail(f"{label}: dspark refuses a supported type: {err}")
        return
    stats.setdefault("loaded", set()).add(ln["file"])
    chk.equal(f"{label}: prompt ids", out.get("prompt_ids"), ln["prompt_ids"])
    margins = ln["top2_margin"]
    ok_until = first_low_margin(margins, MARGIN)
    got = out.get("tokens") or []
    chk.equal(f"{label}: greedy ids up to position {ok_until} (first margin < {MARGIN})", got[:ok_until],
              want_ids[:ok_until])

    # Teacher-forced: the prompt in one chunk, then llama.cpp's ids one per forward.
    prompt = ln["prompt_ids"]
    seq = prompt + want_ids
    dump = common.ref_dump(path, seq, chunks=[len(prompt)] + [1] * n, tag="fixture")
    lp = log_softmax(dump["logits"][len(prompt) - 1: len(prompt) - 1 + n])
    tol = TOL_LP.get(ln["type"], TOL_LP_DEFAULT)
    worst = 0.0
    for pos, top in enumerate(ln["top_logprobs"]):
        ids = [t["id"] for t in top]
        d = np.abs(lp[pos, ids] - np.array([t["logprob"] for t in top]))
        worst = max(worst, float(d.max()))
    d1 = np.abs(lp.max(axis=-1) - np.array(ln["top1_logprob_all"]))
    worst = max(worst, float(d1.max()))
    key = ln["type"]
    stats.setdefault("worst", {})[key] = max(stats.get("worst", {}).get(key, 0.0), worst)
    chk.close(f"{label}: top-10 log-probs (8 positions) and top-1 log-prob (32 positions)", worst, 0.0, tol)
    argmax = lp.argmax(axis=-1)
    for pos in range(n):
        if margins[pos] >= MARGIN and int(argmax[pos]) != want_ids[pos]:
            chk._fail(f"{label}: position {pos}: argmax {int(argmax[pos])}, llama.cpp {want_ids[pos]} "
                      f"(margin {margins[pos]:.3f})")
            break
    chk.checks += 1


def main():
    chk = common.Checker("gguf_fixtures")
    stats = {}
    lines = load_lines()
    only = os.environ.get("DS_FIXTURE_ONLY")  # e.g. "Q4_K_M": one type while developing
    for ln in lines:
        if only and ln["type"] != only:
            continue
        check_line(chk, ln, stats)
    for key, w in sorted(stats.get("worst", {}).items()):
        print(f"  {key}: largest |log-prob difference| {w:.4f} (tolerance {TOL_LP.get(key, TOL_LP_DEFAULT)})")
    for f, why in sorted(stats.get("refused", {}).items()):
        print(f"  refused {f}: {why}")
    print(f"  loaded {len(stats.get('loaded', ()))} files, refused {len(stats.get('refused', {}))}")
    chk.finish()


if __name__ == "__main__":
    main()
