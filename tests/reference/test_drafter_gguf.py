#!/usr/bin/python3
"""DSpark / DFlash drafters in the GGUF form llama.cpp's converter writes for `draft-dspark`
(convert_hf_to_gguf.py, classes DSparkModel / DFlashModel of conversion/qwen.py at upstream
9cd719af2; names from gguf-py's constants.py and tensor_mapping.py): general.architecture
"dflash", dflash.* hyper-parameters, dflash.target_layers = target_layer_ids + 1,
tokenizer.ggml.mask_token_id, the drafter's tensors renamed (fc, enc.output_norm = hidden_norm,
output_norm = norm, blk.N.attn_* / ffn_*, markov_w1 / markov_w2, conf_proj), and no embed_tokens or
lm_head (the drafter shares the target's). This test writes that file from a DeepSpec directory
(the conversion written here from those facts) and checks that dspark's drafter from the GGUF file
drafts exactly what the DeepSpec original drafts: tokens, every slot's logits and confidences, bit
for bit (ds_draft_dump on both, the same tap rows), and that broken files are refused with one line
naming the problem. Then greedy speculative decoding with the GGUF drafter equals plain decoding
and accepts what the DeepSpec drafter accepts."""
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import gguf_py  # noqa: E402
import llama_ref  # noqa: E402
import make_deepspec  # noqa: E402
import test_drafter_parity as tdp  # noqa: E402


def deepspec_to_gguf(d, path, drop=(), extra=(), arch="dflash", taps_shift=1, keys=None, dtype="F32"):
    """The conversion as llama.cpp's converter does it (tensor names, keys), into `path`; a key's
    value may be (value, GGUF value type). Matrices in `dtype` (F32, F16, BF16), 1-D tensors in F32
    (as the converter keeps norms)."""
    cfg = json.load(open(os.path.join(d, "config.json")))
    t = llama_ref.read_safetensors(os.path.join(d, "model.safetensors"))
    w = gguf_py.GGUFWriter()
    w.add("general.architecture", arch)
    w.add("dflash.block_count", cfg["num_hidden_layers"])
    w.add("dflash.context_length", cfg.get("max_position_embeddings", 2048))
    w.add("dflash.embedding_length", cfg["hidden_size"])
    w.add("dflash.feed_forward_length", cfg["intermediate_size"])
    w.add("dflash.attention.head_count", cfg["num_attention_heads"])
    w.add("dflash.attention.head_count_kv", cfg["num_key_value_heads"])
    w.add("dflash.attention.key_length", cfg["head_dim"])
    w.add("dflash.attention.value_length", cfg["head_dim"])
    w.add("dflash.attention.layer_norm_rms_epsilon", float(cfg["rms_norm_eps"]))
    w.add("dflash.rope.freq_base", float(cfg.get("rope_theta", 1e6)))
    w.add("dflash.block_size", cfg["block_size"])
    w.add("dflash.target_layers", [i + taps_shift for i in cfg["target_layer_ids"]], gguf_py.T_INT32)
    w.add("tokenizer.ggml.mask_token_id", cfg["mask_token_id"])
    for k, v in (keys or {}).items():
        w.add(k, *v) if isinstance(v, tuple) else w.add(k, v)
    names = {"fc.weight": "fc.weight", "hidden_norm.weight": "enc.output_norm.weight", "norm.weight": "output_norm.weight",
             "markov_head.markov_w1.weight": "markov_w1.weight", "markov_head.markov_w2.weight": "markov_w2.weight",
             "confidence_head.proj.weight": "conf_proj.weight", "confidence_head.proj.bias": "conf_proj.bias"}
    per_layer = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
                 "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
                 "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
                 "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
                 "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
                 "mlp.down_proj.weight": "ffn_down.weight", "self_attn.q_proj.bias": "attn_q.bias",
                 "self_attn.k_proj.bias": "attn_k.bias", "self_attn.v_proj.bias": "attn_v.bias",
                 "self_attn.o_proj.bias": "attn_output.bias"}
    for name, a in t.items():
        if name in ("embed_tokens.weight", "lm_head.weight"):
            continue  # (the converter's DSparkModel.filter_tensors drops them)
        if name.startswith("layers."):
            _, i, rest = name.split(".", 2)
            g = f"blk.{i}.{per_layer[rest]}"
        else:
            g = names[name]
        if g in drop:
            continue
        w.add_tensor(g, a, dtype if a.ndim >= 2 else "F32")
    for g, shape in extra:
        w.add_tensor(g, np.zeros(shape, np.float32), "F32")
    return w.write(path)


CASES = [  # (name, make_deepspec overrides, chunks)
    ("vanilla", dict(markov_head="vanilla", conf=True, conf_with_markov=True, seed=201), (5, 3, 1, 7)),
    ("dflash", dict(markov_head="none", conf=False, taps=(-1, 0, 3), seed=202), (4, 2, 6)),
    ("attention_bias", dict(markov_head="vanilla", conf=True, attention_bias=True, seed=203), (3, 4)),
]


def main():
    target = common.stories_model()
    chk = common.Checker("drafter_gguf")
    tmp = common.tmp_dir()
    for name, over, chunks in CASES:
        d = make_deepspec.make_deepspec(os.path.join(tmp, f"dg_{name}"), embed_from=target,
                                        **{**tdp.BASE, **over, "dtype": "f32"})
        g = deepspec_to_gguf(d, os.path.join(tmp, f"dg_{name}.gguf"))
        cfg = json.load(open(os.path.join(d, "config.json")))
        rng = np.random.default_rng(len(name) * 7 + sum(chunks))
        T, H = len(cfg["target_layer_ids"]), cfg["hidden_size"]
        rows = rng.standard_normal((sum(chunks), T * H)).astype(np.float32)
        anchors = [int(a) for a in rng.integers(0, cfg["vocab_size"], len(chunks))]
        a = tdp.run_draft_dump(target, d, rows, chunks, anchors, f"dg_{name}_dir")
        b = tdp.run_draft_dump(target, g, rows, chunks, anchors, f"dg_{name}_gguf")
        chk.equal(f"{name}: drafts", b["n"], a["n"])
        for i, (x, y) in enumerate(zip(a["drafts"], b["drafts"])):
            chk.equal(f"{name} draft {i}: tokens", y["tokens"], x["tokens"])
            chk.equal(f"{name} draft {i}: logits bit for bit", bool(np.array_equal(y["logits"], x["logits"])), True)
            chk.equal(f"{name} draft {i}: confidences bit for bit",
                      bool(np.array_equal(y["conf"], x["conf"], equal_nan=True)), True)
        if name == "vanilla":  # greedy speculation with it: lossless, and the same acceptance
            outs = []
            for drafter in (None, d, g):
                extra = ["-d", drafter, "--spec", "dspark", "--schedule", "fixed"] if drafter else []
                outs.append(common.generate_json(target, "Once upon a time", 48, extra))
            chk.equal("greedy with the GGUF drafter = plain", outs[2]["tokens"], outs[0]["tokens"])
            chk.equal("the GGUF drafter accepts what the DeepSpec one does",
                      (outs[2]["rounds"], outs[2]["tau"]), (outs[1]["rounds"], outs[1]["tau"]))

    # Broken files: one line naming the problem.
    d = os.path.join(tmp, "dg_vanilla")
    bad = [
        ("missing tensor", dict(drop=("blk.1.attn_k_norm.weight",)), "blk.1.attn_k_norm.weight"),
        ("extra tensor", dict(extra=(("blk.2.attn_norm.weight", (64,)),)), "unexpected"),
        ("not a drafter", dict(arch="llama"), "dflash"),
        ("the target's last layer as a tap", dict(taps_shift=2), "layer"),
        ("DeepSeek-V4 drafter", dict(keys={"dflash.hyper_connection.count": 4}), "DeepSeek-V4"),
    ]
    for label, kw, word in bad:
        g = deepspec_to_gguf(d, os.path.join(tmp, "dg_bad.gguf"), **kw)
        taps_in = os.path.join(tmp, "dg_bad.taps")
        np.zeros((3, 2 * 64), dtype="<f4").tofile(taps_in)
        p = subprocess.run([common.tool("ds_draft_dump"), target, g, "--taps-in", taps_in, "--chunks", "3",
                            "--anchors", "5", "--out", os.path.join(tmp, "dg_bad.bin")],
                           capture_output=True, text=True, timeout=120)
        lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
        chk.equal(f"{label}: exit 1, one line naming '{word}' ({p.stderr.strip()!r})",
                  (p.returncode, len(lines), word.lower() in p.stderr.lower() and "dg_bad.gguf" in p.stderr), (1, 1, True))
    chk.finish()


if __name__ == "__main__":
    main()
