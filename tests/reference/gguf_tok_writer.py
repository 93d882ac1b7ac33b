"""Write a tokenizer-only GGUF (version 3, no tensors) the way llama.cpp's convert_hf_to_gguf.py
stores a tokenizer, from a Hugging Face tokenizer.json (+ tokenizer_config.json):
  write_from_hf:      byte-level BPE: tokenizer.ggml.model "gpt2", tokens, token_type (1 normal,
                      3 control, 4 user-defined), merges as "left right" strings, pre, BOS/EOS,
                      add_bos_token, and tokenizer.chat_template;
  write_gemma4_from_hf: Gemma 4's layout (conversion/gemma.py Gemma4Model.set_vocab): "gemma4",
                      tokens and types as gguf-py's LlamaHfVocab assigns them, scores, merges, the
                      SpecialVocab ids, add_space_prefix false, add_bos_token true, chat template."""

import json
import os
import re
import struct

STRING, BOOL, U32, ARRAY, INT32, FLOAT32 = 8, 7, 4, 9, 5, 6


def _str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _kv(key, vtype, value):
    out = _str(key) + struct.pack("<I", vtype)
    if vtype == STRING:
        return out + _str(value)
    if vtype == BOOL:
        return out + struct.pack("<B", 1 if value else 0)
    if vtype == U32:
        return out + struct.pack("<I", value)
    etype, items = value
    out += struct.pack("<IQ", etype, len(items))
    if etype == STRING:
        return out + b"".join(_str(x) for x in items)
    if etype == FLOAT32:
        return out + struct.pack("<%df" % len(items), *items)
    return out + struct.pack("<%di" % len(items), *items)


def write_from_hf(tok_dir, out_path, pre):
    with open(os.path.join(tok_dir, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    with open(os.path.join(tok_dir, "tokenizer_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    vocab = dict(tj["model"]["vocab"])
    types = {}
    for a in tj["added_tokens"]:
        vocab[a["content"]] = a["id"]
        types[a["id"]] = 3 if a["special"] else 4
    n = max(vocab.values()) + 1
    tokens = ["[PAD%d]" % i for i in range(n)]  # llama.cpp fills holes the same way
    for t, i in vocab.items():
        tokens[i] = t
    ttypes = [types.get(i, 1) for i in range(n)]
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]

    def tok_id(key):
        v = cfg.get(key)
        v = v.get("content") if isinstance(v, dict) else v
        return vocab.get(v) if v else None

    kvs = [_kv("general.architecture", STRING, "qwen3"), _kv("tokenizer.ggml.model", STRING, "gpt2"),
           _kv("tokenizer.ggml.pre", STRING, pre), _kv("tokenizer.ggml.tokens", ARRAY, (STRING, tokens)),
           _kv("tokenizer.ggml.token_type", ARRAY, (INT32, ttypes)),
           _kv("tokenizer.ggml.merges", ARRAY, (STRING, merges)),
           _kv("tokenizer.ggml.add_bos_token", BOOL, False)]
    if tok_id("bos_token") is not None:
        kvs.append(_kv("tokenizer.ggml.bos_token_id", U32, tok_id("bos_token")))
    if tok_id("eos_token") is not None:
        kvs.append(_kv("tokenizer.ggml.eos_token_id", U32, tok_id("eos_token")))
    if isinstance(cfg.get("chat_template"), str):
        kvs.append(_kv("tokenizer.chat_template", STRING, cfg["chat_template"]))
    with open(out_path, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs)) + b"".join(kvs))


# Tokens Gemma4Model.set_vocab forces to USER_DEFINED so that they are always rendered.
GEMMA4_VISIBLE = {"<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>",
                  '<|"|>'}


def _content(v):
    return v.get("content") if isinstance(v, dict) else v


def write_gemma4_from_hf(tok_dir, out_path, arch="gemma4", keep_merge=None, model="gemma4"):
    """The GGUF tokenizer of llama.cpp's Gemma 4 converter. LlamaHfVocab: the base vocabulary (the
    BPE model's, ids 0..n-1) typed BYTE (6) for "<0xXX>", CONTROL (3) when the id is one of
    transformers' all_special_ids (the bos/eos/unk/sep/pad/cls/mask tokens of tokenizer_config.json,
    its additional_special_tokens and extra_special_tokens), else NORMAL (1); then the added tokens
    beyond the base vocabulary, CONTROL when special in that sense, else USER_DEFINED (4); every
    score -1000; GEMMA4_VISIBLE forced to USER_DEFINED. SpecialVocab: merges, the ids of those
    named tokens, add_eos_token (post-processor, then tokenizer_config.json); then add_space_prefix
    false and add_bos_token true. Returns (tokens, token types, merges, BOS id) as written.
    Test variants: keep_merge(merge) -> False drops a merge; model replaces "gemma4"."""
    with open(os.path.join(tok_dir, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    with open(os.path.join(tok_dir, "tokenizer_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    base = tj["model"]["vocab"]
    n_base = len(base)
    tokens = [None] * n_base
    for t, i in base.items():
        tokens[i] = t
    assert None not in tokens, "the base vocabulary has holes"
    vocab = dict(base)
    added = sorted((a["id"], a["content"]) for a in tj["added_tokens"] if a["id"] >= n_base)
    for k, (i, t) in enumerate(added):
        assert i == n_base + k, "added tokens beyond the base vocabulary are not contiguous"
        tokens.append(t)
        vocab[t] = i
    named = {k: _content(cfg.get(k + "_token")) for k in ("bos", "eos", "unk", "sep", "pad", "cls", "mask")}
    extra = cfg.get("extra_special_tokens") or {}
    specials = [v for v in named.values() if v] + [_content(v) for v in cfg.get("additional_special_tokens") or []]
    specials += [_content(v) for v in (extra.values() if isinstance(extra, dict) else extra)]
    special_ids = {vocab[t] for t in specials if t in vocab}
    ttypes = []
    for i, t in enumerate(tokens):
        if t in GEMMA4_VISIBLE:
            ttypes.append(4)
        elif i < n_base and re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", t):
            ttypes.append(6)
        else:
            ttypes.append(3 if i in special_ids else 1 if i < n_base else 4)
    merges = [m if isinstance(m, str) else " ".join(p.replace(" ", "\u0120") for p in m) for m in tj["model"]["merges"]]
    merges = [m for m in merges if keep_merge is None or keep_merge(m)]
    kvs = [_kv("general.architecture", STRING, arch), _kv("tokenizer.ggml.model", STRING, model),
           _kv("tokenizer.ggml.tokens", ARRAY, (STRING, tokens)),
           _kv("tokenizer.ggml.scores", ARRAY, (FLOAT32, [-1000.0] * len(tokens))),
           _kv("tokenizer.ggml.token_type", ARRAY, (INT32, ttypes)),
           _kv("tokenizer.ggml.merges", ARRAY, (STRING, merges))]
    for k, key in (("bos", "bos"), ("eos", "eos"), ("unk", "unknown"), ("sep", "seperator"), ("pad", "padding"),
                   ("mask", "mask")):
        if named[k] in vocab:
            kvs.append(_kv("tokenizer.ggml.%s_token_id" % key, U32, vocab[named[k]]))
    single = (tj.get("post_processor") or {}).get("single") or []
    add_eos = single[-1]["SpecialToken"]["id"] == named["eos"] if len(single) > 1 and "SpecialToken" in single[-1] else None
    if isinstance(cfg.get("add_eos_token"), bool):
        add_eos = cfg["add_eos_token"]
    if add_eos is not None:
        kvs.append(_kv("tokenizer.ggml.add_eos_token", BOOL, add_eos))
    kvs += [_kv("tokenizer.ggml.add_space_prefix", BOOL, False), _kv("tokenizer.ggml.add_bos_token", BOOL, True)]
    if isinstance(cfg.get("chat_template"), str):
        kvs.append(_kv("tokenizer.chat_template", STRING, cfg["chat_template"]))
    with open(out_path, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs)) + b"".join(kvs))
    return tokens, ttypes, merges, vocab.get(named["bos"])
