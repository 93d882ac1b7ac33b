#!/usr/bin/python3
"""Write a random tiny (or not so tiny) Llama as a Hugging Face directory.

    make_hf_llama.py OUT_DIR --seed 1 --dim 64 --layers 3 --heads 4 --kv-heads 2 --ffn 96 \
        --vocab 300 [--head-dim 16] [--shards 2] [--tied] [--dtype f32|bf16|f16]

Writes config.json (LlamaForCausalLM) and model.safetensors, or, with --shards N > 1,
model-0000i-of-0000N.safetensors plus model.safetensors.index.json. Values depend only on the seed,
the tensor's name and its shape (each tensor has its own generator), so sharding or the stored
dtype never changes them (apart from the dtype's rounding). Tensors are generated and written one
at a time, so large benchmark models do not need to fit in memory twice.

As a module: `make_hf_llama(out_dir, seed=..., ...)` returns the output directory.
"""

import argparse
import json
import os
import struct
import sys
import zlib

import numpy as np

DTYPES = {  # our name -> (safetensors dtype, config torch_dtype, bytes per element)
    "f32": ("F32", "float32", 4),
    "f16": ("F16", "float16", 2),
    "bf16": ("BF16", "bfloat16", 2),
}


def tensor_plan(dim, layers, heads, kv_heads, ffn, vocab, head_dim, tied):
    """(name, shape, kind) for every tensor, in file order. kind: "embed", "norm" or "linear"."""
    q_dim, kv_dim = heads * head_dim, kv_heads * head_dim
    plan = [("model.embed_tokens.weight", (vocab, dim), "embed")]
    for i in range(layers):
        p = f"model.layers.{i}."
        plan += [
            (p + "input_layernorm.weight", (dim,), "norm"),
            (p + "self_attn.q_proj.weight", (q_dim, dim), "linear"),
            (p + "self_attn.k_proj.weight", (kv_dim, dim), "linear"),
            (p + "self_attn.v_proj.weight", (kv_dim, dim), "linear"),
            (p + "self_attn.o_proj.weight", (dim, q_dim), "linear"),
            (p + "post_attention_layernorm.weight", (dim,), "norm"),
            (p + "mlp.gate_proj.weight", (ffn, dim), "linear"),
            (p + "mlp.up_proj.weight", (ffn, dim), "linear"),
            (p + "mlp.down_proj.weight", (dim, ffn), "linear"),
        ]
    plan.append(("model.norm.weight", (dim,), "norm"))
    if not tied:
        plan.append(("lm_head.weight", (vocab, dim), "linear"))
    return plan


def random_tensor(seed, name, shape, kind):
    """Deterministic float32 values for one tensor: a generator seeded by (seed, crc32(name))."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    z = rng.standard_normal(shape, dtype=np.float32)
    if kind == "norm":
        return (1.0 + 0.1 * z).astype(np.float32)
    if kind == "embed":
        return z
    return (z / np.float32(np.sqrt(shape[1]))).astype(np.float32)  # keeps activations O(1)


def f32_to_bf16_bits(a):
    """Round float32 to bfloat16 (nearest, ties to even); returns the uint16 bit patterns."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def encode(a, dtype):
    """The little-endian bytes of float32 array `a` stored as `dtype`."""
    if dtype == "f32":
        return a.astype("<f4").tobytes()
    if dtype == "f16":
        return a.astype("<f2").tobytes()
    if dtype == "bf16":
        return f32_to_bf16_bits(a).astype("<u2").tobytes()
    raise ValueError(f"unknown dtype {dtype}")


def split_shards(plan, n_shards, elem_bytes):
    """Split the plan into n contiguous groups of roughly equal byte size (each non-empty)."""
    n_shards = max(1, min(n_shards, len(plan)))
    sizes = [int(np.prod(s)) * elem_bytes for _, s, _ in plan]
    total = sum(sizes)
    groups, cur, acc = [], [], 0
    for i, item in enumerate(plan):
        cur.append(item)
        acc += sizes[i]
        remaining_items = len(plan) - i - 1
        remaining_groups = n_shards - len(groups) - 1
        boundary = total * (len(groups) + 1) / n_shards
        if remaining_groups > 0 and (acc >= boundary or remaining_items == remaining_groups):
            groups.append(cur)
            cur = []
    groups.append(cur)
    return groups


def write_tensors(path, items, tensor_of, dtype):
    """Write one safetensors file holding `items` (name, shape, kind), each tensor_of(name, shape,
    kind) encoded as `dtype`; returns its data bytes."""
    st_dtype, _, eb = DTYPES[dtype]
    header, off = {}, 0
    for name, shape, _ in items:
        n = int(np.prod(shape)) * eb
        header[name] = {"dtype": st_dtype, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    header["__metadata__"] = {"format": "pt"}
    hbytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hbytes += b" " * (-len(hbytes) % 8)  # pad the header so the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hbytes)))
        f.write(hbytes)
        for name, shape, kind in items:
            f.write(encode(tensor_of(name, shape, kind), dtype))
    return off


def write_safetensors(path, items, seed, dtype):
    """Write one safetensors file holding `items` (name, shape, kind) with random_tensor values."""
    return write_tensors(path, items, lambda name, shape, kind: random_tensor(seed, name, shape, kind), dtype)


def make_config(dim, layers, heads, kv_heads, ffn, vocab, head_dim, tied, dtype, norm_eps,
                rope_theta, max_ctx, explicit_head_dim):
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": dim,
        "intermediate_size": ffn,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "hidden_act": "silu",
        "rms_norm_eps": norm_eps,
        "rope_theta": rope_theta,
        "vocab_size": vocab,
        "max_position_embeddings": max_ctx,
        "tie_word_embeddings": tied,
        "torch_dtype": DTYPES[dtype][1],
        "attention_bias": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    if explicit_head_dim:
        cfg["head_dim"] = head_dim
    return cfg


def make_hf_llama(out_dir, seed=1, dim=64, layers=3, heads=4, kv_heads=2, ffn=96, vocab=300,
                  head_dim=None, shards=1, tied=False, dtype="f32", norm_eps=1e-5,
                  rope_theta=10000.0, max_ctx=2048):
    """Write the model to `out_dir` (created if needed) and return `out_dir`."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}")
    if heads % kv_heads:
        raise ValueError("heads must be a multiple of kv_heads")
    explicit = head_dim is not None
    head_dim = head_dim if explicit else dim // heads
    if head_dim % 2:
        raise ValueError("head_dim must be even (RoPE pairs)")
    os.makedirs(out_dir, exist_ok=True)
    for fn in os.listdir(out_dir):  # never leave a stale single file next to new shards
        if fn.endswith(".safetensors") or fn == "model.safetensors.index.json":
            os.remove(os.path.join(out_dir, fn))
    plan = tensor_plan(dim, layers, heads, kv_heads, ffn, vocab, head_dim, tied)
    cfg = make_config(dim, layers, heads, kv_heads, ffn, vocab, head_dim, tied, dtype, norm_eps,
                      rope_theta, max_ctx, explicit)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    groups = split_shards(plan, shards, DTYPES[dtype][2])
    if len(groups) == 1:
        write_safetensors(os.path.join(out_dir, "model.safetensors"), groups[0], seed, dtype)
        return out_dir
    weight_map, total = {}, 0
    for i, items in enumerate(groups):
        fn = "model-%05d-of-%05d.safetensors" % (i + 1, len(groups))
        total += write_safetensors(os.path.join(out_dir, fn), items, seed, dtype)
        for name, _, _ in items:
            weight_map[name] = fn
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
    return out_dir


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--ffn", type=int, default=96)
    ap.add_argument("--vocab", type=int, default=300)
    ap.add_argument("--head-dim", type=int, default=None,
                    help="write an explicit head_dim (default: dim / heads, not written)")
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--tied", action="store_true", help="tie lm_head to the embeddings")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="f32")
    ap.add_argument("--norm-eps", type=float, default=1e-5)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--max-ctx", type=int, default=2048)
    a = ap.parse_args(argv)
    make_hf_llama(a.out_dir, seed=a.seed, dim=a.dim, layers=a.layers, heads=a.heads,
                  kv_heads=a.kv_heads, ffn=a.ffn, vocab=a.vocab, head_dim=a.head_dim,
                  shards=a.shards, tied=a.tied, dtype=a.dtype, norm_eps=a.norm_eps,
                  rope_theta=a.rope_theta, max_ctx=a.max_ctx)
    print(a.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
