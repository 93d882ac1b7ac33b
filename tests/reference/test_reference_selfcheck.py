#!/usr/bin/python3
"""Checks of the Python references on their own (no C binaries needed):

  - gguf_py + spm_tokenizer + llama_ref (interleaved RoPE) reproduce the known greedy stories260K
    continuation of "Once upon a time" from the model's README, token for token and as text;
  - the priority-queue SPM merge equals a naive quadratic "merge the best pair, leftmost" loop;
  - make_hf_llama output round-trips through llama_ref.load_hf (single file, shards, tied,
    bf16/f16 rounding), and sharding does not change any value;
  - the halves and interleaved RoPE layouts compute the same function once Q/K rows are permuted,
    and using the wrong layout does change the result;
  - the forward pass is causal: row i of a full pass equals the last row of a pass over the prefix.
"""

import os
import re
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import gguf_py  # noqa: E402
import llama_ref  # noqa: E402
import make_hf_llama  # noqa: E402
import spm_tokenizer  # noqa: E402


def check_known_greedy(chk, model_path):
    tok = spm_tokenizer.SPMTokenizer.from_gguf(model_path)
    model = llama_ref.load_gguf(model_path)
    g = gguf_py.GGUFFile(model_path)
    chk.equal("stories260K GGUF version", g.version, 3)
    chk.equal("stories260K tensor count", len(g.tensors), 48)
    prompt_ids = tok.encode("Once upon a time")
    chk.equal("ids of 'Once upon a time'", prompt_ids, [1, 403, 407, 261, 378])
    out, _ = llama_ref.greedy_decode(model, prompt_ids, 64)
    with open(os.path.join(common.stories_dir(), "README.md"), encoding="utf-8") as f:
        block = re.search(r"```[^\n]*\n(Once upon a time.*?)\n```", f.read(), flags=re.S).group(1)
    chk.equal("greedy text of 'Once upon a time' (64 tokens)", tok.decode(out), block[len("Once upon a time"):])


def naive_merge(tok, text):
    """Quadratic SPM: repeatedly merge the best-scoring adjacent pair (leftmost on ties)."""
    syms = list(text)
    while True:
        best = None
        for i in range(len(syms) - 1):
            t = tok.piece_to_id.get(syms[i] + syms[i + 1])
            if t is not None and (best is None or tok.scores[t] > best[0]):
                best = (tok.scores[t], i)
        if best is None:
            return syms
        i = best[1]
        syms[i:i + 2] = [syms[i] + syms[i + 1]]


def check_tokenizer_vs_naive(chk, model_path):
    tok = spm_tokenizer.SPMTokenizer.from_gguf(model_path)
    rng = np.random.default_rng(5)
    normal = [p.replace("\u2581", " ") for p, t in zip(tok.pieces, tok.types) if t == spm_tokenizer.TT_NORMAL]
    alphabet = list("aeht ns.,!\n") + ["é", "日", "🙂"]
    bad = 0
    for k in range(400):
        if k % 2:
            text = "".join(normal[i] for i in rng.integers(0, len(normal), rng.integers(1, 12)))
        else:
            text = "".join(alphabet[i] for i in rng.integers(0, len(alphabet), rng.integers(1, 30)))
        marked = (" " + text).replace(" ", "\u2581")
        want = [i for s in naive_merge(tok, list(marked)) for i in tok._emit(s)]
        got = tok.encode(text, add_bos=False)
        if got != want:
            bad += 1
            chk.equal(f"heap vs naive merge of {text!r}", got, want)
    chk.equal("heap and naive SPM merges disagree on", bad, 0)


def check_hf_roundtrip(chk):
    base = dict(seed=11, dim=32, layers=2, heads=4, kv_heads=2, ffn=48, vocab=50)
    plan = make_hf_llama.tensor_plan(32, 2, 4, 2, 48, 50, 8, tied=False)
    hf_names = llama_ref.hf_to_gguf_names(2)
    single = llama_ref.load_hf(make_hf_llama.make_hf_llama(os.path.join(common.tmp_dir(), "self_single"), **base))
    sharded_dir = make_hf_llama.make_hf_llama(os.path.join(common.tmp_dir(), "self_sharded"), shards=3, **base)
    sharded = llama_ref.load_hf(sharded_dir)
    chk.equal("shard files", sorted(f for f in os.listdir(sharded_dir) if f.endswith(".safetensors")),
              ["model-%05d-of-00003.safetensors" % i for i in (1, 2, 3)])
    for name, shape, kind in plan:
        want = make_hf_llama.random_tensor(11, name, shape, kind)
        chk.close(f"f32 round trip {name}", single.w(hf_names[name]).numpy(), want, 1e-30)
        chk.close(f"sharded round trip {name}", sharded.w(hf_names[name]).numpy(), want, 1e-30)
    tied = llama_ref.load_hf(make_hf_llama.make_hf_llama(os.path.join(common.tmp_dir(), "self_tied"), tied=True, **base))
    chk.equal("tied model has no output.weight", "output.weight" in tied.weights, False)
    for dtype, torch_dtype in (("bf16", torch.bfloat16), ("f16", torch.float16)):
        m = llama_ref.load_hf(make_hf_llama.make_hf_llama(os.path.join(common.tmp_dir(), f"self_{dtype}"), dtype=dtype, **base))
        for name, shape, kind in plan:
            want = torch.from_numpy(make_hf_llama.random_tensor(11, name, shape, kind)).to(torch_dtype).double()
            chk.close(f"{dtype} round trip {name}", m.w(hf_names[name]).numpy(), want.numpy(), 1e-30)


def check_rope_layouts(chk):
    path = make_hf_llama.make_hf_llama(os.path.join(common.tmp_dir(), "self_rope"), seed=12, dim=64,
                                       layers=2, heads=4, kv_heads=2, ffn=96, vocab=100)
    halves = llama_ref.load_hf(path)
    inter = llama_ref.to_interleaved(halves)
    ids = list(range(3, 40))
    a = llama_ref.forward(halves, ids).logits
    b = llama_ref.forward(inter, ids).logits
    chk.close("halves vs permuted interleaved logits", b.numpy(), a.numpy(), 1e-10)
    wrong = llama_ref.LlamaModel(llama_ref.LlamaConfig(**{**halves.config.__dict__, "rope_layout": "interleaved"}),
                                 halves.weights)
    diff = float((llama_ref.forward(wrong, ids).logits - a).abs().max())
    chk.equal("the wrong RoPE layout changes the logits", diff > 1e-3, True)


def check_causal(chk, model_path):
    model = llama_ref.load_gguf(model_path)
    ids = [1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298]
    full = llama_ref.forward(model, ids, taps=(-1, 2)).logits
    for i in (0, 4, 10):
        chk.close(f"row {i} of a full pass vs a prefix pass", full[i].numpy(),
                  llama_ref.forward(model, ids[: i + 1]).logits[-1].numpy(), 1e-10)


def main():
    chk = common.Checker("reference_selfcheck")
    model_path = common.stories_model()
    check_known_greedy(chk, model_path)
    check_tokenizer_vs_naive(chk, model_path)
    check_hf_roundtrip(chk)
    check_rope_layouts(chk)
    check_causal(chk, model_path)
    chk.finish()


if __name__ == "__main__":
    main()
