#!/usr/bin/python3
"""The commands on mixture-of-experts targets (drafters stay dense; taps as for dense targets): a
random qwen3_moe (make_hf_models.py: 8 experts, top 2, layer 1 dense through mlp_only_layers) and a
gemma4_moe (the 26B-A4B text model: dense MLP + routed experts on every layer), 4 layers, with the
tiny Gemma-style tokenizer. test_gemma4e_commands.check_commands runs init-drafter (the default tap
spread 1..L-2), generate with a fresh and a trained drafter (greedy token-identical to plain),
datagen + train, calibrate, eval, quantize --target (8 bits: experts and routers quantized; the
quantized MoE target generates losslessly with the drafter) and serve; then, on qwen3_moe:

  - generate --schedule auto with the table `dspark profile` wrote (its MoE fields loaded back:
    ds_cost_table_load) stays token-identical to plain greedy decoding;
  - the 4-bit quantized target (group 32: every expert matrix quantized) too, speculative == plain."""

import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import make_hf_models  # noqa: E402
from test_gemma4e_commands import PROMPTS, check_commands, dspark, gen  # noqa: E402

TMP = os.path.join(common.tmp_dir(), f"moe_cmds_{os.getpid()}")


def main():
    chk = common.Checker("moe_commands")
    shutil.rmtree(TMP, ignore_errors=True)
    try:
        for arch, want in (("qwen3_moe", "Qwen3DSparkModel"), ("gemma4_moe", "Gemma4DSparkModel")):
            tmp = os.path.join(TMP, arch)
            os.makedirs(tmp)
            model = make_hf_models.make_hf_model(os.path.join(tmp, "target"), arch, seed=61, layers=4, tokenizer=True)
            trained = check_commands(chk, tmp, model, want, [1, 2])
            if arch != "qwen3_moe":
                continue
            costs = os.path.join(tmp, "costs.json")
            dspark("profile", "-m", model, "--bmax", "16", "--ctx", "32", "--repeats", "1", "--quick", "-t", "1",
                   "-o", costs)
            for p in PROMPTS[:2]:
                plain = gen(model, p, "--spec", "none")["tokens"]
                auto = gen(model, p, "-d", trained, "--schedule", "auto", "--costs", costs)
                chk.equal(f"{arch}: generate --schedule auto with the MoE cost table == plain {p!r}", auto["tokens"],
                          plain)
            q4 = os.path.join(tmp, "q4")
            dspark("quantize", model, q4, "--target", "--bits", "4", "--group-size", "32")
            for p in PROMPTS[:2]:
                chk.equal(f"{arch} 4-bit: generate with the drafter == plain {p!r}", gen(q4, p, "-d", trained)["tokens"],
                          gen(q4, p, "--spec", "none")["tokens"])
    finally:
        if chk.failures == 0:
            shutil.rmtree(TMP, ignore_errors=True)
    chk.finish()


if __name__ == "__main__":
    main()
