#!/usr/bin/python3
"""`dspark quantize --target` on every Hugging Face architecture the loader runs (llama3 RoPE scaling +
attention biases, Qwen2 q/k/v biases + tied embeddings, Qwen3 q/k norms, Gemma 3 text, Gemma 3 inside
Gemma3ForConditionalGeneration, Gemma 4 with K = V global layers of a larger head_dim, the Gemma 4
E-series with 8 layers (per-layer embeddings 8 wide: the table and per_layer_model_projection are 64
wide, so they are quantized; KV sharing; inside Gemma4ForConditionalGeneration with audio / vision
towers, whose 6 tensors are dropped), from f32 and bf16 sources, at 8 bits (group 64) and 4 bits
(group 32).

1. The directory (read with the numpy reader of mlx_quant_ref.py): every 2-D text-model matrix whose
   input width the group size divides (projections, MLP, embed_tokens, lm_head) is packed U32 with
   scales/biases in the source dtype, bit-identical to the numpy reference quantizer; the others are
   copied unchanged and marked `false` in the config; 1-D tensors (norms, biases, layer_scalar) are
   unchanged; tensors the loader never reads (a vision tower) are dropped; config.json is the source's
   plus the two quantization blocks; the small side files are copied byte for byte.
2. Our runtime on the quantized directory (ds_ref_dump) equals the PyTorch reference (hf_ref.py) run on
   weights DEQUANTIZED in numpy from the stored words/scales/biases: logits and final hidden states
   within 1e-4 (max abs), one pass and chunked through the KV cache. This proves the runtime computes
   exactly the quantized model (a matrix read unquantized, a wrong group order or a wrong embedding
   gather moves logits by far more).
3. Sanity at 8 bits: logits stay within a small fraction of their spread from the ORIGINAL weights'.
4. Greedy generation (ds_greedy) on quantized targets equals the dequantized reference's greedy ids.

Mixture-of-experts targets (qwen3_moe, qwen2_moe with its shared expert, gemma4_moe) in every expert
layout: a 3-D expert stack is quantized as (experts, rows, cols) with scales / biases (experts,
rows, G), its module being "<name without .weight>" (switch_mlp) or the bare parameter itself
(experts.gate_up_proj); routers (mlp.gate, mlp.shared_expert_gate, router.proj) get 8 bits at the
run's group size (recorded per module in the config) when the run asks for fewer."""

import json
import os
import shutil
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import hf_ref  # noqa: E402
import make_hf_models  # noqa: E402
import mlx_quant_ref as mq  # noqa: E402

TOL = 1e-4
CASES = [  # (name, make_hf_models arch, options)
    ("llama3", "llama3", dict(seed=21)),
    ("llama3_bf16", "llama3", dict(seed=22, dtype="bf16")),
    ("qwen2", "qwen2", dict(seed=23)),
    ("qwen2_bf16", "qwen2", dict(seed=24, dtype="bf16", shards=2)),
    ("qwen3", "qwen3", dict(seed=25)),
    ("qwen3_bf16", "qwen3", dict(seed=26, dtype="bf16")),
    ("gemma3", "gemma3", dict(seed=27)),
    ("gemma3_mm_bf16", "gemma3_mm", dict(seed=28, dtype="bf16")),
    ("gemma4", "gemma4", dict(seed=29)),
    ("gemma4_bf16", "gemma4", dict(seed=30, dtype="bf16")),
    ("gemma4e", "gemma4e", dict(seed=31, layers=8)),
    ("gemma4e_mm_bf16", "gemma4e_mm", dict(seed=32, layers=8, dtype="bf16")),
    # mixture of experts, in every expert layout the loader reads (per expert 2-D, fused 3-D
    # gate_up_proj / down_proj, mlx-lm's stacked switch_mlp); sharded so a module's weight, scales and
    # biases can land in different files (SHARDED)
    ("qwen3_moe", "qwen3_moe", dict(seed=33)),
    ("qwen3_moe_fused_bf16", "qwen3_moe", dict(seed=34, dtype="bf16", layout="fused", shards=2)),
    ("qwen2_moe_switch", "qwen2_moe", dict(seed=35, layout="switch")),
    ("gemma4_moe_bf16", "gemma4_moe", dict(seed=36, dtype="bf16")),
]
SHARDED = ("qwen3_moe_fused_bf16",)  # output written in small shards
DROPPED = {"gemma3_mm": 3, "gemma4e_mm": 6}  # tower / projector tensors the loader never reads
SETTINGS = ((8, 64), (4, 32))
GREEDY = ("llama3", "qwen3_bf16", "qwen3_moe")  # greedy checked on these (untied: tied tiny random models just repeat)
SIDE_FILES = {"tokenizer_config.json": '{"model_max_length": 4096, "padding_side": "left"}\n',
              "special_tokens_map.json": '{"bos_token": "<s>"}\n'}
PROMPT = [1, 5, 9, 17]


def check_dir(chk, label, src, out, bits, gs):
    """Part 1; returns the dequantized tensors {name: float32 array} of the quantized matrices."""
    s, _ = mq.read_dir(src)
    q, meta = mq.read_dir(out)
    chk.equal(f"{label}: metadata format", meta.get("format"), "mlx")
    cfg_src = json.load(open(os.path.join(src, "config.json")))
    cfg = json.load(open(os.path.join(out, "config.json")))
    qb = cfg.pop("quantization", None)
    chk.equal(f"{label}: quantization_config == quantization", cfg.pop("quantization_config", None), qb)
    chk.equal(f"{label}: config.json is the source's plus the blocks", cfg, cfg_src)
    chk.equal(f"{label}: defaults", (qb or {}).get("bits"), bits)
    chk.equal(f"{label}: group_size", (qb or {}).get("group_size"), gs)
    for fn in list(SIDE_FILES) + ["generation_config.json"]:
        chk.equal(f"{label}: {fn} copied", open(os.path.join(out, fn), "rb").read(),
                  open(os.path.join(src, fn), "rb").read())
    prefix = next(p for p in ("model.language_model.", "model.") if p + "embed_tokens.weight" in s)
    deq, n_quant = {}, 0
    for name, (dt, a) in sorted(s.items()):
        text = name.startswith(prefix) or name == "lm_head.weight"
        if not text:
            chk.equal(f"{label}: {name} (never read) dropped", name in q, False)
            continue
        mod = name[:-len(".weight")] if name.endswith(".weight") else name if a.ndim == 3 else None
        router = mod is not None and mod.endswith((".mlp.gate", ".mlp.shared_expert_gate", ".router.proj"))
        mb = 8 if router else bits  # routers: 8 bits
        if a.ndim in (2, 3) and a.shape[-1] % gs == 0:
            n_quant += 1
            if not chk.equal(f"{label}: {name} quantized", (q.get(name, ("?",))[0], mod + ".scales" in q),
                             ("U32", True)):
                continue
            chk.equal(f"{label}: {mod} config entry", qb.get(mod), {"bits": 8, "group_size": gs} if mb != bits else None)
            cols = a.shape[-1]
            words, sc, bi = mq.quantize(mq.as_f32(dt, a).reshape(-1, cols), mb, gs)
            if dt == "BF16":
                sc, bi = mq.to_bf16_bits(sc), mq.to_bf16_bits(bi)
            lead = a.shape[:-1]
            chk.equal(f"{label}: {name} packed shape", q[name][1].shape, lead + (cols * mb // 32,))
            chk.equal(f"{label}: {name} scales shape", q[mod + ".scales"][1].shape, lead + (cols // gs,))
            chk.equal(f"{label}: {name} words == numpy reference",
                      np.array_equal(q[name][1].reshape(words.shape), words), True)
            chk.equal(f"{label}: {name} scales dtype", (q[mod + ".scales"][0], q[mod + ".biases"][0]), (dt, dt))
            chk.equal(f"{label}: {name} scales/biases == numpy reference",
                      np.array_equal(q[mod + ".scales"][1].reshape(sc.shape), sc) and
                      np.array_equal(q[mod + ".biases"][1].reshape(bi.shape), bi), True)
            deq[name] = mq.dequantize(q[name][1].reshape(words.shape),
                                      mq.as_f32(dt, q[mod + ".scales"][1]).reshape(sc.shape),
                                      mq.as_f32(dt, q[mod + ".biases"][1]).reshape(bi.shape), mb, gs,
                                      cols).reshape(a.shape)
        else:
            got = q.get(name)
            chk.equal(f"{label}: {name} copied unchanged",
                      got is not None and got[0] == dt and np.array_equal(got[1], a), True)
            if a.ndim >= 2 and mod is not None:
                chk.equal(f"{label}: {name} marked false", qb.get(mod), False)
    for name in q:
        chk.equal(f"{label}: {name} has a source", name in s or name.endswith((".scales", ".biases")), True)
    chk.equal(f"{label}: something quantized", n_quant > 0, True)
    return deq


def dequantized_model(src, deq):
    """hf_ref's model of the source with the quantized matrices replaced by their dequantized values."""
    m = hf_ref.load(src)
    for name, w in deq.items():
        m.t[name] = torch.from_numpy(w.astype(np.float64))
    return m


def ref_greedy(model, stops, n, prompt=PROMPT):
    ids, out = list(prompt), []
    for _ in range(n):
        t = int(torch.argmax(hf_ref.forward(model, ids).logits[-1]))
        if t in stops:
            return out, "stopped"
        out.append(t)
        ids.append(t)
    return out, "max"


def main():
    chk = common.Checker("quant_target_archs")
    only = sys.argv[1:]
    dspark = common.tool("dspark")
    tmp = os.path.join(common.tmp_dir(), "qta.%d" % os.getpid())
    shutil.rmtree(tmp, ignore_errors=True)
    rng = np.random.default_rng(5)
    ids = [int(i) for i in rng.integers(0, 300, 19)]
    try:
        for name, arch, opts in CASES:
            if only and name not in only:
                continue
            src = make_hf_models.make_hf_model(os.path.join(tmp, name), arch, **opts)
            for fn, text in SIDE_FILES.items():
                with open(os.path.join(src, fn), "w") as f:
                    f.write(text)
            orig = hf_ref.forward(hf_ref.load(src), ids).logits.numpy()
            for bits, gs in SETTINGS:
                label = f"{name} q{bits} g{gs}"
                out = os.path.join(tmp, f"{name}_q{bits}")
                shard = ["--max-shard-mb", "0.02"] if name in SHARDED else []
                res = json.loads(common.run([dspark, "quantize", src, out, "--target", "--bits", str(bits),
                                             "--group-size", str(gs)] + shard).strip().splitlines()[-1])
                if shard:  # 20 KiB shards: a module's words, scales and biases fall into different files
                    chk.equal(f"{label}: written in shards", res["shards"] > 3, True)
                chk.equal(f"{label}: reported dropped tensors", res["dropped"], DROPPED.get(arch, 0))
                deq = check_dir(chk, label, src, out, bits, gs)
                ref = hf_ref.forward(dequantized_model(src, deq), ids)
                for chunks in (None, (7, 1, 11)):
                    dump = common.ref_dump(out, ids, chunks=chunks, tag="qta")
                    lab = label + (f" chunks={chunks}" if chunks else "")
                    chk.close(f"{lab}: logits vs dequantized reference", dump["logits"], ref.logits.numpy(), TOL)
                    chk.close(f"{lab}: final hidden vs dequantized reference", dump["hidden"], ref.hidden.numpy(), TOL)
                d = np.abs(dump["logits"] - orig)
                print(f"{label}: vs original weights |dlogit| max {d.max():.4f}, mean {d.mean():.4f}, "
                      f"logit std {orig.std():.3f}")
                if bits == 8 and "moe" in name:
                    # A router's top k flips where two experts nearly tie (8 random experts, top 2): the
                    # positions it happens at move by a whole expert's output (seen: 1-2 of 19 at 0.25-0.77
                    # std, the others <= 0.17), so MoE targets are held to the dense bound position-wise.
                    pos = d.max(axis=1) / orig.std()
                    print(f"{label}: per-position max |d| / std: {np.round(np.sort(pos), 3).tolist()}")
                    chk.equal(f"{label}: 8-bit logits near the original's at >= 80% of positions (max |d| <= 0.2 std)",
                              bool((pos <= 0.2).mean() >= 0.8), True)
                elif bits == 8:  # tiny random models: 8 bits move logits ~1% of their spread on average
                    chk.equal(f"{label}: 8-bit logits near the original's (max |d| <= 0.15 std, mean <= 0.025 std)",
                              bool(d.max() <= 0.15 * orig.std() and d.mean() <= 0.025 * orig.std()), True)
                if bits == 4 and name in GREEDY:
                    lines = common.run([common.tool("ds_greedy"), out, "--prompt-ids", common.ids_arg(PROMPT),
                                        "-n", "16"]).splitlines()
                    got = ([int(x) for x in lines[0].split(",") if x], lines[1])
                    stops = {int(x) for x in common.run([common.tool("ds_greedy"), out, "--stops"]).split()}
                    chk.equal(f"{label}: generation_config stop ids kept", {2, 3} <= stops, True)
                    want = ref_greedy(dequantized_model(src, deq), stops, 16)
                    print(f"{label}: greedy {got[0]} ({got[1]})")
                    chk.equal(f"{label}: greedy ids == dequantized reference", got, want)
                    chk.equal(f"{label}: greedy varies (>= 4 distinct ids)", len(set(got[0])) >= 4, True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    chk.finish()


if __name__ == "__main__":
    main()
