#!/usr/bin/python3
"""The commands on a Gemma 4 E-series target: a random gemma4e checkpoint (make_hf_models.py: per-layer
embeddings, KV sharing, double-wide MLPs on the shared layers) with a tiny Gemma-style tokenizer and
chat template, 6 layers.

  - init-drafter: a Gemma4DSparkModel whose taps are the default spread (docs/architecture.md: the
    same rule as for every target, 1..L-2 here) and never a layer past the target's last but one;
  - generate: greedy text with the fresh drafter equals plain decoding;
  - datagen (text prompts) + train a few steps: greedy with the trained drafter equals plain;
  - calibrate writes calibration.json with one temperature per block slot;
  - eval --json runs both arms on held-out prompts (it checks greedy token identity itself and
    exits nonzero otherwise);
  - quantize --target (8 bits) writes a directory generate runs, keeping the PLE table's rows;
  - serve with the trained drafter: /v1/completions at temperature 0 returns generate's text, and
    /v1/chat/completions renders Gemma's turns: its prompt_tokens equals the token count of
    "<bos><start_of_turn>user\\n{content}<end_of_turn>\\n<start_of_turn>model\\n" encoded by our
    tokenizer (ds_ref_dump --tokenize)."""

import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import make_hf_models  # noqa: E402

TMP = os.path.join(common.tmp_dir(), f"g4e_cmds_{os.getpid()}")
PROMPTS = ["the cat", "a cat and the cat", "the the cat", "cat a the", "the cat sat on the mat",
           "a the cat", "the a", "cat cat the a"]


def dspark(*args, timeout=600):
    return common.run([common.tool("dspark"), *args], timeout=timeout)


def gen(model, prompt, *extra):
    return common.generate_json(model, prompt, 24, ["-t", "1", *extra])


def serve_check(chk, model, drafter, prompt, tmp=TMP):
    log = os.path.join(tmp, "serve.log")
    with open(log, "w") as err:
        p = subprocess.Popen([common.tool("dspark"), "serve", "-m", model, "-d", drafter, "--port", "0", "-t", "1"],
                             stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline, port = time.time() + 120, None
        while port is None:
            m = re.search(r"on http://127\.0\.0\.1:(\d+) ", open(log).read())
            if m:
                port = int(m.group(1))
            elif p.poll() is not None or time.time() > deadline:
                common.fail("server did not start: " + open(log).read())
            else:
                time.sleep(0.05)

        def post(path, body):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            c.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
            r = c.getresponse()
            out = (r.status, json.loads(r.read()))
            c.close()
            return out

        want = gen(model, prompt)["text"]
        st, r = post("/v1/completions", {"prompt": prompt, "max_tokens": 24, "temperature": 0})
        chk.equal("serve: /v1/completions status", st, 200)
        chk.equal("serve: completion text == dspark generate", r["choices"][0]["text"], want)
        st, r = post("/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}], "max_tokens": 8,
                                              "temperature": 0})
        chk.equal("serve: /v1/chat/completions status", st, 200)
        rendered = f"<bos><start_of_turn>user\n{prompt}<end_of_turn>\n<start_of_turn>model\n"
        chk.equal("serve: chat prompt is Gemma's turns (prompt_tokens)", r["usage"]["prompt_tokens"],
                  len(common.tokenize_c(model, rendered)))
    finally:
        p.terminate()
        p.wait(timeout=30)


def check_commands(chk, tmp, model, want_arch, want_taps, quantize=True):
    """init-drafter, generate, datagen + train, calibrate, eval, quantize --target (when `quantize`) and
    serve on `model` (a target with the tiny Gemma-style tokenizer), working under `tmp`."""
    prompts = os.path.join(tmp, "prompts.txt")
    with open(prompts, "w") as f:
        f.write("\n".join(PROMPTS) + "\n")
    fresh = os.path.join(tmp, "fresh")
    dspark("init-drafter", "-m", model, "-o", fresh, "--layers", "2", "--block", "4", "--markov-rank", "16")
    cfg = json.load(open(os.path.join(fresh, "config.json")))
    chk.equal(f"init-drafter: {want_arch}", cfg["architectures"], [want_arch])
    chk.equal("init-drafter: default taps (the uniform spread over 1..L-2)", cfg["target_layer_ids"], want_taps)
    for p in PROMPTS[:3]:
        plain = gen(model, p, "--spec", "none")
        chk.equal(f"generate {p!r}: fresh drafter == plain", gen(model, p, "-d", fresh)["tokens"], plain["tokens"])
    data = os.path.join(tmp, "data.bin")
    dspark("datagen", "-m", model, "--prompts", prompts, "-n", "8", "--max-tokens", "32", "--seed", "1", "-t", "2",
           "-o", data)
    trained = os.path.join(tmp, "trained")
    dspark("train", "-m", model, "--data", data, "--init", fresh, "--steps", "8", "--anchors", "8", "--batch", "4",
           "--lr", "3e-3", "-t", "2", "-o", trained)
    for p in PROMPTS[:3]:
        plain = gen(model, p, "--spec", "none")
        chk.equal(f"generate {p!r}: trained drafter == plain", gen(model, p, "-d", trained)["tokens"],
                  plain["tokens"])
    dspark("calibrate", "-m", model, "-d", trained, "--prompts", prompts, "--max-tokens", "24", "-t", "2")
    cal = json.load(open(os.path.join(trained, "calibration.json")))
    chk.equal("calibrate: one temperature per block slot", len(cal["temperatures"]), 4)
    ev = json.loads(dspark("eval", "-m", model, "-d", trained, "--prompts", prompts, "--max-tokens", "24",
                           "-t", "2", "--json").strip().splitlines()[-1])
    chk.equal("eval: a speedup and tau reported", all(k in json.dumps(ev) for k in ("speedup", "tau")), True)
    if quantize:
        q8 = os.path.join(tmp, "q8")
        dspark("quantize", model, q8, "--target", "--bits", "8", "--group-size", "64")
        out = gen(q8, PROMPTS[0], "-d", trained)
        chk.equal("quantize --target: the 8-bit target generates 24 tokens losslessly with the drafter",
                  (out["generated_tokens"], out["tokens"]), (24, gen(q8, PROMPTS[0], "--spec", "none")["tokens"]))
    serve_check(chk, model, trained, PROMPTS[4], tmp)
    return trained


def main():
    chk = common.Checker("gemma4e_commands")
    shutil.rmtree(TMP, ignore_errors=True)
    os.makedirs(TMP)
    try:
        model = make_hf_models.make_hf_model(os.path.join(TMP, "target"), "gemma4e", seed=51, layers=6,
                                             tokenizer=True)
        check_commands(chk, TMP, model, "Gemma4DSparkModel", [1, 2, 3, 4])
    finally:
        if chk.failures == 0:
            shutil.rmtree(TMP, ignore_errors=True)
    chk.finish()


if __name__ == "__main__":
    main()
