#!/usr/bin/python3
"""Our engine's logits, hidden-state taps and final hidden state on stories260K equal the
independent PyTorch reference (float64) to < 1e-4, for whole sequences and chunked feeding."""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import llama_ref  # noqa: E402
import spm_tokenizer  # noqa: E402

TOL = 1e-4
TAPS = (-1, 0, 2, 4)
PROMPTS = [
    "Once upon a time",
    "The little dog ran to the park and saw a big red ball.",
    "Lily and Tom were best friends. One day they found a box",
]


def sequences(tok, vocab):
    """(label, token ids): tokenizer prompts (BOS-started) and arbitrary ids of lengths 1..40."""
    seqs = [(f"prompt {p!r}", tok.encode(p)) for p in PROMPTS]
    rng = np.random.default_rng(1234)
    for n in (1, 2, 7, 17, 40):
        seqs.append((f"random ids n={n}", [int(i) for i in rng.integers(0, vocab, n)]))
    seqs.append(("BOS only", [tok.bos_id]))
    return seqs


def main():
    model_path = common.stories_model()
    model = llama_ref.load_gguf(model_path)
    tok = spm_tokenizer.SPMTokenizer.from_gguf(model_path)
    chk = common.Checker("logits_stories")

    for label, ids in sequences(tok, model.config.vocab_size):
        ref = llama_ref.forward(model, ids, taps=TAPS)
        chk.forward_close(label, common.ref_dump(model_path, ids, taps=TAPS), ref, TAPS, TOL)

    # No taps requested: the dump has n_taps = 0 and the rest still matches.
    ids = tok.encode(PROMPTS[0])
    ref = llama_ref.forward(model, ids)
    chk.forward_close("no taps", common.ref_dump(model_path, ids), ref, (), TOL)

    # Chunked feeding into one KV cache gives the same rows as one pass.
    ids13 = tok.encode(PROMPTS[1])[:13]
    ids40 = [int(i) for i in np.random.default_rng(99).integers(0, model.config.vocab_size, 40)]
    for ids, chunks in ((ids13, (5, 1, 7)), (ids40, (16, 1, 1, 22)), (ids40, (1,) * 40)):
        if len(ids) != sum(chunks):
            common.fail(f"test bug: chunks {chunks} do not sum to {len(ids)}")
        ref = llama_ref.forward(model, ids, taps=TAPS)
        dump = common.ref_dump(model_path, ids, taps=TAPS, chunks=chunks)
        label = f"chunks {chunks if len(chunks) < 8 else '1 x %d' % len(chunks)}"
        chk.forward_close(label, dump, ref, TAPS, TOL)

    chk.finish()


if __name__ == "__main__":
    main()
