#!/usr/bin/python3
"""Gemma 4 E-series targets (per-layer embeddings, KV sharing, double-wide MLPs on the shared
layers, sliding and full layers with their own head dims and RoPE, final softcap) against the
independent PyTorch reference (hf_ref.py, written from transformers' modeling_gemma4.py).

Models: make_hf_models.py's gemma4e writer: f32 with 6 layers (types s s f s s f; layers 3, 4
read layer 1's cache, layer 5 reads layer 2's), bf16 with hidden 48 (sqrt(48) and sqrt(8) round
in bf16) and Gemma4ForConditionalGeneration with audio / vision towers and 7 layers (s s f s s f f,
layers 4.. shared: 4 reads 3, 5 and 6 read 2).

For each: logits, taps (the embedding output and every layer) and final hidden states within 1e-4
on one pass, on chunked passes through the KV cache (sequences longer than the sliding window 6),
and on chunked passes where three junk rows are fed after every chunk and rolled back with
ds_kv_truncate (the dump must still equal the reference on the real rows); greedy decoding
(ds_greedy) is token-identical to the reference's argmax loop.

Bad configs are one-line errors (exit 1) naming config.json / the tensor and the field: a shared
count that leaves no layer, a shared full layer with no unshared full layer before it, layer_types
of the wrong length, a PLE table of the wrong shape (hidden_size_per_layer_input or
vocab_size_per_layer_input disagreeing with the tensor), a vocab_size_per_layer_input below
vocab_size."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import hf_ref  # noqa: E402
import make_hf_models  # noqa: E402

TOL = 1e-4
CASES = [  # (name, arch, make_hf_model options)
    ("gemma4e", "gemma4e", dict(seed=41, layers=6)),
    ("gemma4e_bf16", "gemma4e", dict(seed=42, layers=6, dim=48, dtype="bf16")),
    ("gemma4e_mm", "gemma4e_mm", dict(seed=43, layers=7)),
]
JUNK = [5, 77, 123]
N_GREEDY = 16


def ref_greedy(model, prompt, n, stops):
    ids = list(prompt)
    out = []
    for _ in range(n):
        with torch.no_grad():
            tok = int(torch.argmax(hf_ref.forward(model, ids).logits[-1]))
        if tok in stops:
            return out, "stopped"
        out.append(tok)
        ids.append(tok)
    return out, "max"


def c_greedy(path, prompt, n):
    lines = common.run([common.tool("ds_greedy"), path, "--prompt-ids", common.ids_arg(prompt), "-n",
                        str(n)]).splitlines()
    return [int(x) for x in lines[0].split(",") if x], lines[1].strip()


def stop_ids(path):
    return {int(x) for x in common.run([common.tool("ds_greedy"), path, "--stops"]).split()}


def check_refusals(chk, good):
    with open(os.path.join(good, "config.json")) as f:
        cfg = json.load(f)
    L = cfg["num_hidden_layers"]
    bad = [
        ("shared count leaves no layer", {"num_kv_shared_layers": L}, "config.json", "num_kv_shared_layers"),
        ("shared full layer without a source", {"num_kv_shared_layers": L - 2}, "config.json",
         "num_kv_shared_layers"),
        ("layer_types too short", {"layer_types": cfg["layer_types"][:-1]}, "config.json", "layer_types"),
        ("PLE width disagrees with the table", {"hidden_size_per_layer_input": 4}, "embed_tokens_per_layer",
         "hidden_size_per_layer_input"),
        ("PLE vocabulary disagrees with the table", {"vocab_size_per_layer_input": cfg["vocab_size"] + 4},
         "embed_tokens_per_layer", "vocab_size_per_layer_input"),
        ("PLE vocabulary below vocab_size", {"vocab_size_per_layer_input": cfg["vocab_size"] - 1}, "config.json",
         "vocab_size_per_layer_input"),
    ]
    for i, (what, over, where, field) in enumerate(bad):
        d = os.path.join(common.tmp_dir(), f"g4e_bad{i}_{os.getpid()}")
        os.makedirs(d, exist_ok=True)
        shutil.copy(os.path.join(good, "model.safetensors"), os.path.join(d, "model.safetensors"))
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump({**cfg, **over}, f)
        p = subprocess.run([common.tool("ds_greedy"), d, "--stops"], capture_output=True, text=True, timeout=60)
        msg = p.stderr.strip()
        chk.equal(f"refuses ({what}): exit status", p.returncode, 1)
        chk.equal(f"refuses ({what}): one line naming {where} and {field} ({msg!r})",
                  (where in msg and field in msg and len(msg.splitlines()) == 1), True)
        shutil.rmtree(d)


def main():
    chk = common.Checker("logits_gemma4e")
    rng = np.random.default_rng(16)
    only = sys.argv[1:]
    first = None
    for name, arch, opts in CASES:
        if only and name not in only:
            continue
        path = make_hf_models.make_hf_model(os.path.join(common.tmp_dir(), f"g4e_{name}"), arch, **opts)
        first = first or path
        model = hf_ref.load(path)
        taps = tuple(range(-1, model.c["num_hidden_layers"]))
        for n, chunks, junk in ((1, None, None), (23, None, None), (23, (9, 1, 1, 12), None),
                                (23, (9, 1, 1, 12), JUNK), (20, (7, 6, 7), JUNK)):
            ids = [int(i) for i in rng.integers(0, 300, n)]
            ref = hf_ref.forward(model, ids, taps=taps)
            dump = common.ref_dump(path, ids, taps=taps, chunks=chunks, tag=f"g4e_{name}", junk=junk)
            label = f"{name} n={n}" + (f" chunks={chunks}" if chunks else "") + (" + rollback" if junk else "")
            chk.forward_close(label, dump, ref, taps, TOL)
        prompt = [int(i) for i in rng.integers(4, 300, 9)]
        want = ref_greedy(model, prompt, N_GREEDY, stop_ids(path))
        chk.equal(f"{name}: greedy ({len(want[0])} tokens, {want[1]})", c_greedy(path, prompt, N_GREEDY), want)
    if not only:
        check_refusals(chk, first)
    chk.finish()


if __name__ == "__main__":
    main()
