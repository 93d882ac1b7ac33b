#!/usr/bin/python3
"""Greedy speculative decoding is lossless on quantized GGUF targets that llama.cpp's llama-quantize
wrote (../shared/models/gguf-fixtures): `dspark generate --temp 0` with a DSpark drafter gives exactly
the tokens of plain decoding.

Targets: llama-tiny Q4_K_M (Q4_K / Q5_K / Q6_K tensors), Q2_K, Q4_0 and IQ4_XS (with its Q6_K
output), stories-inflated Q4_K_M (real weights; Q5_0 attention outputs) and qwen3-tiny Q4_K_M (qwen3
architecture, q/k norms, tied Q6_K embedding, the real Qwen3 BPE tokenizer). Drafters: a fresh
`dspark init-drafter` drafter (the pairing check: tokenizer, hidden size, taps) for each, and for
stories-inflated Q4_K_M (real TinyStories weights, so next tokens follow the previous one) the bigram
drafter of test_spec_sampling.py (its Markov head holds the target's own bigram table), which drafts
chains the target accepts, so verification really keeps drafted tokens (at least MIN_ACCEPTED per run). Each with --draft-max 1, 3 and the default block.
The stories-inflated and qwen3-tiny Q4_K_M targets run again with a KV cache of halves
(DSPARK_KV_F16=1): speculation equals plain decoding on that cache too (token trees included:
--tree 2), and the bigram drafter still gets drafts accepted.
"""

import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import test_spec_sampling as tss  # noqa: E402

FIX = os.path.join(common.shared_dir(), "models", "gguf-fixtures")
TARGETS = ["llama-tiny/Q4_K_M.gguf", "llama-tiny/Q2_K.gguf", "llama-tiny/Q4_0.gguf", "llama-tiny/IQ4_XS.gguf",
           "stories-inflated/Q4_K_M.gguf", "qwen3-tiny/Q4_K_M.gguf"]
KV_F16 = ("stories-inflated/Q4_K_M.gguf", "qwen3-tiny/Q4_K_M.gguf")
PROMPTS = {"llama": ["Once upon a time", "Lily wanted to"], "qwen3": ["Hello, my name is", "def fibonacci(n):"]}
N = 40
MIN_ACCEPTED = 4  # drafted tokens the bigram drafter must get accepted per run (measured: 6-13)


def check_target(chk, rel, path, drafters, kv, env):
    """Every drafter and draft length against plain decoding on one target (KV cache of type kv)."""
    for prompt in PROMPTS["qwen3" if rel.startswith("qwen3") else "llama"]:
        plain = common.generate_json(path, prompt, N, ["--spec", "none"], env=env)
        want = plain.get("tokens")
        chk.equal(f"{rel} kv {kv} {prompt!r}: plain decoding gives {N} tokens", len(want or []), N)
        for name, ddir in drafters.items():
            for dm in ("1", "3", None) + (("tree",) if kv == "f16" else ()):
                extra = ["--spec", "dspark", "-d", ddir] + (
                    ["--tree", "2"] if dm == "tree" else ["--draft-max", dm] if dm else [])
                out = common.generate_json(path, prompt, N, extra, env=env)
                label = f"{rel} kv {kv} {prompt!r} drafter {name} draft-max {dm or 'default'}"
                chk.equal(f"{label}: tokens equal plain decoding", out.get("tokens"), want)
                if dm == "tree":
                    chk.equal(f"{label}: rounds verified a tree ({out.get('tree_rounds')})",
                              (out.get("tree_rounds") or 0) >= 1, True)
                if name == "bigram" and dm != "1":
                    accepted = round(((out.get("tau") or 0) - 1) * (out.get("rounds") or 0))
                    chk.equal(f"{label}: drafted tokens accepted ({accepted}) >= {MIN_ACCEPTED}",
                              accepted >= MIN_ACCEPTED, True)


def main():
    chk = common.Checker("gguf_spec_greedy")
    for rel in TARGETS:
        path = os.path.join(FIX, rel)
        tag = rel.replace("/", "_").replace(".gguf", "")
        drafters = {}
        d = os.path.join(common.tmp_dir(), f"gguf_spec_{tag}_init")
        shutil.rmtree(d, ignore_errors=True)
        common.run([common.tool("dspark"), "init-drafter", "-m", path, "-o", d, "--layers", "1", "--block", "4",
                    "--seed", "3"])
        drafters["init"] = d
        if rel == "stories-inflated/Q4_K_M.gguf":
            drafters["bigram"] = tss.make_drafter(tss.EngineModel(path), path, "q4k_bigram",
                                                  os.path.join(common.tmp_dir(), f"gguf_spec_{tag}_bigram"))
        for kv, env in (("f32", None), ("f16", {"DSPARK_KV_F16": "1"})):
            if kv == "f32" or rel in KV_F16:
                check_target(chk, rel, path, drafters, kv, env)
    chk.finish()


if __name__ == "__main__":
    main()
