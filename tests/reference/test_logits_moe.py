#!/usr/bin/python3
"""Mixture-of-experts targets (Qwen3-MoE, Qwen2-MoE with its shared expert, the Gemma 4 26B-A4B text
model) against the independent PyTorch reference (hf_ref.py, written from transformers'
modeling_qwen3_moe.py / modeling_qwen2_moe.py / modeling_gemma4.py).

Models (make_hf_models.py, 8 experts, top 2, expert width 32): qwen3_moe (norm_topk_prob, layer 1 a
dense MLP through mlp_only_layers) in f32 per-expert tensors, bf16 fused 3-D tensors and f32 mlx-lm
stacked switch_mlp tensors; qwen2_moe (shared expert on, norm_topk_prob off, decoder_sparse_step 2:
layers 0, 2 dense); gemma4_moe (dense MLP + router with scale / per_expert_scale + experts on every
layer) fused in f32 and stacked switch_glu in bf16 (expert width 64).

For each: logits, taps (the embedding output and every layer) and final hidden states within 1e-4 on
one pass, chunked through the KV cache, and chunked with three junk rows fed after every chunk and
rolled back (ds_kv_truncate); greedy decoding (ds_greedy) token-identical to the reference's argmax
loop. The three layouts of one qwen3_moe model give bit-identical dumps (they hold the same values).
The experts matter: the reference with norm_topk_prob flipped (qwen3_moe) or the shared expert gate
removed (qwen2_moe) moves the logits by far more than the tolerance.

MLX affine experts: the switch-layout models quantized the way mlx-lm checkpoints are (every 3-D
expert tensor along its last axis, 4 bits group 32 or 8 bits group 64, scales / biases in the source
dtype, the router at 8 bits group 64 through a per-module entry of the quantization block) by the
numpy quantizer of mlx_quant_ref.py; our runtime on them equals the reference on the DEQUANTIZED
weights within 1e-4 (one pass, chunked + rollback) and greedy decodes identically.

The cost profile (dspark profile) of an MoE target records the routing it was measured at: one
distinct-expert count per batch size (exactly top k at B = 1, at most min(experts, top k x B)),
moe_layers (3 of qwen3_moe's 4), n_experts and a positive expert_s (test_moe_commands loads it back
through generate --costs).

Bad configs / checkpoints are one-line errors (exit 1) naming the file and the field or tensor:
top k above the experts, an mlp_only_layers entry past the layers, a missing expert tensor, a
fused tensor of the wrong shape, a shared expert on Qwen3-MoE, and Mixtral (an MoE architecture we
do not implement) refused by name."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import hf_ref  # noqa: E402
import make_hf_models  # noqa: E402
import mlx_quant_ref as mq  # noqa: E402
from llama_ref import read_safetensors  # noqa: E402
from make_hf_llama import write_tensors  # noqa: E402

TOL = 1e-4
CASES = [  # (name, arch, make_hf_model options)
    ("qwen3_moe", "qwen3_moe", dict(seed=51)),
    ("qwen3_moe_bf16_fused", "qwen3_moe", dict(seed=52, dtype="bf16", layout="fused")),
    ("qwen3_moe_switch", "qwen3_moe", dict(seed=51, layout="switch")),
    ("qwen2_moe", "qwen2_moe", dict(seed=53)),
    ("gemma4_moe", "gemma4_moe", dict(seed=54, layout="fused")),
    ("gemma4_moe_bf16_switch", "gemma4_moe", dict(seed=55, dtype="bf16", layout="switch",
                                                   config_overrides={"moe_intermediate_size": 64})),
]
JUNK = [5, 77, 123]
N_GREEDY = 16


def ref_greedy(model, prompt, n, stops):
    ids = list(prompt)
    out = []
    for _ in range(n):
        with torch.no_grad():
            tok = int(torch.argmax(hf_ref.forward(model, ids).logits[-1]))
        if tok in stops:
            return out, "stopped"
        out.append(tok)
        ids.append(tok)
    return out, "max"


def c_greedy(path, prompt, n):
    lines = common.run([common.tool("ds_greedy"), path, "--prompt-ids", common.ids_arg(prompt), "-n",
                        str(n)]).splitlines()
    return [int(x) for x in lines[0].split(",") if x], lines[1].strip()


def stop_ids(path):
    return {int(x) for x in common.run([common.tool("ds_greedy"), path, "--stops"]).split()}


def refuse(chk, what, d, where, field):
    p = subprocess.run([common.tool("ds_greedy"), d, "--stops"], capture_output=True, text=True, timeout=60)
    msg = p.stderr.strip()
    chk.equal(f"refuses ({what}): exit status", p.returncode, 1)
    chk.equal(f"refuses ({what}): one line naming {where} and {field} ({msg!r})",
              (where in msg and field in msg and len(msg.splitlines()) == 1), True)


def bad_copy(good, i, over=None, tensors=None):
    """A copy of `good` with config overrides and/or a rewritten tensor file (name -> array or None)."""
    d = os.path.join(common.tmp_dir(), f"moe_bad{i}_{os.getpid()}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(good, "config.json")) as f:
        cfg = json.load(f)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({**cfg, **(over or {})}, f)
    if tensors is None:
        shutil.copy(os.path.join(good, "model.safetensors"), os.path.join(d, "model.safetensors"))
    else:
        t = {k: np.array(v, dtype=np.float32) for k, v in read_safetensors(os.path.join(good, "model.safetensors")).items()}
        for k, v in tensors.items():
            if v is None:
                del t[k]
            else:
                t[k] = v
        items = [(k, v.shape, None) for k, v in sorted(t.items())]
        write_tensors(os.path.join(d, "model.safetensors"), items, lambda n, s, k: t[n], "f32")
    return d


def check_refusals(chk, qwen3, qwen3_fused):
    with open(os.path.join(qwen3, "config.json")) as f:
        L = json.load(f)["num_hidden_layers"]
    cases = [
        ("top k above the experts", qwen3, {"num_experts_per_tok": 9}, None, "config.json", "num_experts_per_tok"),
        ("mlp_only_layers past the layers", qwen3, {"mlp_only_layers": [L]}, None, "config.json", "mlp_only_layers"),
        ("a missing expert tensor", qwen3, None, {"model.layers.0.mlp.experts.3.up_proj.weight": None}, None,
         "model.layers.0.mlp.experts.3.up_proj.weight"),
        ("a fused tensor of the wrong shape", qwen3_fused, None,
         {"model.layers.0.mlp.experts.down_proj": np.zeros((7, 64, 32), np.float32)}, None, "experts.down_proj"),
        ("a shared expert on Qwen3-MoE", qwen3, {"shared_expert_intermediate_size": 16}, None, "config.json",
         "shared_expert_intermediate_size"),
        ("Mixtral", qwen3, {"architectures": ["MixtralForCausalLM"], "num_local_experts": 8}, None, "config.json",
         "MixtralForCausalLM"),
    ]
    for i, (what, good, over, tensors, where, field) in enumerate(cases):  # where None: the directory
        d = bad_copy(good, i, over, tensors)
        refuse(chk, what, d, where or d, field)
        shutil.rmtree(d)


QUANT_CASES = [("qwen3_moe_switch", 4, 32), ("gemma4_moe_bf16_switch", 8, 64)]


def quantize_experts(src, dst, bits, gs):
    """An mlx-lm-style quantized copy of src (experts and router affine); returns {name: dequantized f32}."""
    os.makedirs(dst, exist_ok=True)
    t, _ = mq.read_dir(src)
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    qblock = {"group_size": gs, "bits": bits}
    out, deq = {}, {}
    for name, (dt, a) in t.items():
        router = name.endswith("mlp.gate.weight") or name.endswith("router.proj.weight")
        if not (router or (a.ndim == 3 and name.endswith(".weight"))):
            out[name] = (dt, a)
            continue
        b, g = (8, 64) if router else (bits, gs)
        module = name[: -len(".weight")]
        if router:
            qblock[module] = {"bits": b, "group_size": g}
        w = mq.as_f32(dt, a)
        flat = w.reshape(-1, w.shape[-1])
        words, scales, biases = mq.quantize(flat, b, g)
        if dt == "BF16":
            sc, bi = mq.to_bf16_bits(scales), mq.to_bf16_bits(biases)
        else:
            sc, bi = scales, biases
        lead = w.shape[:-1]
        out[name] = ("U32", words.reshape(*lead, -1))
        out[module + ".scales"] = (dt, sc.reshape(*lead, -1))
        out[module + ".biases"] = (dt, bi.reshape(*lead, -1))
        deq[name] = mq.dequantize(words, mq.as_f32(dt, sc), mq.as_f32(dt, bi), b, g, w.shape[-1]).reshape(w.shape)
    mq.write_safetensors(os.path.join(dst, "model.safetensors"), out)
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump({**cfg, "quantization": qblock}, f, indent=2)
    shutil.copy(os.path.join(src, "generation_config.json"), os.path.join(dst, "generation_config.json"))
    return deq


def check_quantized(chk, rng, name, src, bits, gs):
    dst = os.path.join(common.tmp_dir(), f"moe_{name}_q{bits}")
    deq = quantize_experts(src, dst, bits, gs)
    model = hf_ref.load(src)
    for k, v in deq.items():
        model.t[k] = torch.from_numpy(v).to(hf_ref.DT)
    taps = tuple(range(-1, model.c["num_hidden_layers"]))
    ids = [int(i) for i in rng.integers(0, 300, 12)]
    moved = float(np.abs(common.ref_dump(dst, ids, tag="moe_q0")["logits"] - hf_ref.forward(hf_ref.load(src), ids)
                         .logits.numpy()).max())
    chk.equal(f"{name} q{bits}: the experts are read quantized (moved {moved:.3g} from the source, > 100 x tol)",
              moved > 100 * TOL, True)
    for n, chunks, junk in ((23, None, None), (20, (7, 6, 7), JUNK)):
        ids = [int(i) for i in rng.integers(0, 300, n)]
        ref = hf_ref.forward(model, ids, taps=taps)
        dump = common.ref_dump(dst, ids, taps=taps, chunks=chunks, tag=f"moe_{name}_q", junk=junk)
        chk.forward_close(f"{name} q{bits}/{gs} n={n}" + (f" chunks={chunks} + rollback" if chunks else ""), dump,
                          ref, taps, TOL)
    prompt = [int(i) for i in rng.integers(4, 300, 9)]
    want = ref_greedy(model, prompt, N_GREEDY, stop_ids(dst))
    chk.equal(f"{name} q{bits}: greedy ({len(want[0])} tokens, {want[1]})", c_greedy(dst, prompt, N_GREEDY), want)


def check_profile(chk, path):
    out = os.path.join(common.tmp_dir(), f"moe_profile_{os.getpid()}.json")
    common.run([common.tool("dspark"), "profile", "-m", path, "--bmax", "12", "--ctx", "16", "--repeats", "1",
                "--quick", "-t", "1", "-o", out])
    with open(out) as f:
        j = json.load(f)
    ex = j.get("experts", [])
    chk.equal("profile: moe_layers, n_experts", (j.get("moe_layers"), j.get("n_experts")), (3, 8))
    chk.equal("profile: one expert count per batch size", len(ex), len(j["sps"]))
    chk.equal("profile: B = 1 routes to exactly top k experts", ex[:1], [2])
    chk.equal("profile: counts within [top k, min(experts, top k x B)]",
              all(2 <= e <= min(8, 2 * (b + 1)) + 1e-6 for b, e in enumerate(ex)), True)
    chk.equal("profile: expert_s > 0", j.get("expert_s", 0) > 0, True)
    os.remove(out)


def main():
    chk = common.Checker("logits_moe")
    rng = np.random.default_rng(18)
    only = sys.argv[1:]
    paths = {}
    for name, arch, opts in CASES:
        if only and name not in only:
            continue
        path = paths[name] = make_hf_models.make_hf_model(os.path.join(common.tmp_dir(), f"moe_{name}"), arch, **opts)
        model = hf_ref.load(path)
        taps = tuple(range(-1, model.c["num_hidden_layers"]))
        for n, chunks, junk in ((1, None, None), (23, None, None), (23, (9, 1, 1, 12), None),
                                (23, (9, 1, 1, 12), JUNK), (20, (7, 6, 7), JUNK)):
            ids = [int(i) for i in rng.integers(0, 300, n)]
            ref = hf_ref.forward(model, ids, taps=taps)
            dump = common.ref_dump(path, ids, taps=taps, chunks=chunks, tag=f"moe_{name}", junk=junk)
            label = f"{name} n={n}" + (f" chunks={chunks}" if chunks else "") + (" + rollback" if junk else "")
            chk.forward_close(label, dump, ref, taps, TOL)
        prompt = [int(i) for i in rng.integers(4, 300, 9)]
        want = ref_greedy(model, prompt, N_GREEDY, stop_ids(path))
        chk.equal(f"{name}: greedy ({len(want[0])} tokens, {want[1]})", c_greedy(path, prompt, N_GREEDY), want)
        if name in ("qwen3_moe", "qwen2_moe"):  # the experts' options matter far beyond the tolerance
            ids = [int(i) for i in rng.integers(0, 300, 12)]
            base = hf_ref.forward(model, ids).logits
            if name == "qwen3_moe":
                model.c["norm_topk_prob"] = False
            else:
                model.t = {k: v for k, v in model.t.items() if "shared_expert" not in k}
                model.c["shared_expert_intermediate_size"] = 0
            moved = float((hf_ref.forward(model, ids).logits - base).abs().max())
            chk.equal(f"{name}: the reference moves by {moved:.3g} without the option (> 100 x tol)", moved > 100 * TOL,
                      True)
    if "qwen3_moe" in paths and "qwen3_moe_switch" in paths:  # one model in three layouts
        fused = make_hf_models.make_hf_model(os.path.join(common.tmp_dir(), "moe_qwen3_moe_fused"), "qwen3_moe",
                                             seed=51, layout="fused")
        paths["fused"] = fused
        ids = [int(i) for i in rng.integers(0, 300, 11)]
        d = [common.ref_dump(p, ids, chunks=(6, 5), tag="moe_layout") for p in (paths["qwen3_moe"], fused,
                                                                                paths["qwen3_moe_switch"])]
        chk.equal("qwen3_moe: per-expert, fused and switch_mlp layouts give identical logits",
                  all(np.array_equal(d[0]["logits"], x["logits"]) for x in d[1:]), True)
        check_refusals(chk, paths["qwen3_moe"], fused)
    if "qwen3_moe" in paths:
        check_profile(chk, paths["qwen3_moe"])
    for name, bits, gs in QUANT_CASES:
        if name in paths:
            check_quantized(chk, rng, name, paths[name], bits, gs)
    chk.finish()


if __name__ == "__main__":
    main()
