#!/usr/bin/python3
"""Our engine on random tiny Hugging Face checkpoints of every supported architecture (llama3 RoPE
scaling + attention biases, Qwen2 biases, Qwen3 q/k norms, Gemma 3 text, Gemma 3 inside
Gemma3ForConditionalGeneration, Gemma 4 text dense) equals the independent PyTorch reference
(hf_ref.py): logits, taps (embedding output and every layer) and final hidden states, on one pass
and on chunked passes through the KV cache, with sequences longer than the sliding windows.

f32 weights: max abs diff < 1e-4. bf16 weights: the reference reads the same rounded weights and
the same bf16-rounded embedding scale, computing in float64; our f32 arithmetic then stays within
1e-4 too, so the same tolerance applies (stricter than "bf16 tolerance").

A KV cache of halves (ds_model_params.kv_f16) on llama3, qwen3 and gemma4 (KV-shared layers read the
rounded cache): the reference rounds each key and value to IEEE half as it is cached, and the engine
stays within the same 1e-4 of it, while the float-cache reference lies 10x the tolerance or more away
(so the check sees whether the cache holds halves at all)."""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import hf_ref  # noqa: E402
import make_hf_models  # noqa: E402

TOL = 1e-4
TAPS = (-1, 0, 1, 2, 3)
CASES = [  # (name, arch, make_hf_model options)
    ("llama3", "llama3", dict(seed=11)),
    ("qwen2", "qwen2", dict(seed=12)),
    ("qwen3", "qwen3", dict(seed=13)),
    ("qwen3_bf16", "qwen3", dict(seed=14, dtype="bf16")),
    ("gemma3", "gemma3", dict(seed=15)),
    ("gemma3_bf16_sharded", "gemma3", dict(seed=16, dtype="bf16", shards=2)),
    ("gemma3_mm", "gemma3_mm", dict(seed=17)),
    ("gemma4", "gemma4", dict(seed=18)),
    ("gemma4_bf16", "gemma4", dict(seed=19, dtype="bf16")),
]
KV_F16 = ("llama3", "qwen3", "gemma4")


def main():
    chk = common.Checker("logits_hf_archs")
    rng = np.random.default_rng(8)
    only = sys.argv[1:]
    for name, arch, opts in CASES:
        if only and name not in only:
            continue
        path = make_hf_models.make_hf_model(os.path.join(common.tmp_dir(), f"hfa_{name}"), arch, **opts)
        model = hf_ref.load(path)
        for n, chunks in ((1, None), (23, None), (23, (9, 1, 1, 12))):
            ids = [int(i) for i in rng.integers(0, 300, n)]
            ref = hf_ref.forward(model, ids, taps=TAPS)
            dump = common.ref_dump(path, ids, taps=TAPS, chunks=chunks, tag=f"hfa_{name}")
            label = f"{name} n={n}" + (f" chunks={chunks}" if chunks else "")
            chk.forward_close(label, dump, ref, TAPS, TOL)
        if name in KV_F16:
            ids = [int(i) for i in rng.integers(0, 300, 23)]
            ref32 = hf_ref.forward(model, ids, taps=TAPS)
            ref = hf_ref.forward(model, ids, taps=TAPS, kv_half=True)
            dump = common.ref_dump(path, ids, taps=TAPS, chunks=(9, 1, 1, 12), tag=f"hfa_{name}", kv_f16=True)
            chk.forward_close(f"{name} n=23 kv f16", dump, ref, TAPS, TOL)
            gap = float(np.abs(ref.logits.numpy() - ref32.logits.numpy()).max())
            chk.equal(f"{name}: the half cache's reference is >= 10x the tolerance from the float one", gap >= 10 * TOL, True)
    chk.finish()


if __name__ == "__main__":
    main()
