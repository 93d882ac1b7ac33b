#!/usr/bin/python3
"""Write a tiny random DeepSpec drafter directory (DSpark / DFlash), exactly in the DeepSpec format.

    make_deepspec.py OUT --style qwen3|gemma4 --hidden 64 --vocab 512 --layers 2 --heads 4 \
        --kv-heads 2 --head-dim 16 --ffn 96 --block 7 --markov-rank 16 \
        --markov-head vanilla|gated|rnn|none --conf 0|1 --conf-with-markov 0|1 --taps 1,3 \
        --num-target-layers 5 --mask-token 3 --dtype f32|bf16|f16 --shards N --layer-scalar 1.0 \
        --attention-bias 0|1 --seed S [--embed-from GGUF_OR_HF] [--norm-eps E] [--rope-theta T] \
        [--softcap C] [--partial-rotary-factor F]

config.json is a target-style text config (Qwen3: architectures ["Qwen3DSparkModel"], model_type
qwen3; Gemma 4: ["Gemma4DSparkModel"], model_type gemma4_text with global_head_dim,
num_global_key_value_heads, attention_k_eq_v true, final_logit_softcapping,
rope_parameters.full_attention {rope_theta, partial_rotary_factor, rope_type "proportional"},
hidden_activation gelu_pytorch_tanh) plus the draft fields of docs/formats/deepspec-checkpoint.md section 2.
Tensors are named and shaped as section 3 (no key prefix): model.safetensors, or with --shards N > 1
model-0000i-of-0000N.safetensors + model.safetensors.index.json.

For gemma4, --head-dim is global_head_dim (default 32; with the default partial_rotary_factor 0.25,
4 of its 16 pairs rotate) and --kv-heads is num_global_key_value_heads. The local (sliding) fields
the drafter must NOT use are written with different values: head_dim = global_head_dim / 2,
num_key_value_heads != num_global_key_value_heads, a top-level rope_theta and
rope_parameters.sliding_attention.rope_theta of 10000 (full_attention gets --rope-theta, 1e6).

Values depend only on the seed, the tensor's name and its shape (a generator per tensor seeded by
(seed, crc32(name))): normal / sqrt(fan_in) for projections (activations stay O(1)), 1 + 0.1 z for
norms, standard normal for W1 (so the Markov bias W2 . W1[prev] is O(1)), 0.5 z for biases,
embed_tokens standard normal (Gemma: / sqrt(H), since the runtime multiplies by sqrt(H)).
layer_scalar = --layer-scalar. --embed-from copies embed_tokens / lm_head from a target (GGUF file
or HF directory; hidden, vocab and num_target_layers then default to the target's).

As a module: `make_deepspec(out_dir, **options)` returns out_dir; it also accepts
`drop_tensors`, `extra_tensors` ({name: shape}), `shape_overrides` ({name: shape}) and
`config_overrides` ({key: value}, value None deletes the key) to write broken drafters.
"""

import argparse
import json
import os
import sys
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_hf_llama  # noqa: E402

DTYPES = make_hf_llama.DTYPES
STYLES = ("qwen3", "gemma4")
HEADS = ("vanilla", "gated", "rnn", "none")


def tensor_plan(style, hidden, vocab, layers, heads, kv_heads, head_dim, ffn, n_taps, markov_rank,
                markov_head, conf, conf_with_markov, attention_bias):
    """(name, shape, kind) of every tensor in file order. kinds: embed, head, linear, norm, bias,
    scalar, w1."""
    H, V, F, d, r = hidden, vocab, ffn, head_dim, markov_rank
    qd, kd = heads * d, kv_heads * d
    g = style == "gemma4"
    plan = [("embed_tokens.weight", (V, H), "embed"), ("fc.weight", (H, n_taps * H), "linear"),
            ("hidden_norm.weight", (H,), "norm")]
    for i in range(layers):
        p = f"layers.{i}."
        plan.append((p + "input_layernorm.weight", (H,), "norm"))
        projs = [("q", qd, H), ("k", kd, H)] + ([] if g else [("v", kd, H)]) + [("o", H, qd)]
        for n, out, inp in projs:
            plan.append((f"{p}self_attn.{n}_proj.weight", (out, inp), "linear"))
            if attention_bias:
                plan.append((f"{p}self_attn.{n}_proj.bias", (out,), "bias"))
        plan += [(p + "self_attn.q_norm.weight", (d,), "norm"),
                 (p + "self_attn.k_norm.weight", (d,), "norm"),
                 (p + "post_attention_layernorm.weight", (H,), "norm")]
        if g:
            plan += [(p + "pre_feedforward_layernorm.weight", (H,), "norm"),
                     (p + "post_feedforward_layernorm.weight", (H,), "norm")]
        plan += [(p + "mlp.gate_proj.weight", (F, H), "linear"),
                 (p + "mlp.up_proj.weight", (F, H), "linear"),
                 (p + "mlp.down_proj.weight", (H, F), "linear")]
        if g:
            plan.append((p + "layer_scalar", (1,), "scalar"))
    plan += [("norm.weight", (H,), "norm"), ("lm_head.weight", (V, H), "head")]
    if r > 0:
        plan += [("markov_head.markov_w1.weight", (V, r), "w1"),
                 ("markov_head.markov_w2.weight", (V, r), "linear")]
        if markov_head == "gated":
            plan += [("markov_head.gate_proj.weight", (r, H + r), "linear"),
                     ("markov_head.gate_proj.bias", (r,), "bias")]
        elif markov_head == "rnn":
            plan += [("markov_head.joint_proj.weight", (3 * r, 2 * r + H), "linear"),
                     ("markov_head.joint_proj.bias", (3 * r,), "bias")]
    if conf:
        plan += [("confidence_head.proj.weight", (1, H + (r if conf_with_markov else 0)), "linear"),
                 ("confidence_head.proj.bias", (1,), "bias")]
    return plan


def random_tensor(seed, name, shape, kind, style="qwen3", layer_scalar=1.0):
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    z = rng.standard_normal(shape, dtype=np.float32)
    if kind == "norm":
        return (1.0 + 0.1 * z).astype(np.float32)
    if kind == "bias":
        return (0.5 * z).astype(np.float32)
    if kind == "scalar":
        return np.full(shape, layer_scalar, dtype=np.float32)
    if kind == "w1":
        return z
    if kind == "embed":
        return z if style == "qwen3" else (z / np.float32(np.sqrt(shape[1]))).astype(np.float32)
    fan_in = shape[1] if len(shape) > 1 else 1
    return (z / np.float32(np.sqrt(fan_in))).astype(np.float32)


def target_embeddings(path):
    """(embed [V, H], lm_head [V, H], n_layers) of a target GGUF file or HF directory."""
    import torch
    import llama_ref
    m = llama_ref.load(path, dtype=torch.float32)
    emb = m.w("token_embd.weight").numpy()
    out = m.weights.get("output.weight", m.w("token_embd.weight")).numpy()
    return (np.ascontiguousarray(emb, dtype=np.float32), np.ascontiguousarray(out, dtype=np.float32),
            m.config.n_layers)


def make_config(style, hidden, vocab, layers, heads, kv_heads, head_dim, ffn, block, markov_rank,
                markov_head, conf, conf_with_markov, taps, num_target_layers, mask_token, dtype,
                attention_bias, norm_eps, rope_theta, softcap, partial_rotary_factor):
    cfg = {
        "architectures": ["Qwen3DSparkModel" if style == "qwen3" else "Gemma4DSparkModel"],
        "model_type": "qwen3" if style == "qwen3" else "gemma4_text",
        "hidden_size": hidden,
        "intermediate_size": ffn,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "vocab_size": vocab,
        "rms_norm_eps": norm_eps,
        "attention_bias": bool(attention_bias),
        "attention_dropout": 0.0,
        "max_position_embeddings": 4096,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": DTYPES[dtype][1],
        "use_cache": True,
    }
    if style == "qwen3":
        cfg.update({"num_key_value_heads": kv_heads, "head_dim": head_dim, "hidden_act": "silu",
                    "rope_theta": rope_theta, "rope_scaling": None, "use_sliding_window": False})
    else:
        local_kv = heads if kv_heads != heads else max(1, heads // 2)
        cfg.update({
            "num_key_value_heads": local_kv,      # sliding-window geometry: unused by the drafter
            "head_dim": head_dim // 2,
            "global_head_dim": head_dim,
            "num_global_key_value_heads": kv_heads,
            "attention_k_eq_v": True,
            "hidden_activation": "gelu_pytorch_tanh",
            "final_logit_softcapping": softcap,
            "rope_theta": 10000.0,
            "rope_parameters": {
                "full_attention": {"rope_theta": rope_theta,
                                   "partial_rotary_factor": partial_rotary_factor,
                                   "rope_type": "proportional"},
                "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"},
            },
            "sliding_window": 512,
            "enable_moe_block": False,
            "hidden_size_per_layer_input": 0,
        })
    cfg.update({
        "num_target_layers": num_target_layers,
        "target_layer_ids": list(taps),
        "block_size": block,
        "mask_token_id": mask_token,
        "markov_rank": markov_rank,
    })
    if markov_rank > 0:
        cfg["markov_head_type"] = markov_head
    cfg.update({
        "enable_confidence_head": bool(conf),
        "confidence_head_with_markov": bool(conf_with_markov),
        "num_anchors": 512,
        "layer_types": ["full_attention"] * layers,
        "tie_word_embeddings": False,
    })
    return cfg


def _write_file(path, items, arrays, dtype):
    """One safetensors file with `items` (name, shape, kind) from `arrays`; returns its data bytes."""
    def tensor_of(name, shape, _kind):
        a = arrays[name]
        if a.shape != tuple(shape):
            raise ValueError(f"internal: {name} {a.shape} vs {shape}")
        return a
    return make_hf_llama.write_tensors(path, items, tensor_of, dtype)


def make_deepspec(out_dir, style="qwen3", hidden=None, vocab=None, layers=2, heads=4, kv_heads=2,
                  head_dim=None, ffn=96, block=7, markov_rank=16, markov_head="vanilla", conf=True,
                  conf_with_markov=None, taps=(1, 3), num_target_layers=None, mask_token=3,
                  dtype="f32", shards=1, layer_scalar=1.0, attention_bias=False, seed=1,
                  embed_from=None, norm_eps=1e-6, rope_theta=1e6, softcap=30.0,
                  partial_rotary_factor=0.25, drop_tensors=(), extra_tensors=None,
                  shape_overrides=None, config_overrides=None):
    """Write the drafter to out_dir (created if needed) and return out_dir."""
    if style not in STYLES:
        raise ValueError(f"style must be one of {STYLES}")
    if markov_head not in HEADS:
        raise ValueError(f"markov head must be one of {HEADS}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}")
    if markov_head == "none":
        markov_rank = 0
    if conf_with_markov is None:
        conf_with_markov = bool(conf) and markov_rank > 0
    if conf_with_markov and markov_rank == 0:
        raise ValueError("confidence head with Markov input needs markov rank > 0")
    if head_dim is None:
        head_dim = 16 if style == "qwen3" else 32
    if heads % kv_heads or head_dim % 2:
        raise ValueError("heads must be a multiple of kv_heads and head_dim even")
    emb = lm = None
    if embed_from:
        emb, lm, t_layers = target_embeddings(embed_from)
        t_vocab, t_hidden = emb.shape
        if hidden is not None and hidden != t_hidden or vocab is not None and vocab != t_vocab:
            raise ValueError(f"--embed-from target has hidden {t_hidden}, vocab {t_vocab}")
        hidden, vocab = t_hidden, t_vocab
        num_target_layers = t_layers if num_target_layers is None else num_target_layers
    hidden = 64 if hidden is None else hidden
    vocab = 512 if vocab is None else vocab
    num_target_layers = 5 if num_target_layers is None else num_target_layers
    taps = [int(t) for t in taps]

    plan = tensor_plan(style, hidden, vocab, layers, heads, kv_heads, head_dim, ffn, len(taps),
                       markov_rank, markov_head, conf, conf_with_markov, attention_bias)
    arrays = {}
    for name, shape, kind in plan:
        if name == "embed_tokens.weight" and emb is not None:
            arrays[name] = emb
        elif name == "lm_head.weight" and lm is not None:
            arrays[name] = lm
        else:
            arrays[name] = random_tensor(seed, name, shape, kind, style, layer_scalar)
    # Test hooks: broken drafters.
    drop = set(drop_tensors)
    plan = [it for it in plan if it[0] not in drop]
    for name, shape in (shape_overrides or {}).items():
        plan = [(n, tuple(shape) if n == name else s, k) for n, s, k in plan]
        arrays[name] = random_tensor(seed, name, tuple(shape), "linear")
    for name, shape in (extra_tensors or {}).items():
        plan.append((name, tuple(shape), "linear"))
        arrays[name] = random_tensor(seed, name, tuple(shape), "linear")

    cfg = make_config(style, hidden, vocab, layers, heads, kv_heads, head_dim, ffn, block,
                      markov_rank, markov_head, conf, conf_with_markov, taps, num_target_layers,
                      mask_token, dtype, attention_bias, norm_eps, rope_theta, softcap,
                      partial_rotary_factor)
    for k, v in (config_overrides or {}).items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v

    os.makedirs(out_dir, exist_ok=True)
    for fn in os.listdir(out_dir):
        if fn.endswith(".safetensors") or fn in ("model.safetensors.index.json", "config.json"):
            os.remove(os.path.join(out_dir, fn))
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    groups = make_hf_llama.split_shards(plan, shards, DTYPES[dtype][2])
    if len(groups) == 1:
        _write_file(os.path.join(out_dir, "model.safetensors"), groups[0], arrays, dtype)
        return out_dir
    weight_map, total = {}, 0
    for i, items in enumerate(groups):
        fn = "model-%05d-of-%05d.safetensors" % (i + 1, len(groups))
        total += _write_file(os.path.join(out_dir, fn), items, arrays, dtype)
        for name, _, _ in items:
            weight_map[name] = fn
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    return out_dir


def _bool(s):
    if s in ("0", "1"):
        return s == "1"
    raise argparse.ArgumentTypeError("expected 0 or 1")


def _ints(s):
    try:
        return [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("expected comma-separated integers")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--style", choices=STYLES, default="qwen3")
    ap.add_argument("--hidden", type=int, default=None, help="default 64, or the --embed-from target's")
    ap.add_argument("--vocab", type=int, default=None, help="default 512, or the --embed-from target's")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2, help="gemma4: num_global_key_value_heads")
    ap.add_argument("--head-dim", type=int, default=None,
                    help="qwen3: head_dim (default 16); gemma4: global_head_dim (default 32)")
    ap.add_argument("--ffn", type=int, default=96)
    ap.add_argument("--block", type=int, default=7)
    ap.add_argument("--markov-rank", type=int, default=16)
    ap.add_argument("--markov-head", choices=HEADS, default="vanilla", help="none = markov_rank 0 (DFlash)")
    ap.add_argument("--conf", type=_bool, default=True)
    ap.add_argument("--conf-with-markov", type=_bool, default=None, help="default: 1 when there is a Markov head")
    ap.add_argument("--taps", type=_ints, default=[1, 3], help="target_layer_ids")
    ap.add_argument("--num-target-layers", type=int, default=None, help="default 5, or the --embed-from target's")
    ap.add_argument("--mask-token", type=int, default=3)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="f32")
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--layer-scalar", type=float, default=1.0, help="gemma4 layers.{i}.layer_scalar")
    ap.add_argument("--attention-bias", type=_bool, default=False)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--embed-from", default=None, help="copy embed_tokens / lm_head from this GGUF file or HF directory")
    ap.add_argument("--norm-eps", type=float, default=1e-6)
    ap.add_argument("--rope-theta", type=float, default=1e6, help="gemma4: rope_parameters.full_attention.rope_theta")
    ap.add_argument("--softcap", type=float, default=30.0, help="gemma4 final_logit_softcapping")
    ap.add_argument("--partial-rotary-factor", type=float, default=0.25, help="gemma4 full-attention RoPE")
    args, rest = [], list(sys.argv[1:] if argv is None else argv)
    while rest:  # "--taps -1,3": argparse would take -1,3 for an option
        x = rest.pop(0)
        args.append(f"--taps={rest.pop(0)}" if x == "--taps" and rest else x)
    a = ap.parse_args(args)
    try:
        make_deepspec(a.out_dir, style=a.style, hidden=a.hidden, vocab=a.vocab, layers=a.layers,
                      heads=a.heads, kv_heads=a.kv_heads, head_dim=a.head_dim, ffn=a.ffn,
                      block=a.block, markov_rank=a.markov_rank, markov_head=a.markov_head,
                      conf=a.conf, conf_with_markov=a.conf_with_markov, taps=a.taps,
                      num_target_layers=a.num_target_layers, mask_token=a.mask_token,
                      dtype=a.dtype, shards=a.shards, layer_scalar=a.layer_scalar,
                      attention_bias=a.attention_bias, seed=a.seed, embed_from=a.embed_from,
                      norm_eps=a.norm_eps, rope_theta=a.rope_theta, softcap=a.softcap,
                      partial_rotary_factor=a.partial_rotary_factor)
    except ValueError as e:
        print(f"make_deepspec.py: {e}", file=sys.stderr)
        return 2
    print(a.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
