#!/usr/bin/python3
"""`dspark generate --temp 0 --json` on stories260K: the generated ids equal the reference's greedy
decode (argmax over reference logits), and "Once upon a time" with 64 tokens reproduces the known
continuation in the model's README exactly."""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import llama_ref  # noqa: E402
import spm_tokenizer  # noqa: E402

N_NEW = 40
PROMPTS = [
    "The little dog",
    "Tom and Sue went to the",
    "One day, a big bird",
    "Lily was sad because",
]
KNOWN_PROMPT = "Once upon a time"
KNOWN_N = 64


def known_continuation():
    """The README's greedy text for KNOWN_PROMPT, minus the prompt itself."""
    readme = os.path.join(common.stories_dir(), "README.md")
    with open(readme, encoding="utf-8") as f:
        text = f.read()
    blocks = re.findall(r"```[^\n]*\n(.*?)\n```", text, flags=re.S)
    for b in blocks:
        if b.startswith(KNOWN_PROMPT):
            return b[len(KNOWN_PROMPT):]
    common.fail(f"{readme}: no code block starting with {KNOWN_PROMPT!r}")


def check_prompt(chk, model, tok, model_path, prompt, n):
    prompt_ids = tok.encode(prompt)
    want, margins = llama_ref.greedy_decode(model, prompt_ids, n)
    if tok.eos_id in want:  # the CLI's stop-at-EOS behaviour is not what this test is about
        common.fail(f"test bug: the reference reaches EOS within {n} tokens of {prompt!r}; pick another prompt")
    out = common.generate_json(model_path, prompt, n)
    chk.equal(f"{prompt!r}: prompt_ids", out.get("prompt_ids"), prompt_ids)
    got = out.get("tokens")
    if not chk.equal(f"{prompt!r}: generated tokens", got, want) and isinstance(got, list):
        k = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        if k < len(margins):
            print(f"   first difference at step {k}; reference top-2 logit gap there {margins[k]:.2e}",
                  file=sys.stderr)
    chk.equal(f"{prompt!r}: generated_tokens", out.get("generated_tokens"), n)
    chk.equal(f"{prompt!r}: prompt_tokens", out.get("prompt_tokens"), len(prompt_ids))
    return out


def main():
    model_path = common.stories_model()
    model = llama_ref.load_gguf(model_path)
    tok = spm_tokenizer.SPMTokenizer.from_gguf(model_path)
    chk = common.Checker("greedy_stories")
    for p in PROMPTS:
        check_prompt(chk, model, tok, model_path, p, N_NEW)
    out = check_prompt(chk, model, tok, model_path, KNOWN_PROMPT, KNOWN_N)
    chk.equal(f"{KNOWN_PROMPT!r}: text", out.get("text"), known_continuation())
    chk.finish()


if __name__ == "__main__":
    main()
