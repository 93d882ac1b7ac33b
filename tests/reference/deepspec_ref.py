"""An independent PyTorch reference of DeepSpec DSpark / DFlash drafters (float64).

Written from the DeepSpec contract (docs/formats/deepspec-checkpoint.md sections 1-4 and 8), not from our C
code. Loads a DeepSpec directory (config.json + model.safetensors, or shards listed in
model.safetensors.index.json; tensors F32 / BF16 / F16, widened exactly and computed in float64)
and runs one draft round:

  1. context projection of tap rows (n rows of T*H floats, T = len(target_layer_ids)):
         c = RMSNorm_hidden_norm(rows . fc^T)                                   [n, H]
     per layer  K_ctx = RoPE(k_norm(c . k_proj^T + k_bias), row positions)
                V_ctx = c . v_proj^T + v_bias          (Gemma: v_norm(c . k_proj^T + k_bias))
     c is fed to every layer's k/v projections directly (no input_layernorm on context rows).
  2. block: ids [anchor, MASK x (B-1)] at positions s..s+B-1; x = embed_tokens[ids]
     (Gemma: x * embed scale, the scale being sqrt(H) rounded to the *stored dtype of
     embed_tokens.weight*: bf16(sqrt(H)) for BF16, fp16(sqrt(H)) for F16, fp32(sqrt(H)) for F32).
  3. layers with NO mask: every block query attends to all context rows, then all block rows
     (bidirectionally). GQA: query head j reads kv head j // (nq / nkv).
       Qwen3:  x = x + attn(input_layernorm(x)); x = x + mlp(post_attention_layernorm(x))
               attention: q = q_norm(q_proj), k = k_norm(k_proj) per head, RoPE on both, scale
               head_dim^-0.5, optional q/k/v/o biases (attention_bias); SwiGLU
               down(silu(gate(x)) * up(x)).
       Gemma4: x = x + post_attention_layernorm(attn(input_layernorm(x)))
               x = x + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(x)))
               x = x * layer_scalar
               attention on the *global* geometry: head dim gd = global_head_dim, kv heads =
               num_global_key_value_heads, attention_k_eq_v (required): no v_proj,
               V = v_norm(k_proj(x)), K = RoPE(k_norm(k_proj(x))); scale 1.0; GeGLU with
               tanh-approximate GELU.
     RMSNorm everywhere is x / sqrt(mean(x^2) + eps) * w with the plain weight w (Gemma 4 too,
     NOT 1 + w); v_norm has no weight; eps = rms_norm_eps for every norm (hidden_norm, q/k/v
     norms, layer norms, final norm).
  4. RoPE, "halves" pairing (dim j with dim j + d/2), angle pos * inv_freq[j]:
       Qwen3: inv_freq[j] = theta^(-2j/d) for all d/2 pairs, theta = rope_theta (or
              rope_parameters.rope_theta);
       Gemma4 (rope_parameters.full_attention, rope_type "proportional"): with gd and
              factor = partial_rotary_factor, the first floor(factor * gd / 2) pairs rotate with
              inv_freq[j] = theta^(-2j/gd) (divisor = the full head dim), the rest are the
              identity; theta = rope_parameters.full_attention.rope_theta (a top-level
              rope_theta or the sliding_attention parameters are ignored). rope_type "default"
              (no factor, or factor 1) rotates all pairs.
  5. h = norm(x) [B, H] (the FINAL normed hidden, output of `norm`), U = h . lm_head^T [B, V];
     Gemma: U = tanh(U / c) * c, c = final_logit_softcapping (applied to U only, before the
     Markov bias is added).
  6. greedy Markov walk: prev = anchor; for k in 0..B-1: logits_k = U_k + bias_k,
     tok_k = argmax(logits_k) (lowest id on ties), prev = tok_k. The logits we report are these
     Markov-corrected logits_k. Heads (W1 = markov_w1 [V, r] used as a lookup table,
     W2 = markov_w2 [V, r], bias[v] = sum_i W2[v, i] * u[i]):
       none (markov_rank 0): bias = 0
       vanilla: u = W1[prev]
       gated:   u = sigmoid(gate_proj([h_k ; W1[prev]])) * W1[prev]   gate_proj [r, H+r] + [r]
       rnn:     z = [s_{k-1} ; W1[prev] ; h_k], (g, c, o) = split3(joint_proj(z)) (first r rows
                g, next r c, last r o), s_k = sig(g) * s_{k-1} + (1 - sig(g)) * tanh(c),
                u = tanh(o), s_0 = 0.
     markov_head_type absent with markov_rank > 0 is taken as "vanilla".
  7. confidence: c_k = sigmoid(proj([h_k ; W1[prev_k]])) with confidence_head_with_markov, else
     sigmoid(proj(h_k)); prev_k = anchor for k = 0, else tok_{k-1} (the token the walk chose, or
     the forced token, see `draft`). No confidence head -> NaN. confidence_head_with_markov with
     markov_rank 0 is rejected.

Loading validates like the format asks: exactly the expected tensor names (no missing, no extra),
exact shapes, known markov_head_type, no MoE block, no per-layer input, Gemma attention_k_eq_v,
layer_types all full_attention, strictly increasing target_layer_ids in [-1, num_target_layers-2],
mask_token_id < vocab_size. Errors are ValueError with the offending name in the message.

Entry points:
    m = load(directory)                       -> DeepSpecModel
    ctx = project_context(m, rows, positions) -> Context (per-layer K/V of the context rows)
    ctx = append_context(m, ctx, rows)        -> Context extended at positions len(ctx)..
    r = draft(m, ctx, anchor, forced=None)    -> DraftResult(tokens, logits, conf, U, h, margins)
    check_pairing(m.config, hidden, vocab, n_layers) for a target pairing.
"""

import json
import math
import os
import struct
from dataclasses import dataclass, field, replace

import numpy as np
import torch

import llama_ref

QWEN3 = "qwen3"
GEMMA4 = "gemma4"
ARCHS = {"Qwen3DSparkModel": QWEN3, "Gemma4DSparkModel": GEMMA4}
MARKOV_TYPES = ("vanilla", "gated", "rnn")


@dataclass
class DeepSpecConfig:
    style: str                 # QWEN3 or GEMMA4
    hidden: int                # H
    vocab: int                 # V
    ffn: int                   # F
    n_layers: int              # draft layers
    n_heads: int
    n_kv_heads: int            # effective (Gemma: num_global_key_value_heads)
    head_dim: int              # effective (Gemma: global_head_dim)
    norm_eps: float
    rope_theta: float
    rope_pairs: int            # how many of the head_dim/2 pairs rotate
    attn_scale: float
    attention_bias: bool
    softcap: float             # 0 = none
    embed_scale: float         # 1.0 for Qwen3
    block_size: int
    mask_token_id: int
    markov_rank: int
    markov_type: str           # "none", "vanilla", "gated", "rnn"
    conf: bool
    conf_with_markov: bool
    target_layer_ids: tuple
    num_target_layers: int

    @property
    def n_taps(self):
        return len(self.target_layer_ids)


@dataclass
class DeepSpecModel:
    config: DeepSpecConfig
    weights: dict = field(default_factory=dict)  # name -> float64 tensor (the file's names)

    def w(self, name):
        return self.weights[name]


@dataclass
class Context:
    """The draft cache: per layer K/V of the projected context rows, and their positions."""
    k: list          # per layer (n, nkv, d), RoPE applied
    v: list          # per layer (n, nkv, d)
    positions: torch.Tensor  # (n,) float64

    def __len__(self):
        return int(self.positions.shape[0])


@dataclass
class DraftResult:
    tokens: list           # B greedy tokens (argmax of logits[k], lowest id on ties)
    logits: torch.Tensor   # (B, V) Markov-corrected logits_k = U_k + bias_k
    conf: torch.Tensor     # (B,) sigmoid confidences, NaN without a confidence head
    U: torch.Tensor        # (B, V) backbone logits (after the softcap)
    h: torch.Tensor        # (B, H) final normed hidden states
    margins: list          # per slot: best logit minus the second best


# ---------------------------------------------------------------------------------------------
# Config

def _get(c, key, default=None, required=True):
    if key in c:
        return c[key]
    if required and default is None:
        raise ValueError(f"config.json: missing field {key}")
    return default


def embed_scale_for(hidden, st_dtype):
    """sqrt(H) rounded to the stored dtype of embed_tokens.weight ("F32", "BF16", "F16")."""
    tdt = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}[st_dtype]
    return float(torch.tensor(math.sqrt(hidden), dtype=torch.float64).to(tdt).item())


def parse_config(c, embed_dtype="F32"):
    """A DeepSpecConfig from the parsed config.json (validating what the format requires)."""
    arch = (c.get("architectures") or [None])[0]
    if arch not in ARCHS:
        raise ValueError(f"config.json: architectures[0] {arch!r} is not a DeepSpec drafter "
                         f"({', '.join(ARCHS)})")
    style = ARCHS[arch]
    H = int(_get(c, "hidden_size"))
    V = int(_get(c, "vocab_size"))
    nq = int(_get(c, "num_attention_heads"))
    eps = float(c.get("rms_norm_eps", 1e-6))
    if c.get("enable_moe_block", False):
        raise ValueError("config.json: enable_moe_block = true is not implemented")
    if c.get("hidden_size_per_layer_input", 0):
        raise ValueError("config.json: hidden_size_per_layer_input != 0 is not implemented")
    n_layers = int(_get(c, "num_hidden_layers"))
    lt = c.get("layer_types")
    if lt is not None and any(t != "full_attention" for t in lt):
        raise ValueError("config.json: layer_types must all be full_attention in a drafter")
    if style == QWEN3:
        nkv = int(c.get("num_key_value_heads", nq))
        d = int(c.get("head_dim") or H // nq)
        theta = c.get("rope_theta")
        if theta is None:
            theta = (c.get("rope_parameters") or {}).get("rope_theta")
        if theta is None:
            raise ValueError("config.json: missing field rope_theta")
        if c.get("rope_scaling"):
            raise ValueError("config.json: rope_scaling is not implemented")
        pairs = d // 2
        scale = d ** -0.5
        act = c.get("hidden_act", "silu")
        if act != "silu":
            raise ValueError(f"config.json: hidden_act {act!r} (Qwen3 drafters use silu)")
        softcap, escale = 0.0, 1.0
    else:
        if not c.get("attention_k_eq_v", False):
            raise ValueError("config.json: Gemma drafter with attention_k_eq_v = false (v_proj) "
                             "is not implemented")
        d = int(_get(c, "global_head_dim"))
        nkv = int(_get(c, "num_global_key_value_heads"))
        full = (c.get("rope_parameters") or {}).get("full_attention")
        if not full or "rope_theta" not in full:
            raise ValueError("config.json: missing rope_parameters.full_attention.rope_theta")
        theta = full["rope_theta"]
        rtype = full.get("rope_type", "default")
        factor = float(full.get("partial_rotary_factor", 1.0))
        if rtype == "proportional":
            pairs = int(factor * d // 2)
        elif rtype == "default" and factor == 1.0:
            pairs = d // 2
        else:
            raise ValueError(f"config.json: rope_type {rtype!r} with partial_rotary_factor "
                             f"{factor} is not implemented")
        scale = 1.0
        act = c.get("hidden_activation", c.get("hidden_act", "gelu_pytorch_tanh"))
        if act not in ("gelu_pytorch_tanh", "gelu_tanh"):
            raise ValueError(f"config.json: hidden_activation {act!r} (Gemma drafters use "
                             "gelu_pytorch_tanh)")
        softcap = float(c.get("final_logit_softcapping") or 0.0)
        escale = embed_scale_for(H, embed_dtype)
    if nq % nkv or d % 2 or not 0 <= pairs <= d // 2:
        raise ValueError(f"config.json: bad attention geometry (heads {nq}, kv heads {nkv}, "
                         f"head dim {d})")
    r = int(c.get("markov_rank", 0) or 0)
    if r < 0:
        raise ValueError("config.json: markov_rank < 0")
    mtype = "none"
    if r > 0:
        mtype = c.get("markov_head_type") or "vanilla"
        if mtype not in MARKOV_TYPES:
            raise ValueError(f"config.json: unknown markov_head_type {mtype!r}")
    conf = bool(c.get("enable_confidence_head", False))
    conf_m = bool(c.get("confidence_head_with_markov", False)) and conf
    if conf_m and r == 0:
        raise ValueError("config.json: confidence_head_with_markov needs markov_rank > 0")
    tl = tuple(int(x) for x in _get(c, "target_layer_ids"))
    ntl = int(_get(c, "num_target_layers"))
    if not tl or any(b <= a for a, b in zip(tl, tl[1:])):
        raise ValueError(f"config.json: target_layer_ids {list(tl)} not strictly increasing")
    if tl[0] < -1 or tl[-1] >= ntl - 1:
        raise ValueError(f"config.json: target_layer_ids {list(tl)} out of range for "
                         f"{ntl} target layers (last layer excluded)")
    mask = int(_get(c, "mask_token_id"))
    if not 0 <= mask < V:
        raise ValueError(f"config.json: mask_token_id {mask} out of range (vocab {V})")
    B = int(_get(c, "block_size"))
    if B < 1:
        raise ValueError("config.json: block_size < 1")
    return DeepSpecConfig(
        style=style, hidden=H, vocab=V, ffn=int(_get(c, "intermediate_size")), n_layers=n_layers,
        n_heads=nq, n_kv_heads=nkv, head_dim=d, norm_eps=eps, rope_theta=float(theta),
        rope_pairs=pairs, attn_scale=scale, attention_bias=bool(c.get("attention_bias", False)),
        softcap=softcap, embed_scale=escale, block_size=B, mask_token_id=mask, markov_rank=r,
        markov_type=mtype, conf=conf, conf_with_markov=conf_m, target_layer_ids=tl,
        num_target_layers=ntl)


def check_pairing(cfg, hidden, vocab, n_layers):
    """Raise ValueError unless the drafter fits a target of this width / vocab / depth."""
    if cfg.hidden != hidden:
        raise ValueError(f"drafter hidden_size {cfg.hidden} != target hidden size {hidden}")
    if cfg.vocab != vocab:
        raise ValueError(f"drafter vocab_size {cfg.vocab} != target vocab {vocab}")
    if cfg.num_target_layers != n_layers:
        raise ValueError(f"drafter num_target_layers {cfg.num_target_layers} != target layers {n_layers}")


# ---------------------------------------------------------------------------------------------
# Tensors

def expected_tensors(cfg):
    """{name: shape} of every tensor the drafter must hold (format doc section 3)."""
    H, V, F, d = cfg.hidden, cfg.vocab, cfg.ffn, cfg.head_dim
    qd, kd, r = cfg.n_heads * d, cfg.n_kv_heads * d, cfg.markov_rank
    t = {"embed_tokens.weight": (V, H), "fc.weight": (H, cfg.n_taps * H), "hidden_norm.weight": (H,)}
    for i in range(cfg.n_layers):
        p = f"layers.{i}."
        t[p + "input_layernorm.weight"] = (H,)
        t[p + "self_attn.q_proj.weight"] = (qd, H)
        t[p + "self_attn.k_proj.weight"] = (kd, H)
        if cfg.style == QWEN3:
            t[p + "self_attn.v_proj.weight"] = (kd, H)
        t[p + "self_attn.o_proj.weight"] = (H, qd)
        if cfg.attention_bias:
            t[p + "self_attn.q_proj.bias"] = (qd,)
            t[p + "self_attn.k_proj.bias"] = (kd,)
            if cfg.style == QWEN3:
                t[p + "self_attn.v_proj.bias"] = (kd,)
            t[p + "self_attn.o_proj.bias"] = (H,)
        t[p + "self_attn.q_norm.weight"] = (d,)
        t[p + "self_attn.k_norm.weight"] = (d,)
        t[p + "post_attention_layernorm.weight"] = (H,)
        if cfg.style == GEMMA4:
            t[p + "pre_feedforward_layernorm.weight"] = (H,)
            t[p + "post_feedforward_layernorm.weight"] = (H,)
            t[p + "layer_scalar"] = (1,)
        t[p + "mlp.gate_proj.weight"] = (F, H)
        t[p + "mlp.up_proj.weight"] = (F, H)
        t[p + "mlp.down_proj.weight"] = (H, F)
    t["norm.weight"] = (H,)
    t["lm_head.weight"] = (V, H)
    if r > 0:
        t["markov_head.markov_w1.weight"] = (V, r)
        t["markov_head.markov_w2.weight"] = (V, r)
        if cfg.markov_type == "gated":
            t["markov_head.gate_proj.weight"] = (r, H + r)
            t["markov_head.gate_proj.bias"] = (r,)
        elif cfg.markov_type == "rnn":
            t["markov_head.joint_proj.weight"] = (3 * r, 2 * r + H)
            t["markov_head.joint_proj.bias"] = (3 * r,)
    if cfg.conf:
        t["confidence_head.proj.weight"] = (1, H + (r if cfg.conf_with_markov else 0))
        t["confidence_head.proj.bias"] = (1,)
    return t


def _tensor_files(directory):
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            wm = json.load(f)["weight_map"]
        return wm, sorted(set(wm.values()))
    return None, ["model.safetensors"]


def _header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n).decode("utf-8"))


def stored_dtypes(directory):
    """{tensor name: safetensors dtype string} over all files of the directory."""
    _, files = _tensor_files(directory)
    out = {}
    for fn in files:
        for name, meta in _header(os.path.join(directory, fn)).items():
            if name != "__metadata__":
                out[name] = meta["dtype"]
    return out


def load(directory, dtype=torch.float64):
    """Load and validate a DeepSpec drafter directory."""
    with open(os.path.join(directory, "config.json")) as f:
        raw = json.load(f)
    dts = stored_dtypes(directory)
    cfg = parse_config(raw, dts.get("embed_tokens.weight", "F32"))
    tensors = llama_ref.read_hf_tensors(directory)
    want = expected_tensors(cfg)
    for name in tensors:
        if name not in want:
            raise ValueError(f"{directory}: unexpected tensor {name}")
    for name, shape in want.items():
        if name not in tensors:
            raise ValueError(f"{directory}: missing tensor {name}")
        if tuple(tensors[name].shape) != tuple(shape):
            raise ValueError(f"{directory}: tensor {name} has shape {list(tensors[name].shape)}, "
                             f"expected {list(shape)}")
    weights = {n: torch.from_numpy(np.ascontiguousarray(a)).to(dtype) for n, a in tensors.items()}
    return DeepSpecModel(cfg, weights)


# ---------------------------------------------------------------------------------------------
# Building blocks

def rms_norm(x, weight, eps):
    """x / sqrt(mean(x^2) + eps) * w over the last dim (plain w; weight None = no weight)."""
    y = x / torch.sqrt(torch.mean(x * x, dim=-1, keepdim=True) + eps)
    return y if weight is None else y * weight


def inv_freq(cfg):
    """(head_dim/2,) float64: theta^(-2j/d) for the first rope_pairs pairs, 0 (identity) after."""
    d = cfg.head_dim
    j = torch.arange(d // 2, dtype=torch.float64)
    f = cfg.rope_theta ** (-2.0 * j / d)
    f[cfg.rope_pairs:] = 0.0
    return f


def rope(x, positions, cfg):
    """Rotate x (n, heads, d) at float64 positions (n,), halves pairing (j, j + d/2)."""
    ang = positions.to(torch.float64)[:, None] * inv_freq(cfg)[None, :]
    cos = torch.cos(ang).to(x.dtype)[:, None, :]
    sin = torch.sin(ang).to(x.dtype)[:, None, :]
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)


def _linear(m, x, name):
    y = x @ m.w(name + ".weight").T
    b = m.weights.get(name + ".bias")
    return y if b is None else y + b


def _kv(m, layer, xn, positions):
    """K (RoPE'd) and V of rows xn (n, H) at `positions` for one layer: (n, nkv, d) each."""
    cfg = m.config
    n, nkv, d = xn.shape[0], cfg.n_kv_heads, cfg.head_dim
    p = f"layers.{layer}.self_attn."
    kraw = _linear(m, xn, p + "k_proj").reshape(n, nkv, d)
    k = rope(rms_norm(kraw, m.w(p + "k_norm.weight"), cfg.norm_eps), positions, cfg)
    if cfg.style == GEMMA4:
        v = rms_norm(kraw, None, cfg.norm_eps)
    else:
        v = _linear(m, xn, p + "v_proj").reshape(n, nkv, d)
    return k, v


def _mlp(m, layer, xn):
    p = f"layers.{layer}.mlp."
    g = _linear(m, xn, p + "gate_proj")
    u = _linear(m, xn, p + "up_proj")
    if m.config.style == GEMMA4:
        a = 0.5 * g * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (g + 0.044715 * g ** 3)))
    else:
        a = g * torch.sigmoid(g)
    return _linear(m, a * u, p + "down_proj")


def _attention(m, layer, xn, positions, ctx):
    """Block queries over [context rows ; block rows], no mask. xn (B, H) -> (B, H)."""
    cfg = m.config
    B, nq, nkv, d = xn.shape[0], cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    p = f"layers.{layer}.self_attn."
    q = _linear(m, xn, p + "q_proj").reshape(B, nq, d)
    q = rope(rms_norm(q, m.w(p + "q_norm.weight"), cfg.norm_eps), positions, cfg)
    kb, vb = _kv(m, layer, xn, positions)
    k = torch.cat((ctx.k[layer], kb), dim=0)
    v = torch.cat((ctx.v[layer], vb), dim=0)
    head_kv = torch.arange(nq) // (nq // nkv)
    k, v = k[:, head_kv, :], v[:, head_kv, :]
    scores = torch.einsum("qhd,khd->hqk", q, k) * cfg.attn_scale
    probs = torch.softmax(scores, dim=-1)
    out = torch.einsum("hqk,khd->qhd", probs, v).reshape(B, nq * d)
    return _linear(m, out, p + "o_proj")


# ---------------------------------------------------------------------------------------------
# Context and block

def empty_context(m):
    cfg = m.config
    z = torch.zeros(0, cfg.n_kv_heads, cfg.head_dim, dtype=m.w("fc.weight").dtype)
    return Context([z] * cfg.n_layers, [z] * cfg.n_layers, torch.zeros(0, dtype=torch.float64))


def project_context(m, rows, positions):
    """Context of tap rows (n, T*H) at the given absolute positions (any order)."""
    cfg = m.config
    rows = torch.as_tensor(np.asarray(rows), dtype=m.w("fc.weight").dtype).reshape(-1, cfg.n_taps * cfg.hidden)
    pos = torch.as_tensor(np.asarray(positions, dtype=np.float64))
    if pos.shape[0] != rows.shape[0]:
        raise ValueError("one position per context row")
    c = rms_norm(rows @ m.w("fc.weight").T, m.w("hidden_norm.weight"), cfg.norm_eps)
    ks, vs = [], []
    for i in range(cfg.n_layers):
        k, v = _kv(m, i, c, pos)
        ks.append(k)
        vs.append(v)
    return Context(ks, vs, pos)


def append_context(m, ctx, rows):
    """ctx extended by tap rows at positions len(ctx), len(ctx)+1, ..."""
    n0 = len(ctx)
    rows = np.asarray(rows).reshape(-1, m.config.n_taps * m.config.hidden)
    new = project_context(m, rows, np.arange(n0, n0 + rows.shape[0]))
    return Context([torch.cat((a, b)) for a, b in zip(ctx.k, new.k)],
                   [torch.cat((a, b)) for a, b in zip(ctx.v, new.v)],
                   torch.cat((ctx.positions, new.positions)))


def block_input(m, anchor):
    cfg = m.config
    ids = torch.tensor([int(anchor)] + [cfg.mask_token_id] * (cfg.block_size - 1), dtype=torch.long)
    return m.w("embed_tokens.weight")[ids] * cfg.embed_scale


def block_forward(m, ctx, anchor, s=None, x=None):
    """Backbone of one block: returns (h (B, H) final normed hidden, U (B, V)).

    s defaults to len(ctx); x (B, H) replaces the (scaled) block embeddings when given."""
    cfg = m.config
    s = len(ctx) if s is None else s
    if x is None:
        x = block_input(m, anchor)
    pos = torch.arange(s, s + x.shape[0], dtype=torch.float64)
    for i in range(cfg.n_layers):
        p = f"layers.{i}."
        if cfg.style == QWEN3:
            x = x + _attention(m, i, rms_norm(x, m.w(p + "input_layernorm.weight"), cfg.norm_eps), pos, ctx)
            x = x + _mlp(m, i, rms_norm(x, m.w(p + "post_attention_layernorm.weight"), cfg.norm_eps))
        else:
            a = _attention(m, i, rms_norm(x, m.w(p + "input_layernorm.weight"), cfg.norm_eps), pos, ctx)
            x = x + rms_norm(a, m.w(p + "post_attention_layernorm.weight"), cfg.norm_eps)
            f = _mlp(m, i, rms_norm(x, m.w(p + "pre_feedforward_layernorm.weight"), cfg.norm_eps))
            x = x + rms_norm(f, m.w(p + "post_feedforward_layernorm.weight"), cfg.norm_eps)
            x = x * m.w(p + "layer_scalar")
    h = rms_norm(x, m.w("norm.weight"), cfg.norm_eps)
    U = h @ m.w("lm_head.weight").T
    if cfg.softcap:
        U = torch.tanh(U / cfg.softcap) * cfg.softcap
    return h, U


def markov_bias(m, h_k, prev, state):
    """(bias (V,), new state) of one slot; state is the rnn s_{k-1} (ignored otherwise)."""
    cfg = m.config
    r = cfg.markov_rank
    if r == 0:
        return torch.zeros(cfg.vocab, dtype=h_k.dtype), state
    e = m.w("markov_head.markov_w1.weight")[prev]
    if cfg.markov_type == "vanilla":
        u = e
    elif cfg.markov_type == "gated":
        u = torch.sigmoid(_linear(m, torch.cat((h_k, e)), "markov_head.gate_proj")) * e
    else:
        z = _linear(m, torch.cat((state, e, h_k)), "markov_head.joint_proj")
        g, c, o = z[:r], z[r:2 * r], z[2 * r:]
        state = torch.sigmoid(g) * state + (1.0 - torch.sigmoid(g)) * torch.tanh(c)
        u = torch.tanh(o)
    return m.w("markov_head.markov_w2.weight") @ u, state


def confidence(m, h_k, prev):
    cfg = m.config
    if not cfg.conf:
        return float("nan")
    feat = h_k
    if cfg.conf_with_markov:
        feat = torch.cat((h_k, m.w("markov_head.markov_w1.weight")[prev]))
    return float(torch.sigmoid(_linear(m, feat, "confidence_head.proj"))[0])


def walk(m, h, U, anchor, forced=None):
    """The greedy sequential Markov walk over backbone outputs h (B, H), U (B, V).

    With `forced` (B token ids), prev follows the forced tokens instead of the argmax (tokens
    still report the argmax) -- to compare against another engine's walk near ties."""
    cfg = m.config
    B = h.shape[0]
    prev = int(anchor)
    state = torch.zeros(cfg.markov_rank, dtype=h.dtype)
    tokens, logits, conf, margins = [], [], [], []
    for k in range(B):
        bias, state = markov_bias(m, h[k], prev, state)
        lk = U[k] + bias
        tok = int(torch.argmax(lk))  # first maximal index
        top2 = torch.topk(lk, 2).values if lk.shape[0] > 1 else torch.stack((lk[0], lk[0] - math.inf))
        margins.append(float(top2[0] - top2[1]))
        conf.append(confidence(m, h[k], prev))
        tokens.append(tok)
        logits.append(lk)
        prev = tok if forced is None else int(forced[k])
    return tokens, torch.stack(logits), torch.tensor(conf, dtype=torch.float64), margins


def draft(m, ctx, anchor, forced=None, s=None):
    """One draft round: anchor at position s (default len(ctx)) after the context rows."""
    h, U = block_forward(m, ctx, anchor, s=s)
    tokens, logits, conf, margins = walk(m, h, U, anchor, forced=forced)
    return DraftResult(tokens, logits, conf, U, h, margins)


def with_config(m, **changes):
    """A shallow copy of m with config fields changed (weights shared)."""
    return DeepSpecModel(replace(m.config, **changes), dict(m.weights))
