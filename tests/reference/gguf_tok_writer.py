"""Write a tokenizer-only GGUF (version 3, no tensors) the way llama.cpp's convert_hf_to_gguf.py
stores a byte-level BPE tokenizer: tokenizer.ggml.model "gpt2", tokens, token_type (1 normal,
3 control, 4 user-defined), merges as "left right" strings, pre, BOS/EOS, add_bos_token, and
tokenizer.chat_template; from a Hugging Face tokenizer.json (+ tokenizer_config.json)."""

import json
import os
import struct

STRING, BOOL, U32, ARRAY, INT32 = 8, 7, 4, 9, 5


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
