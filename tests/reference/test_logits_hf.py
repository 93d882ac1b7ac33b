#!/usr/bin/python3
"""Our engine on random tiny Hugging Face Llama directories (GQA, halves RoPE) equals the
independent reference: f32 single file, f32 in 2 shards, tied embeddings, bf16 and f16 weights,
and an explicit head_dim different from hidden/heads.

For bf16/f16 the reference reads the very same rounded weights (widened exactly to float), so the
arithmetic is comparable to the f32 cases and the same 1e-4 tolerance applies."""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import llama_ref  # noqa: E402
import make_hf_llama  # noqa: E402

TOL = 1e-4
TAPS = (-1, 0, 1, 2)
BASE = dict(dim=64, layers=3, heads=4, kv_heads=2, ffn=96, vocab=300)
CASES = [  # (name, make_hf_llama overrides)
    ("f32", dict(seed=1)),
    ("f32_sharded", dict(seed=2, shards=2)),
    ("f32_tied", dict(seed=3, tied=True)),
    ("bf16", dict(seed=4, dtype="bf16")),
    ("f16", dict(seed=5, dtype="f16")),
    ("f32_head_dim", dict(seed=6, head_dim=32)),  # q/k/v width 4*32 = 128 != dim
]


def main():
    chk = common.Checker("logits_hf")
    rng = np.random.default_rng(7)
    for name, over in CASES:
        path = make_hf_llama.make_hf_llama(os.path.join(common.tmp_dir(), f"hf_{name}"), **{**BASE, **over})
        model = llama_ref.load_hf(path)
        for n, chunks in ((1, None), (9, None), (40, None), (13, (5, 1, 7))):
            ids = [int(i) for i in rng.integers(0, BASE["vocab"], n)]
            ref = llama_ref.forward(model, ids, taps=TAPS)
            dump = common.ref_dump(path, ids, taps=TAPS, chunks=chunks, tag=f"hf_{name}")
            label = f"{name} n={n}" + (f" chunks={chunks}" if chunks else "")
            chk.forward_close(label, dump, ref, TAPS, TOL)
    chk.finish()


if __name__ == "__main__":
    main()
