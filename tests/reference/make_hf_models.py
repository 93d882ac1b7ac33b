#!/usr/bin/python3
"""Write random tiny Hugging Face checkpoints of each supported architecture.

    make_hf_models.py OUT_DIR --arch llama3|mistral|qwen2|qwen3|gemma3|gemma3_mm|gemma4|gemma4e|gemma4e_mm|qwen3_moe|
        qwen2_moe|gemma4_moe [--dtype f32|bf16] [--seed 1] [--dim 64 --layers 4 --heads 4 --kv-heads 2 --ffn 96
        --vocab 300 --head-dim 16] [--experts 8 --top-k 2 --moe-ffn 32] [--layout per_expert|fused|switch]

config.json follows transformers' field names for the architecture (see hf_ref.py for what each
field means); tensor values come from make_hf_llama.random_tensor (seeded by the tensor name), so
they are the same for any dtype apart from its rounding. Tensors are written one at a time (large
benchmark models never sit in memory twice). Also writes generation_config.json with a list of
eos ids.

Each architecture exercises its distinctive features on purpose: llama3 (llama3 RoPE scaling whose
three frequency bands all occur, attention_bias), mistral (MistralForCausalLM: no biases, no RoPE
scaling, sliding_window null, untied), qwen2 (q/k/v biases, tied), qwen3 (q/k norms,
head_dim != hidden/heads), gemma3 (1 + w norms, sandwich norms, GeGLU, sliding window 5 on 2 of 4
layers, local/global RoPE bases, linear scaling, query_pre_attn_scalar, final softcap), gemma3_mm
(the same text model inside Gemma3ForConditionalGeneration, with vision tower and projector
tensors, one 4-D, that must be ignored), gemma4 (plain-w norms, v_norm, global layers with a larger head_dim and K = V, proportional
partial RoPE, attention scale 1, layer_scalar, softcap), gemma4e (the E-series text model: per-layer
embeddings of width 8 with their table, projection and per-layer gate / projection / norm; layer
types s s f s s f ... (last full); the last layers // 2 layers share KV (for 6 layers: 3 and 4 read
layer 1's cache, 5 reads layer 2's) and have no k/v tensors; use_double_wide_mlp, so the shared
layers' MLPs are twice as wide; full layers with a larger head_dim, separate v_proj, proportional
RoPE), gemma4e_mm (the same inside Gemma4ForConditionalGeneration, with audio and vision tower
and embedder tensors that must be dropped). Use at least 6 layers for gemma4e (with fewer, a shared
full layer has no source: the loader refuses it).

Mixture of experts (8 experts, top 2, expert width 32 unless told): qwen3_moe (Qwen3MoeForCausalLM:
q/k norms, norm_topk_prob true, mlp_only_layers [1]: layer 1 keeps a dense MLP), qwen2_moe
(Qwen2MoeForCausalLM: q/k/v biases, tied, norm_topk_prob false, decoder_sparse_step 2: layers 1, 3, ..
are sparse, a shared expert of width 48 with its sigmoid gate), gemma4_moe (the gemma4 text model
with enable_moe_block: a dense MLP plus router (proj, scale, per_expert_scale), experts and the three
extra norms on every layer). The experts' layout (--layout): per_expert (mlp.experts.E.gate_proj.weight,
...; Hugging Face checkpoints), fused (experts.gate_up_proj [E, 2I, H] gate rows first,
experts.down_proj [E, H, I]: transformers 5, Gemma 4) or switch (mlx-lm's stacked
switch_mlp / switch_glu .gate_proj.weight [E, I, H]); the values are the same in every layout (each
expert's matrix is drawn under its per-expert name), so the layouts hold one model.

With --tokenizer (option tokenizer=True), the directory also gets a tiny Gemma-style tokenizer
(write_gemma_tokenizer: SentencePiece-style BPE with byte fallback, <bos> 1, <eos> 2,
<end_of_turn> 3, <start_of_turn> 4, a Gemma chat template) so that text commands run on it; it
needs a vocabulary of at least 300.

As a module: `make_hf_model(out_dir, arch, **opts)` returns the output directory.
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_hf_llama import DTYPES, random_tensor, split_shards, write_safetensors  # noqa: E402

ARCHS = ("llama3", "mistral", "qwen2", "qwen3", "gemma3", "gemma3_mm", "gemma4", "gemma4e", "gemma4e_mm", "qwen3_moe",
         "qwen2_moe", "gemma4_moe")
PLE_DIM = 8
N_EXPERTS, TOP_K, MOE_FFN, SHARED_FFN = 8, 2, 32, 48
LAYOUTS = ("per_expert", "fused", "switch")


def _config(arch, dim, layers, heads, kv_heads, ffn, vocab, head_dim, dtype):
    base = {
        "hidden_size": dim, "intermediate_size": ffn, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": kv_heads, "vocab_size": vocab,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "torch_dtype": DTYPES[dtype][1],
        "bos_token_id": 1, "eos_token_id": 2,
    }
    if arch == "llama3":
        return {**base, "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
                "rope_theta": 10000.0, "attention_bias": True, "tie_word_embeddings": False,
                "head_dim": head_dim,
                "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
                "eos_token_id": [2, 5]}
    if arch == "mistral":
        return {**base, "architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_act": "silu",
                "rope_theta": 1000000.0, "tie_word_embeddings": False, "sliding_window": None, "head_dim": head_dim}
    if arch == "qwen2":
        return {**base, "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu",
                "rope_theta": 1000000.0, "tie_word_embeddings": True, "use_sliding_window": False,
                "sliding_window": 32}
    if arch == "qwen3":
        return {**base, "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_act": "silu",
                "rope_theta": 1000000.0, "tie_word_embeddings": False, "head_dim": 2 * head_dim,
                "attention_bias": False, "layer_types": ["full_attention"] * layers}
    if arch in ("gemma3", "gemma3_mm"):
        text = {**base, "model_type": "gemma3_text", "hidden_activation": "gelu_pytorch_tanh",
                "head_dim": head_dim, "query_pre_attn_scalar": 24, "sliding_window": 5,
                "sliding_window_pattern": 2, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
                "rope_scaling": {"rope_type": "linear", "factor": 4.0},
                "final_logit_softcapping": 10.0, "attn_logit_softcapping": None,
                "tie_word_embeddings": True}
        if arch == "gemma3":
            return {**text, "architectures": ["Gemma3ForCausalLM"]}
        return {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
                "text_config": text, "vision_config": {"hidden_size": 8, "model_type": "siglip_vision_model"},
                "eos_token_id": [2, 7]}
    if arch == "gemma4":
        types = ["sliding_attention", "full_attention"] * (layers // 2) + ["sliding_attention"] * (layers % 2)
        return {**base, "architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text",
                "hidden_activation": "gelu_pytorch_tanh", "head_dim": head_dim, "global_head_dim": 2 * head_dim,
                "num_global_key_value_heads": 1, "attention_k_eq_v": True, "sliding_window": 6,
                "layer_types": types, "final_logit_softcapping": 10.0, "tie_word_embeddings": True,
                "hidden_size_per_layer_input": 0, "enable_moe_block": False, "num_kv_shared_layers": 0,
                "rope_parameters": {
                    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                    "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                       "rope_theta": 1000000.0}}}
    if arch in ("gemma4e", "gemma4e_mm"):
        types = ["sliding_attention" if (i + 1) % 3 else "full_attention" for i in range(layers)]
        types[-1] = "full_attention"
        text = {**base, "model_type": "gemma4_text", "hidden_activation": "gelu_pytorch_tanh",
                "head_dim": head_dim, "global_head_dim": 2 * head_dim, "attention_k_eq_v": False,
                "num_global_key_value_heads": None, "sliding_window": 6, "layer_types": types,
                "final_logit_softcapping": 10.0, "tie_word_embeddings": True,
                "hidden_size_per_layer_input": PLE_DIM, "vocab_size_per_layer_input": vocab,
                "num_kv_shared_layers": layers // 2, "use_double_wide_mlp": True, "enable_moe_block": False,
                "rope_parameters": {
                    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                    "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                       "rope_theta": 1000000.0}}}
        if arch == "gemma4e":
            return {**text, "architectures": ["Gemma4ForCausalLM"]}
        return {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4", "text_config": text,
                "vision_config": {"hidden_size": 8, "model_type": "gemma4_vision"},
                "audio_config": {"hidden_size": 8, "model_type": "gemma4_audio"}, "eos_token_id": [2, 7]}
    if arch == "qwen3_moe":
        c = _config("qwen3", dim, layers, heads, kv_heads, ffn, vocab, head_dim, dtype)
        return {**c, "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "num_experts": N_EXPERTS,
                "num_experts_per_tok": TOP_K, "moe_intermediate_size": MOE_FFN, "norm_topk_prob": True,
                "decoder_sparse_step": 1, "mlp_only_layers": [1], "router_aux_loss_coef": 0.001,
                "output_router_logits": False}
    if arch == "qwen2_moe":
        c = _config("qwen2", dim, layers, heads, kv_heads, ffn, vocab, head_dim, dtype)
        return {**c, "architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", "num_experts": N_EXPERTS,
                "num_experts_per_tok": TOP_K, "moe_intermediate_size": MOE_FFN, "norm_topk_prob": False,
                "shared_expert_intermediate_size": SHARED_FFN, "decoder_sparse_step": 2, "mlp_only_layers": []}
    if arch == "gemma4_moe":
        c = _config("gemma4", dim, layers, heads, kv_heads, ffn, vocab, head_dim, dtype)
        return {**c, "enable_moe_block": True, "num_experts": N_EXPERTS, "top_k_experts": TOP_K,
                "moe_intermediate_size": MOE_FFN}
    raise ValueError(f"unknown arch {arch}")


def sparse_layers(c):
    """Which layers have routed experts (transformers' Qwen*MoeDecoderLayer / Gemma 4 rule)."""
    n = c["num_hidden_layers"]
    if c.get("enable_moe_block"):
        return [True] * n
    if not c.get("num_experts"):
        return [False] * n
    step, only = c.get("decoder_sparse_step", 1), c.get("mlp_only_layers") or []
    return [i not in only and (i + 1) % step == 0 for i in range(n)]


def _expert_plan(mp, sp, n, I, H, layout):
    """The experts of one layer: per-expert module path mp ("...mlp.experts"), stacked path sp."""
    names = [{k: f"{mp}.{e}.{k}.weight" for k in ("gate_proj", "up_proj", "down_proj")} for e in range(n)]
    if layout == "per_expert":
        out = []
        for e in range(n):
            out += [(names[e]["gate_proj"], (I, H), "linear"), (names[e]["up_proj"], (I, H), "linear"),
                    (names[e]["down_proj"], (H, I), "linear")]
        return out
    if layout == "fused":
        return [(mp + ".gate_up_proj", (n, 2 * I, H), ("stack", [[(names[e]["gate_proj"], (I, H)),
                                                                  (names[e]["up_proj"], (I, H))] for e in range(n)])),
                (mp + ".down_proj", (n, H, I), ("stack", [[(names[e]["down_proj"], (H, I))] for e in range(n)]))]
    if layout == "switch":
        return [(f"{sp}.{k}.weight", (n, H, I) if k == "down_proj" else (n, I, H),
                 ("stack", [[(names[e][k], (H, I) if k == "down_proj" else (I, H))] for e in range(n)]))
                for k in ("gate_proj", "up_proj", "down_proj")]
    raise ValueError(layout)


def _plan(arch, cfg, layout="per_expert"):
    """(name, shape, kind) of every tensor."""
    c = cfg.get("text_config", cfg)
    dim, ffn, vocab = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    heads, kv = c["num_attention_heads"], c["num_key_value_heads"]
    hd = c.get("head_dim") or dim // heads
    gemma = arch.startswith("gemma")
    base = {"qwen3_moe": "qwen3", "qwen2_moe": "qwen2"}.get(arch, arch)
    e_series = arch.startswith("gemma4e")
    pre = "model.language_model." if arch.endswith("_mm") else "model."
    norm = "gnorm" if arch.startswith("gemma3") else "norm"  # Gemma 3 stores w of x·(1 + w)
    plan = [(pre + "embed_tokens.weight", (vocab, dim), "embed")]
    n_layers = c["num_hidden_layers"]
    first_shared = n_layers - c.get("num_kv_shared_layers", 0)
    if e_series:
        P = c["hidden_size_per_layer_input"]
        plan += [(pre + "embed_tokens_per_layer.weight", (c["vocab_size_per_layer_input"], n_layers * P), "embed"),
                 (pre + "per_layer_model_projection.weight", (n_layers * P, dim), "linear"),
                 (pre + "per_layer_projection_norm.weight", (P,), norm)]
    for i in range(n_layers):
        p = f"{pre}layers.{i}."
        sliding = c.get("layer_types", ["sliding_attention"] * 99)[i] == "sliding_attention"
        lhd, lkv, has_v = hd, kv, True
        if arch.startswith("gemma4") and not sliding:
            lhd = c["global_head_dim"]
            if c.get("attention_k_eq_v"):
                lkv, has_v = c["num_global_key_value_heads"], False
        shared = e_series and i >= first_shared  # KV-shared layers have no k/v projections or k_norm
        lffn = 2 * ffn if shared and c.get("use_double_wide_mlp") else ffn
        plan += [(p + "input_layernorm.weight", (dim,), norm),
                 (p + "self_attn.q_proj.weight", (heads * lhd, dim), "linear")]
        if not shared:
            plan.append((p + "self_attn.k_proj.weight", (lkv * lhd, dim), "linear"))
        if has_v and not shared:
            plan.append((p + "self_attn.v_proj.weight", (lkv * lhd, dim), "linear"))
        plan.append((p + "self_attn.o_proj.weight", (dim, heads * lhd), "linear"))
        if base in ("llama3", "qwen2"):
            plan += [(p + "self_attn.q_proj.bias", (heads * lhd,), "bias"),
                     (p + "self_attn.k_proj.bias", (lkv * lhd,), "bias"),
                     (p + "self_attn.v_proj.bias", (lkv * lhd,), "bias")]
        if arch == "llama3":
            plan.append((p + "self_attn.o_proj.bias", (dim,), "bias"))
        if base == "qwen3" or gemma:
            plan.append((p + "self_attn.q_norm.weight", (lhd,), norm))
            if not shared:
                plan.append((p + "self_attn.k_norm.weight", (lhd,), norm))
        plan.append((p + "post_attention_layernorm.weight", (dim,), norm))
        if gemma:
            plan += [(p + "pre_feedforward_layernorm.weight", (dim,), norm),
                     (p + "post_feedforward_layernorm.weight", (dim,), norm)]
        if arch.startswith("gemma4"):
            plan.append((p + "layer_scalar", (1,), "scalar"))
        if e_series:
            plan += [(p + "per_layer_input_gate.weight", (P, dim), "gate"),
                     (p + "per_layer_projection.weight", (dim, P), "linear"),
                     (p + "post_per_layer_input_norm.weight", (dim,), norm)]
        sparse = sparse_layers(c)[i]
        if sparse and not arch.startswith("gemma4"):  # Qwen MoE: router, experts (and Qwen2's shared expert)
            E, I = c["num_experts"], c["moe_intermediate_size"]
            plan.append((p + "mlp.gate.weight", (E, dim), "linear"))
            plan += _expert_plan(p + "mlp.experts", p + "mlp.switch_mlp", E, I, dim, layout)
            S = c.get("shared_expert_intermediate_size") or 0
            if S:
                plan += [(p + "mlp.shared_expert.gate_proj.weight", (S, dim), "linear"),
                         (p + "mlp.shared_expert.up_proj.weight", (S, dim), "linear"),
                         (p + "mlp.shared_expert.down_proj.weight", (dim, S), "linear"),
                         (p + "mlp.shared_expert_gate.weight", (1, dim), "linear")]
        else:
            plan += [(p + "mlp.gate_proj.weight", (lffn, dim), "linear"),
                     (p + "mlp.up_proj.weight", (lffn, dim), "linear"),
                     (p + "mlp.down_proj.weight", (dim, lffn), "linear")]
        if sparse and arch.startswith("gemma4"):  # Gemma 4 26B-A4B: router + experts beside the MLP
            E, I = c["num_experts"], c["moe_intermediate_size"]
            plan += [(p + "router.proj.weight", (E, dim), "linear"), (p + "router.scale", (dim,), "norm"),
                     (p + "router.per_expert_scale", (E,), "scalar"),
                     (p + "pre_feedforward_layernorm_2.weight", (dim,), norm),
                     (p + "post_feedforward_layernorm_1.weight", (dim,), norm),
                     (p + "post_feedforward_layernorm_2.weight", (dim,), norm)]
            plan += _expert_plan(p + "experts", p + "experts.switch_glu", E, I, dim,
                                 "fused" if layout == "per_expert" else layout)
    plan.append((pre + "norm.weight", (dim,), norm))
    if not c.get("tie_word_embeddings", cfg.get("tie_word_embeddings", gemma)):
        plan.append(("lm_head.weight", (vocab, dim), "linear"))
    if arch == "gemma3_mm":
        plan += [("model.vision_tower.patch_embedding.weight", (8, 12), "linear"),
                 ("model.vision_tower.patch_conv.weight", (8, 3, 2, 2), "embed"),  # 4-D, like a real conv
                 ("model.multi_modal_projector.proj.weight", (8, dim), "linear")]
    if arch == "gemma4e_mm":  # towers and embedders the text model never reads
        plan += [("model.vision_tower.encoder.layers.0.self_attn.q_proj.linear.weight", (8, 8), "linear"),
                 ("model.vision_tower.patch_embedder.input_proj.weight", (8, 12), "linear"),
                 ("model.embed_vision.embedding_projection.weight", (dim, 8), "linear"),
                 ("model.audio_tower.subsample_conv_projection.layer0.conv.weight", (8, 1, 3, 3), "embed"),
                 ("model.audio_tower.layers.0.self_attn.q_proj.linear.weight", (8, 8), "linear"),
                 ("model.embed_audio.embedding_projection.weight", (dim, 8), "linear")]
    return plan


def _values(seed, name, shape, kind):
    if isinstance(kind, tuple):  # ("stack", per expert [(per-expert name, shape), ...] concatenated along rows)
        return np.stack([np.concatenate([random_tensor(seed, n, s, "linear") for n, s in parts])
                         for parts in kind[1]]).astype(np.float32)
    if kind in ("norm", "embed", "linear"):
        return random_tensor(seed, name, shape, kind)
    z = random_tensor(seed, name, shape, "embed")
    if kind == "gnorm":
        return (0.1 * z).astype(np.float32)
    if kind == "bias":
        return (0.1 * z).astype(np.float32)
    if kind == "scalar":
        return (1.0 + 0.3 * z).astype(np.float32)
    if kind == "gate":  # PLE gate: O(1) outputs on the residual stream (~sqrt(dim) per element, Gemma's
        # scaled embeddings); a plain "linear" one drives all ple_dim gelu outputs of some rows to ~0, and
        # the post-norm then amplifies rounding by 1000x (ill-conditioned, not what trained models do)
        return (0.15 * z / np.float32(np.sqrt(shape[1]))).astype(np.float32)
    raise ValueError(kind)


def write_gemma_tokenizer(out_dir, vocab):
    """tokenizer.json + tokenizer_config.json of a tiny Gemma-style tokenizer with ids below `vocab`:
    specials 0-5, the 256 byte pieces <0x00>..<0xFF> at 6-261, "▁", the letters a-z and merges up to
    "▁the", "▁a", "▁cat"; anything else falls back to bytes."""
    specials = ["<pad>", "<bos>", "<eos>", "<end_of_turn>", "<start_of_turn>", "<unk>"]
    pieces = specials + ["<0x%02X>" % b for b in range(256)] + ["\u2581"] + [chr(c) for c in range(97, 123)]
    merges = [("t", "h"), ("th", "e"), ("\u2581", "the"), ("\u2581", "a"), ("c", "a"), ("ca", "t"), ("\u2581", "cat")]
    for a, b in merges:
        pieces.append(a + b)
    if len(pieces) > vocab:
        raise ValueError(f"the tiny Gemma tokenizer needs a vocabulary of {len(pieces)}, not {vocab}")
    tok = {
        "version": "1.0",
        "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i, t in enumerate(specials)],
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
        "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious"},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}]},
        "post_processor": {"type": "TemplateProcessing",  # <bos> first, as Gemma's tokenizer.json
                           "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"SpecialToken": {"id": "<bos>", "type_id": 0}},
                                    {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<bos>": {"id": "<bos>", "ids": [1], "tokens": ["<bos>"]}}},
        "model": {"type": "BPE", "byte_fallback": True, "fuse_unk": True, "unk_token": "<unk>",
                  "vocab": {t: i for i, t in enumerate(pieces)}, "merges": [[a, b] for a, b in merges]},
    }
    with open(os.path.join(out_dir, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False)
    template = ("{{ bos_token }}{% for message in messages %}<start_of_turn>{{ 'model' if message['role'] == "
                "'assistant' else message['role'] }}\n{{ message['content'] | trim }}<end_of_turn>\n{% endfor %}"
                "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>",
                   "add_bos_token": True, "add_eos_token": False, "chat_template": template}, f, indent=2)


def make_hf_model(out_dir, arch, seed=1, dim=64, layers=4, heads=4, kv_heads=2, ffn=96, vocab=300, head_dim=16,
                  dtype="f32", shards=1, config_overrides=None, tokenizer=False, layout="per_expert"):
    os.makedirs(out_dir, exist_ok=True)
    for fn in os.listdir(out_dir):
        if fn.endswith(".safetensors") or fn.endswith(".json"):
            os.remove(os.path.join(out_dir, fn))
    cfg = _config(arch, dim, layers, heads, kv_heads, ffn, vocab, head_dim, dtype)
    if config_overrides:
        cfg.update(config_overrides)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": [2, 3]}, f, indent=2)
    plan = _plan(arch, cfg, layout)
    # make_hf_llama's writer draws values through random_tensor(kind); route our kinds through it.
    import make_hf_llama
    orig = make_hf_llama.random_tensor
    make_hf_llama.random_tensor = lambda s, n, sh, k: _values(s, n, sh, k)
    try:
        groups = split_shards(plan, shards, DTYPES[dtype][2])
        if len(groups) == 1:
            write_safetensors(os.path.join(out_dir, "model.safetensors"), groups[0], seed, dtype)
        else:
            weight_map, total = {}, 0
            for i, items in enumerate(groups):
                fn = "model-%05d-of-%05d.safetensors" % (i + 1, len(groups))
                total += write_safetensors(os.path.join(out_dir, fn), items, seed, dtype)
                weight_map.update({name: fn for name, _, _ in items})
            with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
                json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    finally:
        make_hf_llama.random_tensor = orig
    if tokenizer:
        write_gemma_tokenizer(out_dir, vocab)
    return out_dir


def moe_overrides(a):
    o = {}
    if a.experts:
        o["num_experts"] = a.experts
    if a.top_k:
        o["top_k_experts" if a.arch == "gemma4_moe" else "num_experts_per_tok"] = a.top_k
    if a.moe_ffn:
        o["moe_intermediate_size"] = a.moe_ffn
    return o or None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--arch", choices=ARCHS, required=True)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="f32")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--ffn", type=int, default=96)
    ap.add_argument("--vocab", type=int, default=300)
    ap.add_argument("--head-dim", type=int, default=16)
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--tokenizer", action="store_true", help="also write a tiny Gemma-style tokenizer")
    ap.add_argument("--layout", choices=LAYOUTS, default="per_expert", help="the experts' tensor layout")
    ap.add_argument("--experts", type=int, help="num_experts of an MoE arch")
    ap.add_argument("--top-k", type=int, help="experts per token of an MoE arch")
    ap.add_argument("--moe-ffn", type=int, help="moe_intermediate_size of an MoE arch")
    a = ap.parse_args(argv)
    make_hf_model(a.out_dir, a.arch, seed=a.seed, dim=a.dim, layers=a.layers, heads=a.heads, kv_heads=a.kv_heads,
                  ffn=a.ffn, vocab=a.vocab, head_dim=a.head_dim, dtype=a.dtype, shards=a.shards,
                  tokenizer=a.tokenizer, layout=a.layout, config_overrides=moe_overrides(a))
    print(a.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
