#!/usr/bin/python3
"""Write tests/fixtures/llama_cpp_tensor_names.json: the GGUF tensor names llama.cpp knows for each
architecture dspark loads from GGUF, read from a llama.cpp checkout's own gguf-py (constants.py:
MODEL_TENSORS per architecture, TENSOR_NAMES per tensor), so that the tests check our converter, our
exporter and our loader against llama.cpp's names rather than against our own transcription of them.

    scripts/llama_cpp_tensor_names.py LLAMA_CPP_DIR [OUT.json]

Names keep llama.cpp's "{bid}" for the block number and drop the ".weight" / ".bias" / ".scale"
suffix (llama.cpp adds it where it creates the tensor). Run it again when llama.cpp's upstream
commit for the peer benchmarks (scripts/bench_peer.sh) changes."""

import json
import os
import subprocess
import sys

ARCHS = ["llama", "qwen2", "qwen3", "qwen2moe", "qwen3moe", "gemma3", "gemma4"]


def main(argv):
    if len(argv) not in (1, 2):
        sys.exit("usage: llama_cpp_tensor_names.py LLAMA_CPP_DIR [OUT.json]")
    root = argv[0]
    out = argv[1] if len(argv) == 2 else os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures",
                                                       "llama_cpp_tensor_names.json")
    sys.path.insert(0, os.path.join(root, "gguf-py"))
    from gguf.constants import MODEL_ARCH_NAMES, MODEL_TENSORS, TENSOR_NAMES
    commit = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    by_name = {name: arch for arch, name in MODEL_ARCH_NAMES.items()}
    names = {a: sorted(TENSOR_NAMES[t] for t in MODEL_TENSORS[by_name[a]]) for a in ARCHS}
    doc = {"llama_cpp_commit": commit, "source": "gguf-py/gguf/constants.py MODEL_TENSORS / TENSOR_NAMES",
           "archs": names}
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, out)
    print(out)


if __name__ == "__main__":
    main(sys.argv[1:])
