#!/usr/bin/python3
"""The inflated target of `dspark inflate` (a Hugging Face Llama directory whose SentencePiece
tokenizer sits beside it as tokenizer.gguf) as a GGUF file llama.cpp and dspark both read, so that a
memory-bound target in the quantizations CPU users run (llama-quantize Q4_K_M, ...) exists for the
benchmarks (scripts/bench_e2e_gguf.sh):

    bench/inflated_gguf.py TARGET_DIR OUT.gguf [--outtype bf16|f16|f32]

The weights go through tests/reference/hf_to_gguf.py (the independent HF -> GGUF converter the tests
check against dspark's HF loader), the tokenizer.ggml.* keys are copied from tokenizer.gguf with
the value types llama.cpp's converter gives them."""

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
    tok = gguf_py.GGUFFile(os.path.join(src, "tokenizer.gguf")).metadata

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
