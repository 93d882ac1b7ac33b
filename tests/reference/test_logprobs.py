#!/usr/bin/python3
"""Log-probabilities (generate --logprobs, the server's logprobs / top_logprobs) are the target's
processed log-probabilities, computed here by the PyTorch reference.

For each run, `dspark generate --json --logprobs 3` reports, per generated token, log p(token) and
the 3 most likely tokens with theirs, where p is the target's processed distribution at that
position (logit bias and OpenAI's penalties over the tokens generated before it, then temperature,
top-k, top-p / min-p; temperature 0 is reported at temperature 1). The reference recomputes p from
llama_ref's float64 logits of prompt + generated prefix and the processed() definition of
test_spec_sampling.py (written from the contract, not from our C code). With a drafter the
tokens must be the same and the numbers too (up to float rounding): they come from the target,
never from the drafter's q.

The server's `echo` with `logprobs` (completions) puts the prompt's tokens first: token 0 with null,
token i with log p(prompt_i | prompt_<i) under the same processed distribution (no history),
checked against the reference's logits of every prompt row; the generated tokens follow as without
echo, and the text is the prompt's then the completion's.

    test_logprobs.py
"""
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import llama_ref  # noqa: E402
import test_spec_sampling as tss  # noqa: E402

TOP = 3
TOL = 2e-3  # float32 engine vs float64 reference, on log-probabilities
RUNS = [
    dict(name="greedy", temp=0.0, args=[]),
    dict(name="T=0.8 top-k 20", temp=0.8, top_k=20, args=["--top-k", "20"]),
    dict(name="T=1 top-p 0.9 min-p 0.02", temp=1.0, top_p=0.9, min_p=0.02, args=["--top-p", "0.9", "--min-p", "0.02"]),
    dict(name="T=1 logit bias + penalties", temp=1.0, presence=0.5, frequency=0.8, bias={370: -100.0, 268: 2.0},
         args=["--presence-penalty", "0.5", "--frequency-penalty", "0.8", "--logit-bias", "370:-100",
               "--logit-bias", "268:2"]),
]


def run_generate(model_path, prompt_ids, cfg, extra):
    args = [common.tool("dspark"), "generate", "-m", model_path, "-p", "Tom saw a", "-n", "12", "--temp",
            repr(cfg["temp"]), "--seed", "3", "--json", "--logprobs", str(TOP), "-t", "1", *cfg["args"], *extra]
    out = json.loads(common.run(args).splitlines()[-1])
    if out["prompt_ids"] != prompt_ids:
        common.fail(f"prompt ids {out['prompt_ids']} != {prompt_ids}")
    return out


def main():
    model_path = common.stories_model()
    model = llama_ref.load_gguf(model_path)
    prompt = tss.STORY_PROMPT  # "Tom saw a"
    drafter = tss.make_drafter(model, model_path, "vanilla_bigram")
    chk = common.Checker("logprobs")
    for cfg in RUNS:
        sp = dict(temp=cfg["temp"] if cfg["temp"] > 0 else 1.0, top_k=cfg.get("top_k", 0), top_p=cfg.get("top_p", 1.0),
                  min_p=cfg.get("min_p", 0.0), presence=cfg.get("presence", 0.0), frequency=cfg.get("frequency", 0.0),
                  bias=cfg.get("bias"))
        plain = run_generate(model_path, prompt, cfg, [])
        spec = run_generate(model_path, prompt, cfg, ["-d", drafter])
        toks = plain["tokens"]
        # The same tokens; the same numbers up to float rounding (verification rows go through the
        # multi-row matmul kernel, decoding through the one-row kernel: the last bits differ).
        chk.equal(f"{cfg['name']}: the drafter changes no token", spec["tokens"], toks)
        diff = max(abs(a - b) for (la, ta), (lb, tb) in zip(spec["logprobs"], plain["logprobs"])
                   for a, b in [(la, lb)] + [(x[1], y[1]) for x, y in zip(ta, tb)])
        chk.equal(f"{cfg['name']}: the drafter changes the logprobs by {diff:.1e} (<= 1e-5) and no top id",
                  (diff <= 1e-5, [[t for t, _ in x[1]] for x in spec["logprobs"]]),
                  (True, [[t for t, _ in x[1]] for x in plain["logprobs"]]))
        worst = 0.0
        for i, (lp, top) in enumerate(plain["logprobs"]):
            logits = llama_ref.forward(model, prompt + toks[:i]).logits[-1].numpy()
            p, fragile = tss.processed(logits, **sp, hist=tuple(toks[:i]))
            if fragile:
                continue
            want = math.log(p[toks[i]])
            order = sorted(np.nonzero(p > 0)[0], key=lambda t: (-p[t], t))[:TOP]
            got_ids = [t for t, _ in top]
            chk.equal(f"{cfg['name']}: token {i}: the {TOP} most likely", got_ids, [int(t) for t in order])
            worst = max([worst, abs(lp - want)] + [abs(v - math.log(p[t])) for t, v in top])
        print(f"   {cfg['name']}: {len(toks)} tokens, largest |logprob - reference| {worst:.2e}")
        chk.equal(f"{cfg['name']}: logprobs within {TOL} of the reference", worst <= TOL, True)
    check_echo(model_path, model, chk)
    chk.finish()


def check_echo(model_path, model, chk):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli"))
    import serve_util  # noqa: E402 (starts servers on free ports, kills them on exit)
    srv = serve_util.Server("--cache-mb", "64")
    text = "Tom saw a little dog and the dog ran to the park"
    for cfg in (dict(name="echo greedy", body={"temperature": 0}, sp=dict(temp=1.0)),
                dict(name="echo T=0.8 top-k 20", body={"temperature": 0.8, "top_k": 20, "seed": 5},
                     sp=dict(temp=0.8, top_k=20))):
        for stream in (False, True):
            body = dict({"prompt": text, "max_tokens": 6, "echo": True, "logprobs": TOP}, **cfg["body"])
            plain_body = dict(body, echo=False)
            if stream:
                ev, _ = srv.stream("/v1/completions", body)
                lp = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
                out_text = ""
                for e in ev:
                    for c in e["choices"]:
                        out_text += c.get("text") or ""
                        for k in lp:
                            lp[k] += (c.get("logprobs") or {}).get(k, [])
            else:
                st, o = srv.post("/v1/completions", body)
                chk.equal(f"{cfg['name']}: status", st, 200)
                lp, out_text = o["choices"][0]["logprobs"], o["choices"][0]["text"]
            st, ref = srv.post("/v1/completions", plain_body)
            st, tk = srv.post("/tokenize", {"content": text, "add_special": True})
            ids = tk["tokens"]
            name = cfg["name"] + (" (stream)" if stream else "")
            n = len(ids)
            chk.equal(f"{name}: text = prompt + completion", out_text, text + ref["choices"][0]["text"])
            chk.equal(f"{name}: the generated tokens' logprobs follow the prompt's",
                      lp["token_logprobs"][n:], ref["choices"][0]["logprobs"]["token_logprobs"])
            chk.equal(f"{name}: {n} prompt entries, the first null", (len(lp["tokens"]) - len(ref["choices"][0]["logprobs"]["tokens"]),
                      lp["token_logprobs"][0], lp["top_logprobs"][0]), (n, None, None))
            chk.equal(f"{name}: offsets rise within the prompt", all(a <= b for a, b in zip(lp["text_offset"][:n], lp["text_offset"][1:n])) and
                      lp["text_offset"][n - 1] <= len(text), True)
            logits = llama_ref.forward(model, ids).logits.numpy()
            worst = 0.0
            for i in range(1, n):
                p, fragile = tss.processed(logits[i - 1], **cfg["sp"])
                if fragile:
                    continue
                want = math.log(p[ids[i]]) if p[ids[i]] > 0 else -9999.0
                worst = max(worst, abs(lp["token_logprobs"][i] - want))
                order = sorted(np.nonzero(p > 0)[0], key=lambda t: (-p[t], t))[:TOP]
                got = lp["top_logprobs"][i]
                chk.equal(f"{name}: prompt token {i}: {TOP} alternatives", len(got), len(order))
                worst = max([worst] + [abs(v - math.log(p[t])) for v, t in zip(sorted(got.values(), reverse=True), order)])
            print(f"   {name}: {n} prompt tokens, largest |logprob - reference| {worst:.2e}")
            chk.equal(f"{name}: prompt logprobs within {TOL} of the reference", worst <= TOL, True)
    srv.stop()


if __name__ == "__main__":
    main()
