#!/usr/bin/python3
"""A DeepSpec drafter directory as the dflash GGUF file llama.cpp's `--spec-type draft-dspark` loads
(`-md`), so that both engines run the same drafter on the same target (scripts/bench_peer.sh):

    bench/drafter_gguf.py DRAFTER_DIR TARGET.gguf OUT.gguf [--outtype f32|f16|bf16]

The conversion is tests/reference/test_drafter_gguf.py's (written from the facts of llama.cpp's
converter, classes DSparkModel / DFlashModel of conversion/qwen.py at upstream 9cd719af2, and
checked there: dspark drafts bit for bit the same from the file as from the directory). As the
converter's --target-model-dir does, the drafter inherits the target's tokenizer: its
tokenizer.ggml.* keys are copied from TARGET.gguf (llama.cpp checks that draft and target
vocabularies agree). No embed_tokens / lm_head: the drafter shares the target's."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "reference"))
import gguf_py  # noqa: E402
from inflated_gguf import TYPES  # noqa: E402  (the tokenizer keys and llama.cpp's value types)
from test_drafter_gguf import deepspec_to_gguf  # noqa: E402


def main(argv):
    if len(argv) not in (3, 5) or (len(argv) == 5 and (argv[3] != "--outtype" or argv[4] not in ("f32", "f16", "bf16"))):
        sys.exit("usage: drafter_gguf.py DRAFTER_DIR TARGET.gguf OUT.gguf [--outtype f32|f16|bf16]")
    d, target, out = argv[:3]
    dtype = argv[4].upper() if len(argv) == 5 else "F32"
    tok = gguf_py.GGUFFile(target).metadata
    keys = {}
    for key, value in tok.items():
        if key in TYPES:
            vtype, kind = TYPES[key]
            keys[key] = (list(value) if kind else value, vtype)
    deepspec_to_gguf(d, out, keys=keys, dtype=dtype)
    print(out)


if __name__ == "__main__":
    main(sys.argv[1:])
