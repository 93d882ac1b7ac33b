"""An independent PyTorch reference of the Llama architecture (float64 by default).

Written from the architecture's definition, not from our C code:

    x = embed[tok]
    per layer:  h = x + Wo . attn(RMSNorm(x) * w_attn_norm)      (GQA, causal, RoPE, 1/sqrt(hd))
                x = h + W_down (silu(W_gate n) * (W_up n)),   n = RMSNorm(h) * w_ffn_norm
    hidden = RMSNorm(x) * w_final;  logits = W_out . hidden     (W_out = embed when tied)

RoPE rotates pairs of dimensions inside every head by angle pos * theta^(-2i/head_dim), i in
[0, head_dim/2). Which dimensions form pair i depends on the checkpoint:
    "interleaved": (2i, 2i+1)           -- GGUF `llama` tensors (Q/K rows permuted by converters)
    "halves":      (i, i + head_dim/2)  -- Hugging Face checkpoints

Loaders: `load_gguf(path)` and `load_hf(directory)` (config.json + model.safetensors, or shards
listed in model.safetensors.index.json). Safetensors are parsed here directly (8-byte LE header
length, JSON header, raw little-endian data; F32 / F16 / BF16).

Main entry point: `forward(model, tokens, taps=(...))` -> ForwardResult(logits, taps, hidden).
"""

import json
import math
import os
import struct
from dataclasses import dataclass, field

import numpy as np
import torch

import gguf_py

ROPE_INTERLEAVED = "interleaved"
ROPE_HALVES = "halves"


@dataclass
class LlamaConfig:
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_dim: int
    vocab_size: int
    head_dim: int
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_layout: str = ROPE_HALVES


@dataclass
class LlamaModel:
    """Config plus weights as torch tensors (keys: the GGUF tensor names, see `_GGUF_NAMES`)."""
    config: LlamaConfig
    weights: dict = field(default_factory=dict)

    def w(self, name):
        return self.weights[name]


@dataclass
class ForwardResult:
    logits: torch.Tensor  # (n, vocab)
    taps: dict            # layer id -> (n, dim); -1 = embedding output
    hidden: torch.Tensor  # (n, dim), after the final norm


# ---------------------------------------------------------------------------------------------
# Forward pass

def rms_norm(x, weight, eps):
    return x / torch.sqrt(torch.mean(x * x, dim=-1, keepdim=True) + eps) * weight


def rope_tables(n_pos, head_dim, theta, dtype, start=0):
    """cos/sin of shape (n_pos, head_dim/2) for pair i at position p: angle p * theta^(-2i/hd)."""
    i = torch.arange(head_dim // 2, dtype=torch.float64)
    inv_freq = theta ** (-2.0 * i / head_dim)
    pos = torch.arange(start, start + n_pos, dtype=torch.float64)
    ang = pos[:, None] * inv_freq[None, :]
    return torch.cos(ang).to(dtype), torch.sin(ang).to(dtype)


def apply_rope(x, cos, sin, layout):
    """Rotate x of shape (n, heads, head_dim) with cos/sin of shape (n, head_dim/2)."""
    n, h, hd = x.shape
    c = cos[:, None, :]
    s = sin[:, None, :]
    if layout == ROPE_INTERLEAVED:
        pairs = x.reshape(n, h, hd // 2, 2)
        a, b = pairs[..., 0], pairs[..., 1]
        out = torch.stack((a * c - b * s, a * s + b * c), dim=-1)
        return out.reshape(n, h, hd)
    if layout == ROPE_HALVES:
        a, b = x[..., : hd // 2], x[..., hd // 2:]
        return torch.cat((a * c - b * s, a * s + b * c), dim=-1)
    raise ValueError(f"unknown RoPE layout {layout!r}")


def attention(model, layer, xn, cos, sin):
    """Causal grouped-query self-attention over all rows of xn (n, dim); returns (n, dim)."""
    cfg = model.config
    n = xn.shape[0]
    hd = cfg.head_dim
    p = f"blk.{layer}."
    q = (xn @ model.w(p + "attn_q.weight").T).reshape(n, cfg.n_heads, hd)
    k = (xn @ model.w(p + "attn_k.weight").T).reshape(n, cfg.n_kv_heads, hd)
    v = (xn @ model.w(p + "attn_v.weight").T).reshape(n, cfg.n_kv_heads, hd)
    q = apply_rope(q, cos, sin, cfg.rope_layout)
    k = apply_rope(k, cos, sin, cfg.rope_layout)
    group = cfg.n_heads // cfg.n_kv_heads
    kv_of_head = torch.arange(cfg.n_heads) // group  # query head h reads kv head h // group
    k = k[:, kv_of_head, :]
    v = v[:, kv_of_head, :]
    scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(hd)
    mask = torch.ones(n, n, dtype=torch.bool).triu(1)  # True above the diagonal: the future
    scores = scores.masked_fill(mask[None], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out = torch.einsum("hqk,khd->qhd", probs, v).reshape(n, cfg.n_heads * hd)
    return out @ model.w(p + "attn_output.weight").T


def feed_forward(model, layer, xn):
    p = f"blk.{layer}."
    gate = xn @ model.w(p + "ffn_gate.weight").T
    up = xn @ model.w(p + "ffn_up.weight").T
    return (torch.nn.functional.silu(gate) * up) @ model.w(p + "ffn_down.weight").T


def forward(model, tokens, taps=()):
    """Run the whole sequence `tokens` (positions 0..n-1) and return a ForwardResult."""
    cfg = model.config
    emb = model.w("token_embd.weight")
    tok = torch.as_tensor(list(tokens), dtype=torch.long)
    x = emb[tok]
    out_taps = {}
    if -1 in taps:
        out_taps[-1] = x.clone()
    cos, sin = rope_tables(len(tok), cfg.head_dim, cfg.rope_theta, x.dtype)
    for layer in range(cfg.n_layers):
        p = f"blk.{layer}."
        h = x + attention(model, layer, rms_norm(x, model.w(p + "attn_norm.weight"), cfg.norm_eps), cos, sin)
        x = h + feed_forward(model, layer, rms_norm(h, model.w(p + "ffn_norm.weight"), cfg.norm_eps))
        if layer in taps:
            out_taps[layer] = x.clone()
    hidden = rms_norm(x, model.w("output_norm.weight"), cfg.norm_eps)
    w_out = model.weights.get("output.weight", emb)
    logits = hidden @ w_out.T
    return ForwardResult(logits=logits, taps=out_taps, hidden=hidden)


def greedy_decode(model, prompt_ids, n_new):
    """Greedy continuation (argmax, lowest id on ties), recomputing the full sequence each step.

    Returns (generated ids, margins) where margins[i] is the gap between the best and the
    second-best logit at step i (to tell real mismatches from near-ties)."""
    seq = list(prompt_ids)
    out, margins = [], []
    for _ in range(n_new):
        last = forward(model, seq).logits[-1]
        best = int(torch.argmax(last))  # torch.argmax returns the first maximal index
        top2 = torch.topk(last, 2).values
        margins.append(float(top2[0] - top2[1]))
        out.append(best)
        seq.append(best)
    return out, margins


# ---------------------------------------------------------------------------------------------
# Loading from GGUF

def load_gguf(path, dtype=torch.float64):
    """A `llama` GGUF file as a LlamaModel (interleaved RoPE layout)."""
    g = gguf_py.GGUFFile(path)
    arch = g.get("general.architecture")
    if arch != "llama":
        raise ValueError(f"{path}: architecture {arch!r}, expected 'llama'")
    dim = int(g.get("llama.embedding_length"))
    n_heads = int(g.get("llama.attention.head_count"))
    emb_shape = g.tensors["token_embd.weight"].shape
    cfg = LlamaConfig(
        dim=dim,
        n_layers=int(g.get("llama.block_count")),
        n_heads=n_heads,
        n_kv_heads=int(g.get("llama.attention.head_count_kv", n_heads)),
        ffn_dim=int(g.get("llama.feed_forward_length")),
        vocab_size=int(emb_shape[0]),
        head_dim=int(g.get("llama.attention.key_length", dim // n_heads)),
        norm_eps=float(g.get("llama.attention.layer_norm_rms_epsilon", 1e-5)),
        rope_theta=float(g.get("llama.rope.freq_base", 10000.0)),
        rope_layout=ROPE_INTERLEAVED,
    )
    weights = {name: torch.from_numpy(g.tensor(name)).to(dtype) for name in g.tensors}
    return LlamaModel(cfg, weights)


# ---------------------------------------------------------------------------------------------
# Loading from a Hugging Face directory

_SAFETENSORS_DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2")}


def read_safetensors(path):
    """All tensors of one .safetensors file as float32 numpy arrays (BF16 widened exactly)."""
    with open(path, "rb") as f:
        buf = f.read()
    (hlen,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8:8 + hlen].decode("utf-8"))
    base = 8 + hlen
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        dt = meta["dtype"]
        if dt not in _SAFETENSORS_DTYPES:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {dt}")
        np_dt = _SAFETENSORS_DTYPES[dt]
        begin, end = meta["data_offsets"]
        count = (end - begin) // np_dt.itemsize
        raw = np.frombuffer(buf, dtype=np_dt, count=count, offset=base + begin)
        if dt == "BF16":
            arr = (raw.astype(np.uint32) << 16).view(np.float32)
        else:
            arr = raw.astype(np.float32)
        out[name] = arr.reshape(meta["shape"])
    return out


def read_hf_tensors(directory):
    """Every tensor of an HF checkpoint directory (single file or index-listed shards)."""
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    tensors = {}
    for fn in files:
        tensors.update(read_safetensors(os.path.join(directory, fn)))
    return tensors


def hf_config(directory):
    with open(os.path.join(directory, "config.json")) as f:
        c = json.load(f)
    n_heads = int(c["num_attention_heads"])
    head_dim = c.get("head_dim") or int(c["hidden_size"]) // n_heads
    return LlamaConfig(
        dim=int(c["hidden_size"]),
        n_layers=int(c["num_hidden_layers"]),
        n_heads=n_heads,
        n_kv_heads=int(c.get("num_key_value_heads", n_heads)),
        ffn_dim=int(c["intermediate_size"]),
        vocab_size=int(c["vocab_size"]),
        head_dim=int(head_dim),
        norm_eps=float(c.get("rms_norm_eps", 1e-6)),
        rope_theta=float(c.get("rope_theta", 10000.0)),
        rope_layout=ROPE_HALVES,
    ), c


def hf_to_gguf_names(n_layers):
    """Map HF tensor names to the GGUF names LlamaModel uses."""
    m = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }
    per_layer = {
        "input_layernorm.weight": "attn_norm.weight",
        "self_attn.q_proj.weight": "attn_q.weight",
        "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.v_proj.weight": "attn_v.weight",
        "self_attn.o_proj.weight": "attn_output.weight",
        "post_attention_layernorm.weight": "ffn_norm.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight",
        "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight",
    }
    for i in range(n_layers):
        for hf, gg in per_layer.items():
            m[f"model.layers.{i}.{hf}"] = f"blk.{i}.{gg}"
    return m


def load_hf(directory, dtype=torch.float64):
    """A Hugging Face LlamaForCausalLM directory as a LlamaModel (halves RoPE layout)."""
    cfg, raw_cfg = hf_config(directory)
    tensors = read_hf_tensors(directory)
    names = hf_to_gguf_names(cfg.n_layers)
    weights = {}
    for hf_name, arr in tensors.items():
        if hf_name not in names:
            raise ValueError(f"{directory}: unexpected tensor {hf_name}")
        weights[names[hf_name]] = torch.from_numpy(np.ascontiguousarray(arr)).to(dtype)
    if raw_cfg.get("tie_word_embeddings", False):
        weights.pop("output.weight", None)
    missing = [n for n in names.values() if n != "output.weight" and n not in weights]
    if missing:
        raise ValueError(f"{directory}: missing tensors {missing[:4]}")
    return LlamaModel(cfg, weights)


def load(path, dtype=torch.float64):
    """A model from a .gguf file or a Hugging Face directory."""
    return load_hf(path, dtype) if os.path.isdir(path) else load_gguf(path, dtype)


# ---------------------------------------------------------------------------------------------
# Layout conversion (used to cross-check the two RoPE layouts against each other)

def halves_to_interleaved_rows(w, n_heads, head_dim):
    """Permute Q/K weight rows so that halves-layout pair (i, i+hd/2) lands on (2i, 2i+1)."""
    rest = w.shape[1:]
    return w.reshape(n_heads, 2, head_dim // 2, *rest).transpose(1, 2).reshape(w.shape)


def to_interleaved(model):
    """A copy of a halves-layout model rewritten for interleaved RoPE (same function)."""
    cfg = model.config
    if cfg.rope_layout != ROPE_HALVES:
        raise ValueError("model is not in the halves layout")
    weights = dict(model.weights)
    for i in range(cfg.n_layers):
        q, k = f"blk.{i}.attn_q.weight", f"blk.{i}.attn_k.weight"
        weights[q] = halves_to_interleaved_rows(weights[q], cfg.n_heads, cfg.head_dim)
        weights[k] = halves_to_interleaved_rows(weights[k], cfg.n_kv_heads, cfg.head_dim)
    new_cfg = LlamaConfig(**{**cfg.__dict__, "rope_layout": ROPE_INTERLEAVED})
    return LlamaModel(new_cfg, weights)
