#!/usr/bin/python3
"""An independent Hugging Face safetensors -> GGUF converter (numpy), written from the GGUF format and
the facts of llama.cpp's convert_hf_to_gguf.py / gguf-py (key names, tensor names, transformations):

    hf_to_gguf.py HF_DIR OUT.gguf [--outtype f32|f16|bf16]   (default: the checkpoint's dtype)

Architectures (config.json "architectures"[0] -> general.architecture):
    LlamaForCausalLM, MistralForCausalLM -> llama   Q/K weight rows (and biases) permuted per head for
        llama.cpp's adjacent-pair RoPE: reshape(heads, 2, d/2, ...).swapaxes(1, 2) (LlamaModel.permute,
        K with the KV heads); llama3 rope scaling -> rope_freqs.weight, one divisor per frequency,
        computed in float32 as LlamaModel.generate_extra_tensors does (with rope_scaling's
        original_max_position_embeddings); linear -> rope.scaling.type "linear" + rope.scaling.factor;
        rope.dimension_count = head_dim
    Qwen2ForCausalLM -> qwen2, Qwen3ForCausalLM -> qwen3, Qwen2MoeForCausalLM -> qwen2moe,
    Qwen3MoeForCausalLM -> qwen3moe: tensors unpermuted (NeoX RoPE); experts stacked per layer into
        3-D ffn_{gate,up,down}_exps (numpy (E, rows, cols), GGUF ne = (cols, rows, E)); the router
        ffn_gate_inp and shared expert gate ffn_gate_inp_shexp kept F32; expert_count,
        expert_used_count, expert_feed_forward_length, expert_shared_feed_forward_length
    Gemma3ForCausalLM, Gemma3ForConditionalGeneration (text part) -> gemma3: every "*norm.weight" + 1
        (Gemma3RMSNorm's x·(1 + w); added in float32 here), post_attention_layernorm -> post_attention_norm,
        pre_feedforward_layernorm -> ffn_norm, post_feedforward_layernorm -> post_ffw_norm;
        key_length / value_length = head_dim, rope.freq_base = the global layers' rope_theta, linear
        rope scaling keys, attention.sliding_window, final_logit_softcapping when set; lm_head dropped
    Gemma4ForCausalLM, Gemma4ForConditionalGeneration (text part) -> gemma4 (conversion/gemma.py
        Gemma4Model): norms as stored (no + 1); key_length / value_length = global_head_dim,
        key_length_swa / value_length_swa = head_dim; head_count_kv one value per layer (sliding:
        num_key_value_heads, full: num_global_key_value_heads) when num_global_key_value_heads is set;
        feed_forward_length one value per layer (KV-shared layers 2x) with use_double_wide_mlp;
        rope.freq_base / rope.freq_base_swa = the full / sliding rope_theta, rope.dimension_count =
        global_head_dim, rope.dimension_count_swa = head_dim; rope_freqs.weight = 1 for the first
        global_head_dim·partial_rotary_factor/2 frequencies, 1e30 for the rest (proportional RoPE);
        attention.sliding_window_pattern one bool per layer, attention.shared_kv_layers,
        embedding_length_per_layer_input, expert_count / expert_used_count (top_k_experts) /
        expert_feed_forward_length; tensors per GEMMA4_NAMES (layer_scalar -> layer_output_scale,
        router.scale -> ffn_gate_inp.scale, router.per_expert_scale -> ffn_down_exps.scale,
        experts.gate_up_proj -> ffn_gate_up_exps, per-layer embeddings -> per_layer_token_embd /
        per_layer_model_proj / per_layer_proj_norm and blk.N.inp_gate / proj / post_norm); lm_head dropped
Keys of every arch: <arch>.context_length, embedding_length, block_count, feed_forward_length,
attention.head_count, head_count_kv, layer_norm_rms_epsilon, rope.freq_base (key_length /
value_length when config.json gives head_dim), general.name, tokenizer.ggml.bos_token_id /
eos_token_id (the first of a list) from config.json. Ints are UINT32, floats FLOAT32. 1-D tensors
are written F32 whatever --outtype (as the converter does); others in --outtype.

As a module: `convert(hf_dir, out_path, outtype=None, edit=None, permute_qk=True)` returns out_path;
`edit(writer)` may change the GGUFWriter's kv / tensors lists before the file is written (tests
make broken files that way); permute_qk=False skips llama's Q/K permutation (a negative control)."""

import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_py import GGUFWriter, T_BOOL, T_UINT32  # noqa: E402
from llama_ref import read_hf_tensors  # noqa: E402

ARCHS = {
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3", "Qwen2MoeForCausalLM": "qwen2moe", "Qwen3MoeForCausalLM": "qwen3moe",
    "Gemma3ForCausalLM": "gemma3", "Gemma3ForConditionalGeneration": "gemma3",
    "Gemma4ForCausalLM": "gemma4", "Gemma4ForConditionalGeneration": "gemma4",
}
LAYER_NAMES = {  # HF module (after "layers.N.") -> GGUF (after "blk.N.")
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
    "mlp.gate": "ffn_gate_inp",
    "mlp.shared_expert.gate_proj": "ffn_gate_shexp", "mlp.shared_expert.up_proj": "ffn_up_shexp",
    "mlp.shared_expert.down_proj": "ffn_down_shexp", "mlp.shared_expert_gate": "ffn_gate_inp_shexp",
}
GEMMA_NAMES = {"post_attention_layernorm": "post_attention_norm", "pre_feedforward_layernorm": "ffn_norm",
               "post_feedforward_layernorm": "post_ffw_norm"}
GEMMA4_NAMES = {  # HF (after "layers.N.") -> GGUF (after "blk.N."), gguf-py's tensor_mapping for gemma4
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight", "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight", "layer_scalar": "layer_output_scale.weight",
    "per_layer_input_gate.weight": "inp_gate.weight", "per_layer_projection.weight": "proj.weight",
    "post_per_layer_input_norm.weight": "post_norm.weight",
    "router.proj.weight": "ffn_gate_inp.weight", "router.scale": "ffn_gate_inp.scale",
    "router.per_expert_scale": "ffn_down_exps.scale",
    "pre_feedforward_layernorm_2.weight": "pre_ffw_norm_2.weight",
    "post_feedforward_layernorm_1.weight": "post_ffw_norm_1.weight",
    "post_feedforward_layernorm_2.weight": "post_ffw_norm_2.weight",
    "experts.gate_up_proj": "ffn_gate_up_exps.weight", "experts.down_proj": "ffn_down_exps.weight",
}
GEMMA4_GLOBALS = {"embed_tokens_per_layer.weight": "per_layer_token_embd.weight",
                  "per_layer_model_projection.weight": "per_layer_model_proj.weight",
                  "per_layer_projection_norm.weight": "per_layer_proj_norm.weight"}
KEEP_F32 = ("ffn_gate_inp", "ffn_gate_inp_shexp")


def permute(w, n_head):
    """LlamaModel.permute: the halves pairing of each head's rows -> adjacent pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_factors(rs, theta, head_dim):
    """rope_freqs for llama3 scaling, in float32 like the converter's torch code."""
    f32 = np.float32
    freqs = f32(1.0) / (f32(theta) ** (np.arange(0, head_dim, 2, dtype=f32) / f32(head_dim)))
    factor, low, high = rs.get("factor", 8.0), rs.get("low_freq_factor", 1.0), rs.get("high_freq_factor", 4.0)
    old = rs.get("original_max_position_embeddings", 8192)
    low_wl, high_wl = old / low, old / high
    out = []
    for freq in freqs:
        wavelen = f32(2 * math.pi) / freq
        if wavelen < high_wl:
            out.append(f32(1))
        elif wavelen > low_wl:
            out.append(f32(factor))
        else:
            smooth = (f32(old) / wavelen - f32(low)) / f32(high - low)
            out.append(f32(1) / ((f32(1) - smooth) / f32(factor) + smooth))
    return np.array(out, dtype=np.float32)


def gemma4_keys(w, c):
    """The gemma4.* keys Gemma4Model.set_gguf_parameters adds (after Gemma3Model's and TextModel's)."""
    A, n = "gemma4.", c["num_hidden_layers"]
    hd, ghd = c["head_dim"], c.get("global_head_dim") or c["head_dim"]
    swa = [t == "sliding_attention" for t in c["layer_types"]]
    shared = c.get("num_kv_shared_layers", 0)
    rp = c["rope_parameters"]
    w.add(A + "attention.key_length", ghd)
    w.add(A + "attention.value_length", ghd)
    w.add(A + "attention.key_length_swa", hd)
    w.add(A + "attention.value_length_swa", hd)
    w.add(A + "attention.shared_kv_layers", shared)
    w.add(A + "embedding_length_per_layer_input", c.get("hidden_size_per_layer_input") or 0)
    w.add(A + "attention.sliding_window_pattern", swa, T_BOOL)
    w.add(A + "attention.sliding_window", c["sliding_window"])
    if c.get("use_double_wide_mlp"):
        ff = c["intermediate_size"]
        w.add(A + "feed_forward_length", [ff if i < n - shared else 2 * ff for i in range(n)], T_UINT32)
    if c.get("num_global_key_value_heads") is not None:
        w.add(A + "attention.head_count_kv",
              [c["num_key_value_heads"] if s else c["num_global_key_value_heads"] for s in swa], T_UINT32)
    w.add(A + "rope.freq_base", float(rp["full_attention"]["rope_theta"]))
    w.add(A + "rope.freq_base_swa", float(rp["sliding_attention"]["rope_theta"]))
    w.add(A + "rope.dimension_count", ghd)
    w.add(A + "rope.dimension_count_swa", int(hd * rp.get("partial_rotary_factor", 1.0)))


def gemma4_rope_freqs(c):
    """rope_freqs.weight of Gemma4Model.generate_extra_tensors: the full layers' proportional RoPE."""
    ghd = c.get("global_head_dim") or c["head_dim"]
    rot = int(ghd * c["rope_parameters"]["full_attention"]["partial_rotary_factor"] / 2)
    return np.array([1.0] * rot + [1e30] * (ghd // 2 - rot), dtype=np.float32)


def _source_dtype(cfg):
    return {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}.get(cfg.get("torch_dtype"), "f32")


def convert(hf_dir, out_path, outtype=None, edit=None, permute_qk=True):
    with open(os.path.join(hf_dir, "config.json")) as f:
        top = json.load(f)
    hf_arch = (top.get("architectures") or [""])[0]
    if hf_arch not in ARCHS:
        raise ValueError(f"{hf_dir}: architecture {hf_arch!r} is not converted here")
    arch = ARCHS[hf_arch]
    c = top.get("text_config", top) if hf_arch.endswith("ConditionalGeneration") else top
    gemma = arch == "gemma3"  # (Gemma 3's layout; gemma4 takes its own branches)
    g4 = arch == "gemma4"
    outtype = (outtype or _source_dtype(c if "torch_dtype" in c else top)).upper()
    dim, heads = c["hidden_size"], c["num_attention_heads"]
    kv = c.get("num_key_value_heads", heads)
    head_dim = c.get("head_dim") or dim // heads
    n_layers = c["num_hidden_layers"]
    w = GGUFWriter()
    w.add("general.architecture", arch)
    w.add("general.name", os.path.basename(os.path.normpath(hf_dir)))
    A = arch + "."
    w.add(A + "context_length", c.get("max_position_embeddings", 131072 if gemma or g4 else 2048))
    w.add(A + "embedding_length", dim)
    w.add(A + "block_count", n_layers)
    w.add(A + "feed_forward_length", c["intermediate_size"])
    w.add(A + "attention.head_count", heads)
    w.add(A + "attention.head_count_kv", kv)
    w.add(A + "attention.layer_norm_rms_epsilon", float(c.get("rms_norm_eps", 1e-6)))
    if g4:
        gemma4_keys(w, c)  # (a key given again replaces the first, as in gguf-py)
    elif "head_dim" in c or gemma:
        w.add(A + "attention.key_length", head_dim)
        w.add(A + "attention.value_length", head_dim)
    rs = {} if g4 else c.get("rope_scaling") or {}
    rope_type = rs.get("rope_type", rs.get("type"))
    theta = float(c.get("rope_theta", 1e6 if gemma else 10000.0))
    if not g4:
        w.add(A + "rope.freq_base", theta)
    if arch == "llama":
        w.add(A + "rope.dimension_count", head_dim)
        w.add(A + "vocab_size", c["vocab_size"])
    if rope_type == "linear":
        w.add(A + "rope.scaling.type", "linear")
        w.add(A + "rope.scaling.factor", float(rs["factor"]))
    elif rope_type not in (None, "default", "llama3") or (rope_type == "llama3" and arch != "llama"):
        raise ValueError(f"{hf_dir}: rope scaling {rope_type!r} is not converted here")
    if gemma:
        if c.get("sliding_window_pattern", 6) != 6:
            raise ValueError(f"{hf_dir}: GGUF gemma3 has llama.cpp's fixed sliding window pattern 6")
        w.add(A + "attention.sliding_window", c.get("sliding_window", 4096))
    if (gemma or g4) and c.get("final_logit_softcapping"):
        w.add(A + "final_logit_softcapping", float(c["final_logit_softcapping"]))
    if arch.endswith("moe") or c.get("enable_moe_block"):  # (Gemma 4 26B-A4B: top_k_experts)
        w.add(A + "expert_count", c["num_experts"])
        w.add(A + "expert_used_count", c.get("num_experts_per_tok", c.get("top_k_experts")))
        w.add(A + "expert_feed_forward_length", c["moe_intermediate_size"])
        if c.get("shared_expert_intermediate_size"):
            w.add(A + "expert_shared_feed_forward_length", c["shared_expert_intermediate_size"])
    for key in ("bos", "eos"):
        tid = c.get(f"{key}_token_id", top.get(f"{key}_token_id"))
        if isinstance(tid, list):
            tid = tid[0] if tid else None
        if isinstance(tid, int):
            w.add(f"tokenizer.ggml.{key}_token_id", tid, T_UINT32)

    src = read_hf_tensors(hf_dir)
    pre = next(p for p in ("model.", "model.language_model.", "language_model.model.")
               if p + "embed_tokens.weight" in src)

    def put(name, a):
        w.add_tensor(name, a, "F32" if a.ndim <= 1 or name.rsplit(".", 1)[0].split(".")[-1] in KEEP_F32 else outtype)

    put("token_embd.weight", src[pre + "embed_tokens.weight"])
    if arch == "llama" and rope_type == "llama3":
        put("rope_freqs.weight", llama3_rope_factors(rs, theta, head_dim))
    if g4:
        put("rope_freqs.weight", gemma4_rope_freqs(c))
        for hf_name, gguf_name in GEMMA4_GLOBALS.items():
            if pre + hf_name in src:
                put(gguf_name, src[pre + hf_name])
    experts = {}
    for name, a in src.items():
        if not name.startswith(pre + "layers."):
            continue
        rest = name[len(pre + "layers."):]
        bid, rest = rest.split(".", 1)
        if g4:
            if rest not in GEMMA4_NAMES:
                raise ValueError(f"{hf_dir}: tensor {name} has no GGUF name here")
            put(f"blk.{bid}.{GEMMA4_NAMES[rest]}", a)
            continue
        module, kind = rest.rsplit(".", 1)
        if ".experts." in module:  # mlp.experts.E.gate_proj
            _, e, proj = module.rsplit(".", 2)
            experts.setdefault((int(bid), proj), {})[int(e)] = a
            continue
        g = (GEMMA_NAMES.get(module) if gemma else None) or LAYER_NAMES.get(module)
        if g is None:
            raise ValueError(f"{hf_dir}: tensor {name} has no GGUF name here")
        if arch == "llama" and permute_qk and module in ("self_attn.q_proj", "self_attn.k_proj"):
            a = permute(a, heads if module == "self_attn.q_proj" else kv)
        if gemma and name.endswith("norm.weight"):
            a = (a.astype(np.float32) + np.float32(1)).astype(np.float32)
        put(f"blk.{bid}.{g}.{kind}", a)
    for (bid, proj), per in sorted(experts.items()):
        g = {"gate_proj": "ffn_gate_exps", "up_proj": "ffn_up_exps", "down_proj": "ffn_down_exps"}[proj]
        put(f"blk.{bid}.{g}.weight", np.stack([per[e] for e in range(len(per))]))
    norm = src[pre + "norm.weight"]
    put("output_norm.weight", norm + np.float32(1) if gemma else norm)
    if "lm_head.weight" in src and not (gemma or g4):
        put("output.weight", src["lm_head.weight"])
    if edit:
        edit(w)
    return w.write(out_path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("hf_dir")
    ap.add_argument("out")
    ap.add_argument("--outtype", choices=("f32", "f16", "bf16"))
    a = ap.parse_args(argv)
    print(convert(a.hf_dir, a.out, a.outtype))
    return 0


if __name__ == "__main__":
    sys.exit(main())
