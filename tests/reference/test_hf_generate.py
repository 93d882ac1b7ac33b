#!/usr/bin/python3
"""Hugging Face targets in generation: stop ids, greedy decoding, DeepSpec drafter pairing, and
refusals of what we do not implement.

- Stop ids: every id of config.json's eos_token_id (int or list, also a text_config's and the
  multimodal top level's) and of generation_config.json's eos_token_id stops generation
  (ds_greedy --stops lists ds_model_is_stop over the vocabulary).
- Greedy decoding through the engine equals greedy decoding with the PyTorch reference (hf_ref.py,
  recomputing the whole sequence each step) on untied Gemma 4 / Gemma 3 / Qwen3 / Qwen2 models,
  including where it stops: the reference runs until a stop id; and a generation_config.json whose
  eos list holds the reference's 11th greedy token stops our engine after exactly 10 tokens.
- A drafter made by `dspark init-drafter` for a tiny Qwen3 and a tiny Gemma 4 target loads, and
  greedy speculative decoding is token-identical to plain decoding.
- Refusals: MoE fields, per-layer input embeddings, KV sharing, attention logit softcapping, an
  unknown RoPE type, an unknown architecture: loading fails with one line naming the field."""

import json
import os
import shutil
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import hf_ref  # noqa: E402
import make_hf_models  # noqa: E402

PROMPT = [1, 5, 9, 17]
N = 30


def greedy(model_dir, n, drafter=None, prompt=PROMPT):
    args = [common.tool("ds_greedy"), model_dir, "--prompt-ids", common.ids_arg(prompt), "-n", str(n)]
    if drafter:
        args += ["--drafter", drafter]
    lines = common.run(args).splitlines()
    return [int(x) for x in lines[0].split(",") if x], lines[1]


def ref_greedy(model, stops, n, prompt=PROMPT):
    ids, out = list(prompt), []
    for _ in range(n):
        t = int(torch.argmax(hf_ref.forward(model, ids).logits[-1]))
        if t in stops:
            return out, "stopped", t
        out.append(t)
        ids.append(t)
    return out, "max", None


def stops_of(model_dir):
    return sorted(int(x) for x in common.run([common.tool("ds_greedy"), model_dir, "--stops"]).split())


def main():
    chk = common.Checker("hf_generate")
    tmp = common.tmp_dir()
    mk = make_hf_models.make_hf_model
    untied = {"tie_word_embeddings": False}
    models = {
        "gemma4": mk(os.path.join(tmp, "hfg_gemma4"), "gemma4", seed=21, config_overrides=untied),
        "gemma3": mk(os.path.join(tmp, "hfg_gemma3"), "gemma3", seed=22, config_overrides=untied),
        "qwen3": mk(os.path.join(tmp, "hfg_qwen3"), "qwen3", seed=13),
        "qwen2": mk(os.path.join(tmp, "hfg_qwen2"), "qwen2", seed=24, config_overrides=untied),
    }
    # Stop ids: config.json eos (2, or [2, 5]; Gemma3ForConditionalGeneration's top level [2, 7])
    # and generation_config.json [2, 3].
    chk.equal("qwen3 stop ids", stops_of(models["qwen3"]), [2, 3])
    chk.equal("llama3 stop ids", stops_of(mk(os.path.join(tmp, "hfg_llama3"), "llama3", seed=11)), [2, 3, 5])
    chk.equal("gemma3_mm stop ids", stops_of(mk(os.path.join(tmp, "hfg_g3mm"), "gemma3_mm", seed=17)), [2, 3, 7])

    for name, path in models.items():
        ref = hf_ref.load(path)
        want, how, _ = ref_greedy(ref, {2, 3}, N)
        got, got_how = greedy(path, N)
        chk.equal(f"{name}: greedy tokens", got, want)
        chk.equal(f"{name}: greedy end", got_how, how)
        # A generation_config.json stop id cuts generation right before it.
        seq, _, _ = ref_greedy(ref, set(), 12)
        k = next((i for i in range(10, 12) if seq[i] not in seq[:i]), None)
        if k is None:
            continue
        gc = os.path.join(path, "generation_config.json")
        with open(gc) as f:
            saved = f.read()
        with open(gc, "w") as f:
            json.dump({"eos_token_id": [seq[k]]}, f)
        model_eos = hf_ref.load(path).c["eos_token_id"]
        if seq[k] != model_eos and model_eos not in seq[:k]:
            got, got_how = greedy(path, N)
            chk.equal(f"{name}: stops at generation_config id {seq[k]}", (got, got_how), (seq[:k], "stopped"))
        with open(gc, "w") as f:
            f.write(saved)

    # DeepSpec drafters from init-drafter pair with Qwen3 and Gemma 4 targets; greedy is lossless.
    for name in ("qwen3", "gemma4"):
        d = os.path.join(tmp, f"hfg_drafter_{name}")
        shutil.rmtree(d, ignore_errors=True)
        common.run([common.tool("dspark"), "init-drafter", "-m", models[name], "-o", d, "--layers", "2",
                    "--block", "4", "--markov-rank", "16"])
        plain = greedy(models[name], N, prompt=PROMPT * 3)
        spec = greedy(models[name], N, drafter=d, prompt=PROMPT * 3)
        chk.equal(f"{name}: speculative greedy == plain greedy", spec, plain)

    # Refusals, each naming the field.
    base = models["qwen3"]
    with open(os.path.join(base, "config.json")) as f:
        cfg = json.load(f)
    bad = [
        ({"num_experts": 8}, "num_experts"),
        ({"moe_intermediate_size": 64}, "moe_intermediate_size"),
        ({"hidden_size_per_layer_input": 16}, "hidden_size_per_layer_input"),
        ({"num_kv_shared_layers": 2}, "num_kv_shared_layers"),
        ({"attn_logit_softcapping": 50.0}, "attn_logit_softcapping"),
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "yarn"),
        ({"architectures": ["MixtralForCausalLM"]}, "MixtralForCausalLM"),  # an MoE architecture we lack
        ({"architectures": ["Qwen3MoeForCausalLM"]}, "num_experts"),  # Qwen3-MoE without its experts
        ({"hidden_act": "gelu"}, "hidden_act"),
    ]
    for i, (over, field) in enumerate(bad):
        d = os.path.join(tmp, f"hfg_bad{i}")
        os.makedirs(d, exist_ok=True)
        shutil.copy(os.path.join(base, "model.safetensors"), os.path.join(d, "model.safetensors"))
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump({**cfg, **over}, f)
        p = subprocess.run([common.tool("ds_greedy"), d, "--stops"], capture_output=True, text=True, timeout=60)
        msg = p.stderr.strip()
        chk.equal(f"refuses {field}: exit status", p.returncode, 1)
        chk.equal(f"refuses {field}: one line naming the field and config.json",
                  (field in msg and "config.json" in msg and len(msg.splitlines()) == 1), True)
    chk.finish()


if __name__ == "__main__":
    main()
