"""Independent PyTorch references (float64) of the Hugging Face decoder architectures we load:
Llama (with rope_scaling default / linear / llama3), Qwen2, Qwen3, Gemma 3 text, Gemma 4 text
(dense and the E-series: per-layer embeddings, KV sharing). Written from transformers' modeling code semantics (modeling_llama, modeling_qwen2,
modeling_qwen3, modeling_gemma3, modeling_gemma4), in its style: the whole sequence at once,
(batch=1, heads, seq, head_dim) tensors, rotate_half RoPE, repeat_kv, an additive mask matrix
(causal, plus the sliding window on sliding layers), eager softmax attention. Nothing here
mirrors our C code's structure (KV cache, ragged rows, transposed cache).

    LlamaDecoderLayer:   h = x + o_proj(attn(input_layernorm(x)));  x = h + mlp(post_attention_layernorm(h))
    Gemma3DecoderLayer:  h = x + post_attention_layernorm(attn(input_layernorm(x)))
                         x = h + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(h)))
    Gemma4:              as Gemma 3, then (E-series) x = x + post_per_layer_input_norm(per_layer_projection(
                             gelu_tanh(per_layer_input_gate(x)) * per_layer_input[i])), then x = x * layer_scalar

Key facts (per transformers):
- Llama RoPE inv_freq = theta^(-2i/d); "linear" divides by factor; "llama3" divides the low
  frequencies (wavelength > orig/low_freq_factor) by factor, keeps the high ones (wavelength <
  orig/high_freq_factor) and interpolates between with smooth = (orig/wavelen - low)/(high - low).
- Qwen2: q/k/v projections have biases, o_proj none. Qwen3: RMSNorm on each q/k head before RoPE.
- Gemma3RMSNorm: x / rms(x) * (1 + w) in float; Gemma3 embeddings × sqrt(hidden) cast to the
  weight dtype; scaling = query_pre_attn_scalar^-0.5; sliding layers ((i+1) % pattern != 0, or
  layer_types) attend to keys with q_pos - k_pos < sliding_window and use RoPE base
  rope_local_base_freq, global layers rope_theta with rope_scaling; MLP down(gelu_tanh(gate) * up);
  logits = tanh(logits / c) * c with c = final_logit_softcapping.
- Gemma 4: RMSNorm x / rms(x) * w; v_norm = weightless RMSNorm on every layer; scaling 1.0; full
  layers use global_head_dim and, with attention_k_eq_v, num_global_key_value_heads and no v_proj
  (values = raw k_proj output, then v_norm); RoPE per layer type from rope_parameters, "proportional"
  rotating only the first int(partial_rotary_factor * d // 2) frequencies theta^(-2i/d) (others 0).
- Gemma 4 per-layer embeddings (Gemma4TextModel.get_per_layer_inputs / project_per_layer_inputs):
  per_layer_inputs = embed_tokens_per_layer[ids] * sqrt(P) (scale cast to the weight dtype),
  reshaped (n, layers, P); projection = per_layer_model_projection(inputs_embeds) * hidden^-0.5,
  reshaped (n, layers, P), RMSNorm over P with per_layer_projection_norm; the layer inputs are
  (projection + per_layer_inputs) * 2^-0.5. With use_double_wide_mlp, KV-shared layers' MLPs are
  2 x intermediate_size wide (the weights' shapes say so here).
- Gemma 4 KV sharing (Gemma4TextAttention): layers i >= num_hidden_layers - num_kv_shared_layers
  compute no keys / values; they use shared_kv_states[layer_type], the keys / values (after k_norm,
  v_norm, RoPE) that the last unshared layer of the same type stored, with their own mask.

- Mixture of experts. Qwen2MoeSparseMoeBlock / Qwen3MoeSparseMoeBlock (modeling_qwen2_moe,
  modeling_qwen3_moe): router_logits = mlp.gate(x); p = softmax(router_logits) in float; the top
  num_experts_per_tok of p; divided by their sum iff norm_topk_prob; out = Σ over the hit experts of
  index_add(expert(x[rows]) * w[rows]), expert = down(silu(gate(x)) * up(x)) of width
  moe_intermediate_size. Layer i is sparse iff i not in mlp_only_layers and (i + 1) %
  decoder_sparse_step == 0, else a dense MLP of intermediate_size. Qwen2-MoE adds
  sigmoid(shared_expert_gate(x)) * shared_expert(x). Gemma4TextDecoderLayer with enable_moe_block:
  h1 = post_feedforward_layernorm_1(mlp(pre_feedforward_layernorm(r))); the router
  (Gemma4TextRouter) reads the residual r: weightless RMSNorm(r) * router.scale * hidden^-0.5 ->
  router.proj -> softmax -> top top_k_experts -> / sum -> * per_expert_scale[index]; h2 =
  post_feedforward_layernorm_2(experts(pre_feedforward_layernorm_2(r))), experts with gelu_tanh;
  x = r + post_feedforward_layernorm(h1 + h2). Expert weights are read from whichever layout the
  checkpoint has (per expert, fused gate_up_proj [E, 2I, H] with gate rows first / down_proj, or
  stacked switch_mlp / switch_glu), as transformers' weight conversion does.

Entry point: `load(directory)` -> model; `forward(model, tokens, taps)` -> ForwardResult
(logits, taps {layer: (n, dim)}, hidden after the final norm).
"""

import json
import math
import os

import numpy as np
import torch

from llama_ref import ForwardResult, read_hf_tensors

DT = torch.float64


class HFModel:
    def __init__(self, cfg, text, tensors, arch):
        self.cfg, self.c, self.t, self.arch = cfg, text, tensors, arch


def _bf16_round(x):
    a = np.asarray([x], dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((a + 0x7FFF + ((a >> 16) & 1)) >> 16) << 16
    return float(r.astype(np.uint32).view(np.float32)[0])


def load(directory):
    with open(os.path.join(directory, "config.json")) as f:
        cfg = json.load(f)
    arch = cfg["architectures"][0]
    text = cfg.get("text_config", cfg) if "ConditionalGeneration" in arch else cfg
    raw = read_hf_tensors(directory)
    tensors = {k: torch.from_numpy(np.array(v)).to(DT) for k, v in raw.items()}
    m = HFModel(cfg, text, tensors, arch)
    m.prefix = next(p for p in ("model.", "model.language_model.", "language_model.model.")
                    if p + "embed_tokens.weight" in tensors)
    m.dtype = text.get("torch_dtype", cfg.get("torch_dtype", "float32"))
    return m


def family(m):
    a = m.arch
    if a.startswith("Gemma3"):
        return "gemma3"
    if a.startswith("Gemma4"):
        return "gemma4"
    if a.startswith("Qwen2"):
        return "qwen2"
    if a.startswith("Qwen3"):
        return "qwen3"
    return "llama"


# ---- building blocks (transformers semantics) -------------------------------------------------

def rms(x, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def norm(m, x, w):
    eps = m.c.get("rms_norm_eps", 1e-6)
    f = family(m)
    if w is None:
        return rms(x, eps)
    if f == "gemma3":
        return rms(x, eps) * (1.0 + w)
    return rms(x, eps) * w


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def inv_freq_for(params, dim):
    """transformers' ROPE_INIT_FUNCTIONS for the types we support."""
    base = params.get("rope_theta", 10000.0)
    rtype = params.get("rope_type", params.get("type", "default"))
    if rtype == "proportional":
        n_rot = int(params.get("partial_rotary_factor", 1.0) * dim // 2)
        f = 1.0 / (base ** (torch.arange(0, 2 * n_rot, 2, dtype=DT) / dim))
        f = torch.cat([f, torch.zeros(dim // 2 - n_rot, dtype=DT)])
        return f / params.get("factor", 1.0)
    f = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=DT) / dim))
    if rtype == "default":
        return f
    if rtype == "linear":
        return f / params["factor"]
    if rtype == "llama3":
        factor, low, high = params["factor"], params["low_freq_factor"], params["high_freq_factor"]
        old = params["original_max_position_embeddings"]
        low_wl, high_wl = old / low, old / high
        wavelen = 2 * math.pi / f
        f_l = torch.where(wavelen > low_wl, f / factor, f)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * f_l / factor + smooth * f_l
        is_medium = ~(wavelen < high_wl) & ~(wavelen > low_wl)
        return torch.where(is_medium, smoothed, f_l)
    raise NotImplementedError(rtype)


def layer_types(m):
    c, f = m.c, family(m)
    n = c["num_hidden_layers"]
    if c.get("layer_types"):
        return list(c["layer_types"])
    if f == "gemma3":
        p = c.get("sliding_window_pattern", 6)
        return ["sliding_attention" if (i + 1) % p else "full_attention" for i in range(n)]
    return ["full_attention"] * n


def rope_params(m, ltype):
    c, f = m.c, family(m)
    if "rope_parameters" in c:
        rp = c["rope_parameters"]
        return rp[ltype] if ltype in rp else rp
    theta = c.get("rope_theta", 1e6 if f == "gemma3" else 10000.0)
    if f == "gemma3" and ltype == "sliding_attention":
        return {"rope_type": "default", "rope_theta": c.get("rope_local_base_freq", 10000.0)}
    p = dict(c.get("rope_scaling") or {"rope_type": "default"})
    p["rope_theta"] = theta
    return p


def geometry(m, ltype):
    """(head_dim, n_kv_heads, k_eq_v) of a layer of this type."""
    c = m.c
    hd = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    kv = c.get("num_key_value_heads", c["num_attention_heads"])
    if family(m) == "gemma4" and ltype == "full_attention":
        keqv = bool(c.get("attention_k_eq_v", False))
        return c.get("global_head_dim") or hd, (c.get("num_global_key_value_heads") or kv) if keqv else kv, keqv
    return hd, kv, False


def linear(m, name, x):
    y = x @ m.t[name + ".weight"].T
    if name + ".bias" in m.t:
        y = y + m.t[name + ".bias"]
    return y


def kv_sharing(m):
    """(first shared layer index, {layer type: the last unshared layer of that type})."""
    c = m.c
    n = c["num_hidden_layers"]
    first = n - (c.get("num_kv_shared_layers") or 0) if family(m) == "gemma4" else n
    types = layer_types(m)
    store = {}
    for j in range(first):
        store[types[j]] = j
    return first, store


def attention(m, i, ltype, x, pos, shared_kv):
    c, f, t = m.c, family(m), m.t
    p = f"{m.prefix}layers.{i}.self_attn."
    n = x.shape[0]
    nh = c["num_attention_heads"]
    hd, nkv, keqv = geometry(m, ltype)
    first_shared, store = kv_sharing(m)
    q = linear(m, p + "q_proj", x).view(n, nh, hd).transpose(0, 1)
    if f in ("qwen3", "gemma3", "gemma4"):
        q = norm(m, q, t[p + "q_norm.weight"])
    inv = inv_freq_for(rope_params(m, ltype), hd)
    freqs = pos[:, None].to(DT) * inv[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[None], emb.sin()[None]
    q = q * cos + rotate_half(q) * sin
    if i >= first_shared:  # KV sharing: the stored keys / values of the last unshared layer of this type
        k, v = shared_kv[ltype]
    else:
        k = linear(m, p + "k_proj", x).view(n, nkv, hd).transpose(0, 1)
        if keqv and p + "v_proj.weight" not in t:
            v = k.clone()
        else:
            v = linear(m, p + "v_proj", x).view(n, nkv, hd).transpose(0, 1)
        if f in ("qwen3", "gemma3", "gemma4"):
            k = norm(m, k, t[p + "k_norm.weight"])
        if f == "gemma4":
            v = norm(m, v, None)
        k = k * cos + rotate_half(k) * sin
        if getattr(m, "kv_half", False):  # a cache of halves: each value computed in f32, then rounded
            k = k.to(torch.float32).to(torch.float16).to(DT)
            v = v.to(torch.float32).to(torch.float16).to(DT)
        if store.get(ltype) == i and first_shared < c["num_hidden_layers"]:
            shared_kv[ltype] = (k, v)
    rep = nh // nkv
    k = k.repeat_interleave(rep, dim=0)
    v = v.repeat_interleave(rep, dim=0)
    if f == "gemma3":
        scaling = c.get("query_pre_attn_scalar", 256) ** -0.5
    elif f == "gemma4":
        scaling = 1.0
    else:
        scaling = hd ** -0.5
    mask = torch.zeros(n, n, dtype=DT)
    qi, ki = pos[:, None], pos[None, :]
    allowed = ki <= qi
    if ltype == "sliding_attention" and c.get("sliding_window"):
        allowed = allowed & (qi - ki < c["sliding_window"])
    mask[~allowed] = float("-inf")
    w = torch.softmax(q @ k.transpose(1, 2) * scaling + mask, dim=-1)
    out = (w @ v).transpose(0, 1).reshape(n, nh * hd)
    return linear(m, p + "o_proj", out)


def mlp(m, i, x):
    p = f"{m.prefix}layers.{i}.mlp."
    g = linear(m, p + "gate_proj", x)
    u = linear(m, p + "up_proj", x)
    if family(m).startswith("gemma"):
        a = torch.nn.functional.gelu(g, approximate="tanh")
    else:
        a = torch.nn.functional.silu(g)
    return linear(m, p + "down_proj", a * u)


def expert_weights(m, i):
    """[(gate, up, down)] of layer i's experts, from whichever layout the checkpoint has."""
    t = m.t
    base = f"{m.prefix}layers.{i}." + ("experts" if family(m) == "gemma4" else "mlp.experts")
    stack = f"{m.prefix}layers.{i}." + ("experts.switch_glu" if family(m) == "gemma4" else "mlp.switch_mlp")
    if base + ".gate_up_proj" in t:
        gu, dn = t[base + ".gate_up_proj"], t[base + ".down_proj"]
        gate, up = gu.chunk(2, dim=1)
        return [(gate[e], up[e], dn[e]) for e in range(gu.shape[0])]
    if stack + ".gate_proj.weight" in t:
        g, u, d = (t[f"{stack}.{k}.weight"] for k in ("gate_proj", "up_proj", "down_proj"))
        return [(g[e], u[e], d[e]) for e in range(g.shape[0])]
    return [(t[f"{base}.{e}.gate_proj.weight"], t[f"{base}.{e}.up_proj.weight"], t[f"{base}.{e}.down_proj.weight"])
            for e in range(m.c["num_experts"])]


def is_sparse(m, i):
    c = m.c
    if family(m) == "gemma4":
        return bool(c.get("enable_moe_block"))
    if not c.get("num_experts"):
        return False
    return i not in (c.get("mlp_only_layers") or []) and (i + 1) % c.get("decoder_sparse_step", 1) == 0


def experts_forward(m, i, x, top_k_index, top_k_weights):
    """MixtralExperts-style: loop over the hit experts, index_add the weighted outputs."""
    act = (lambda g: torch.nn.functional.gelu(g, approximate="tanh")) if family(m) == "gemma4" \
        else torch.nn.functional.silu
    experts = expert_weights(m, i)
    final = torch.zeros_like(x)
    mask = torch.nn.functional.one_hot(top_k_index, num_classes=len(experts)).permute(2, 1, 0)
    for e in range(len(experts)):
        pos, rows = torch.where(mask[e])
        if len(rows) == 0:
            continue
        g, u, d = experts[e]
        h = act(x[rows] @ g.T) * (x[rows] @ u.T)
        final.index_add_(0, rows, (h @ d.T) * top_k_weights[rows, pos, None])
    return final


def qwen_sparse_block(m, i, x):
    c, t = m.c, m.t
    p = f"{m.prefix}layers.{i}.mlp."
    probs = torch.softmax(x @ t[p + "gate.weight"].T, dim=1)
    w, idx = torch.topk(probs, c["num_experts_per_tok"], dim=-1)
    if c.get("norm_topk_prob", False):
        w = w / w.sum(dim=-1, keepdim=True)
    out = experts_forward(m, i, x, idx, w)
    if c.get("shared_expert_intermediate_size"):
        s = linear(m, p + "shared_expert.down_proj", torch.nn.functional.silu(linear(m, p + "shared_expert.gate_proj", x))
                   * linear(m, p + "shared_expert.up_proj", x))
        out = out + torch.sigmoid(linear(m, p + "shared_expert_gate", x)) * s
    return out


def gemma4_router(m, i, r):
    c, t = m.c, m.t
    p = f"{m.prefix}layers.{i}.router."
    h = norm(m, r, None) * t[p + "scale"] * c["hidden_size"] ** -0.5
    probs = torch.softmax(h @ t[p + "proj.weight"].T, dim=-1)
    w, idx = torch.topk(probs, c["top_k_experts"], dim=-1)
    w = w / w.sum(dim=-1, keepdim=True)
    return w * t[p + "per_expert_scale"][idx], idx


def _in_dtype(m, s):
    """A Python float scale as Gemma's scaled embeddings use it: cast to the weight dtype."""
    if m.dtype == "bfloat16":
        return _bf16_round(s)
    if m.dtype == "float16":
        return float(np.float16(s))
    return float(np.float32(s))


def per_layer_inputs(m, ids, inputs_embeds):
    """(n, layers, P): Gemma4TextModel.project_per_layer_inputs(inputs_embeds, get_per_layer_inputs(ids))."""
    c, t, pre = m.c, m.t, m.prefix
    n, L, P = len(ids), c["num_hidden_layers"], c["hidden_size_per_layer_input"]
    tok = t[pre + "embed_tokens_per_layer.weight"][ids] * _in_dtype(m, P ** 0.5)
    tok = tok.reshape(n, L, P)
    proj = (inputs_embeds @ t[pre + "per_layer_model_projection.weight"].T) * c["hidden_size"] ** -0.5
    proj = norm(m, proj.reshape(n, L, P), t[pre + "per_layer_projection_norm.weight"])
    return (proj + tok) * 2.0 ** -0.5


def forward(m, tokens, taps=(), kv_half=False):
    """kv_half: keys and values rounded to IEEE half as they are cached (ds_model_params.kv_f16)."""
    m.kv_half = kv_half
    c, f, t = m.c, family(m), m.t
    pre = m.prefix
    ids = torch.tensor(tokens, dtype=torch.long)
    pos = torch.arange(len(tokens))
    x = t[pre + "embed_tokens.weight"][ids]
    if f.startswith("gemma"):
        x = x * _in_dtype(m, math.sqrt(c["hidden_size"]))
    ple = per_layer_inputs(m, ids, x) if f == "gemma4" and c.get("hidden_size_per_layer_input") else None
    shared_kv = {}
    out_taps = {}
    if -1 in taps:
        out_taps[-1] = x.clone()
    types = layer_types(m)
    for i in range(c["num_hidden_layers"]):
        p = f"{pre}layers.{i}."
        if f.startswith("gemma"):
            h = norm(m, attention(m, i, types[i], norm(m, x, t[p + "input_layernorm.weight"]), pos, shared_kv),
                     t[p + "post_attention_layernorm.weight"])
            x = x + h
            h = mlp(m, i, norm(m, x, t[p + "pre_feedforward_layernorm.weight"]))
            if f == "gemma4" and is_sparse(m, i):
                h1 = norm(m, h, t[p + "post_feedforward_layernorm_1.weight"])
                w, idx = gemma4_router(m, i, x)
                h2 = experts_forward(m, i, norm(m, x, t[p + "pre_feedforward_layernorm_2.weight"]), idx, w)
                h = h1 + norm(m, h2, t[p + "post_feedforward_layernorm_2.weight"])
            x = x + norm(m, h, t[p + "post_feedforward_layernorm.weight"])
            if ple is not None:
                g = torch.nn.functional.gelu(x @ t[p + "per_layer_input_gate.weight"].T, approximate="tanh")
                h = (g * ple[:, i, :]) @ t[p + "per_layer_projection.weight"].T
                x = x + norm(m, h, t[p + "post_per_layer_input_norm.weight"])
            if f == "gemma4" and p + "layer_scalar" in t:
                x = x * t[p + "layer_scalar"]
        else:
            x = x + attention(m, i, types[i], norm(m, x, t[p + "input_layernorm.weight"]), pos, shared_kv)
            n = norm(m, x, t[p + "post_attention_layernorm.weight"])
            x = x + (qwen_sparse_block(m, i, n) if is_sparse(m, i) else mlp(m, i, n))
        if i in taps:
            out_taps[i] = x.clone()
    hidden = norm(m, x, t[pre + "norm.weight"])
    head = t.get("lm_head.weight", t.get("language_model.lm_head.weight", t[pre + "embed_tokens.weight"]))
    logits = hidden @ head.T
    cap = c.get("final_logit_softcapping")
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return ForwardResult(logits=logits, taps=out_taps, hidden=hidden)
