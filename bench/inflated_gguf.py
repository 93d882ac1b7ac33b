#!/usr/bin/python3
"""The inflated target of `dspark inflate` (a Hugging Face Llama directory whose SentencePiece
tokenizer sits beside it as tokenizer.gguf) as a GGUF file llama.cpp and dspark both read, so that a
memory-bound target in the quantizations CPU users run (llama-quantize Q4_K_M, ...) exists for the
benchmarks (scripts/bench_e2e_gguf.sh):

    bench/inflated_gguf.py TARGET_DIR OUT.gguf [--outtype bf16|f16|f32]

A directory without tokenizer.gguf (a synthetic shape, `bench_decode --preset qwen3-0.6b`'s) gets a
stub SentencePiece vocabulary of config.json's vocab_size tokens ("<0>", "<1>", ...; 0 unknown,
1 BOS, 2 EOS): enough for llama-bench, which never tokenizes text, to load the file.

The weights go through tests/reference/hf_to_gguf.py (the independent HF -> GGUF converter the tests
check against dspark's HF loader), the tokenizer.ggml.* keys are copied from tokenizer.gguf with
the value types llama.cpp's converter gives them."""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "reference"))
import gguf_py  # noqa: E402
import hf_to_gguf  # noqa: E402

TYPES = {
    "tokenizer.ggml.model": (gguf_py.T_STRING, None),
    "tokenizer.ggml.tokens": (gguf_py.T_STRING, "list"),
    "tokenizer.ggml.scores": (gguf_py.T_FLOAT32, "list"),
    "tokenizer.ggml.token_type": (gguf_py.T_INT32, "list"),
    "tokenizer.ggml.unknown_token_id": (gguf_py.T_UINT32, None),
    "tokenizer.ggml.bos_token_id": (gguf_py.T_UINT32, None),
    "tokenizer.ggml.eos_token_id": (gguf_py.T_UINT32, None),
    "tokenizer.ggml.seperator_token_id": (gguf_py.T_UINT32, None),
    "tokenizer.ggml.padding_token_id": (gguf_py.T_UINT32, None),
    "tokenizer.ggml.add_bos_token": (gguf_py.T_BOOL, None),
    "tokenizer.ggml.add_eos_token": (gguf_py.T_BOOL, None),
    "tokenizer.ggml.add_space_prefix": (gguf_py.T_BOOL, None),
}


def main(argv):
    if len(argv) not in (2, 4) or (len(argv) == 4 and argv[2] != "--outtype"):
        sys.exit("usage: inflated_gguf.py TARGET_DIR OUT.gguf [--outtype bf16|f16|f32]")
    src, out = argv[0], argv[1]
    outtype = argv[3] if len(argv) == 4 else None
    tok_path = os.path.join(src, "tokenizer.gguf")
    if os.path.exists(tok_path):
        tok = gguf_py.GGUFFile(tok_path).metadata
    else:
        with open(os.path.join(src, "config.json")) as f:
            n = json.load(f)["vocab_size"]
        tok = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": [f"<{i}>" for i in range(n)],
               "tokenizer.ggml.scores": [0.0] * n, "tokenizer.ggml.token_type": [3] * 3 + [1] * (n - 3),
               "tokenizer.ggml.unknown_token_id": 0, "tokenizer.ggml.bos_token_id": 1,
               "tokenizer.ggml.eos_token_id": 2}

    def edit(w):
        w.kv = [kv for kv in w.kv if not kv[0].startswith("tokenizer.ggml.")]
        for key, value in tok.items():
            if key not in TYPES:
                continue
            vtype, kind = TYPES[key]
            w.add(key, list(value) if kind else value, vtype)

    hf_to_gguf.convert(src, out, outtype=outtype, edit=edit)
    print(out)


if __name__ == "__main__":
    main(sys.argv[1:])
