#!/usr/bin/python3
"""Our tokenizer's encoding (BOS + space prefix, as for a prompt) of stories260K equals the
independent Python implementation of llama.cpp's SPM algorithm on a range of strings."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import spm_tokenizer  # noqa: E402

STRINGS = [
    "",
    " ",
    "   ",
    "Once upon a time",
    "Once upon a time, there was a little girl named Lily.",
    "The cat sat on the mat.",
    "She loved to play outside in the park. One day, she saw a big, red ball.",
    " leading space",
    "trailing space ",
    "  two leading spaces",
    "multiple   inner    spaces",
    "tab\tseparated\twords",
    "line one\nline two",
    "\n",
    "\n\nLily's mom said",
    "Hello, world!",
    "What?! No... (yes) [maybe] {ok} <tag> \"quoted\" 'single'",
    "a-b_c/d\\e|f~g`h^i",
    "1234567890",
    "3.14159 and 2,718 and 100%",
    "café",
    "naïve façade résumé",
    "日本語",
    "Привет, мир",
    "emoji 🙂 and 🚀!",
    "🤖",
    "mixed: abc日本🙂xyz",
    "ÅÆØ ñ ß ü",
    "x",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    # Runs of a letter whose doubled piece exists ("ll", "oo", "pp" in this vocabulary): equal
    # scores, so only the leftmost-first tie-break gives llama.cpp's "▁o", "oo", "o" for "oooo".
    "oooo llll ppppp ooooooo",
    "the the the the the",
    "Tom and Sue went to the store to buy some milk and bread.",
]


def main():
    model_path = common.stories_model()
    tok = spm_tokenizer.SPMTokenizer.from_gguf(model_path)
    chk = common.Checker("tokenizer_stories")
    for s in STRINGS:
        want = tok.encode(s, add_bos=True)
        got = common.tokenize_c(model_path, s)
        chk.equal(f"encoding of {s!r}", got, want)
    chk.finish()


if __name__ == "__main__":
    main()
