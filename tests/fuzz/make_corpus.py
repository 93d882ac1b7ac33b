#!/usr/bin/python3
"""Write the fuzzers' fixtures and seed corpora from the test fixture writers.

    make_corpus.py [--check]

Writes, under tests/fuzz/ (next to this script):
  fixtures/target/       a tiny Llama (BF16, 3 layers, hidden 16) with a byte-level BPE
                         tokenizer.json and a ChatML template: the target that fuzz_drafter pairs
                         drafters with and fuzz_request tokenizes with;
  fixtures/chat_*/       the same tokenizer with the added tokens and template of each built-in chat
                         format (chatml, gemma, llama3, plain);
  corpus/<target>/seed-* the seeds: real files of each format (made by tests/reference's writers of
                         random models: make_hf_llama.py, make_hf_models.py, make_deepspec.py, and
                         gguf_tok_writer.py), multi-file inputs packed as fuzz.h describes.
Everything is deterministic (fixed seeds), so rerunning rewrites the same bytes; --check only
reports whether the committed files are what this script writes. Crash reproducers in the corpus
(crash-*, oom-*, timeout-*, leak-*) are never touched. Seeds are kept small (every file is a few
KB; no seed above 64 KB) so the corpus stays a few hundred KB and each input runs fast.
"""

import argparse
import json
import os
import shutil
import struct
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
import gguf_tok_writer  # noqa: E402
import hf_to_gguf  # noqa: E402
import make_deepspec  # noqa: E402
import make_hf_llama  # noqa: E402
import make_hf_models  # noqa: E402
import numpy as np  # noqa: E402

MAX_SEED = 64 * 1024


# ---- a tiny byte-level BPE tokenizer -------------------------------------------------------------

def byte_chars():
    """GPT-2's byte -> printable character map (what ByteLevel pieces are written in)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a"), ("e", "r"), ("o", "n"), ("Ġ", "w")]

CHAT_FORMATS = {  # name -> (added special tokens, bos token, chat_template)
    "chatml": (["<|im_start|>", "<|im_end|>", "<think>", "</think>"], None,
               "{% for m in messages %}{{ '<|im_start|>' + m.role }}{% endfor %} reasoning_content </think>"),
    "gemma": (["<bos>", "<start_of_turn>", "<end_of_turn>"], "<bos>", "{{ bos_token }}<start_of_turn>"),
    "llama3": (["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
               "<|begin_of_text|>", "{{ '<|start_header_id|>' }}"),
    "plain": (["<|endoftext|>"], None, None),
}


def tokenizer_files(fmt="chatml", regex=True, extra=None):
    """(tokenizer.json, tokenizer_config.json) texts of the tiny tokenizer in chat format `fmt`."""
    bc = byte_chars()
    vocab = {bc[b]: i for i, b in enumerate(range(256))}
    for a, b in MERGES:
        vocab.setdefault(a + b, len(vocab))
    specials, bos, tmpl = CHAT_FORMATS[fmt]
    added = [{"id": len(vocab) + i, "content": s, "special": True} for i, s in enumerate(specials)]
    pre = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": not regex}
    if regex:
        pre = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"
                                          "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
             "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]}
    tj = {"version": "1.0", "added_tokens": added, "normalizer": {"type": "NFC"} if fmt != "plain" else None,
          "pre_tokenizer": pre, "decoder": {"type": "ByteLevel"},
          "model": {"type": "BPE", "vocab": vocab, "merges": [a + " " + b for a, b in MERGES]}}
    if bos:
        tj["post_processor"] = {"type": "TemplateProcessing",
                                "single": [{"SpecialToken": {"id": bos}}, {"Sequence": {"id": "A"}}],
                                "special_tokens": {bos: {"ids": [added[0]["id"]]}}}
    if extra:
        tj.update(extra)
    cfg = {"bos_token": bos, "eos_token": specials[1] if len(specials) > 1 else specials[0]}
    if tmpl:
        cfg["chat_template"] = tmpl
    return json.dumps(tj, ensure_ascii=False), json.dumps(cfg)


def vocab_size(fmt="chatml"):
    return 256 + len(MERGES) + len(CHAT_FORMATS[fmt][0])


# ---- packing --------------------------------------------------------------------------------------

def pack(files):
    """Multi-file input (fuzz.h): [(name, bytes)] -> bytes."""
    out = b""
    for i, (name, data) in enumerate(files):
        out += (b"\n" if i else b"") + b"=== " + name.encode() + b"\n" + data
    return out


def pack_dir(d, skip=()):
    names = sorted(n for n in os.listdir(d) if n not in skip)
    return pack([(n, open(os.path.join(d, n), "rb").read()) for n in names])


# ---- GGUF -----------------------------------------------------------------------------------------

U32, I32, F32, BOOL, STRING, ARRAY, U64 = 4, 5, 6, 7, 8, 9, 10


def gguf_value(vtype, v):
    if vtype == STRING:
        b = v.encode()
        return struct.pack("<Q", len(b)) + b
    if vtype == ARRAY:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(gguf_value(et, x) for x in items)
    return struct.pack({U32: "<I", I32: "<i", F32: "<f", BOOL: "<B", U64: "<Q"}[vtype], v)


def write_gguf(path, kvs, tensors, version=3, align=32):
    """kvs: [(key, type, value)]; tensors: [(name, ne (ggml order), ggml type, raw bytes)]."""
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, t, v in kvs:
        head += gguf_value(STRING, k) + struct.pack("<I", t) + gguf_value(t, v)
    off, infos, blobs = 0, b"", []
    for name, ne, gt, raw in tensors:
        infos += gguf_value(STRING, name) + struct.pack("<I", len(ne)) + struct.pack("<%dQ" % len(ne), *ne)
        infos += struct.pack("<IQ", gt, off)
        pad = (-len(raw)) % align
        blobs.append(raw + b"\0" * pad)
        off += len(raw) + pad
    data = head + infos
    data += b"\0" * ((-len(data)) % align)
    with open(path, "wb") as f:
        f.write(data + b"".join(blobs))


def q8_0(a):
    """GGUF Q8_0 blocks of 32: f16 scale + 32 int8."""
    out = b""
    for blk in a.reshape(-1, 32):
        d = float(np.abs(blk).max()) / 127 or 1.0
        q = np.clip(np.rint(blk / d), -127, 127).astype(np.int8)
        out += np.float16(d).tobytes() + q.tobytes()
    return out


# ggml block types: (elements, bytes) per block (ggml-common.h; tests/reference/ggml_quants_ref.py).
BLOCKS = {2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 20: (32, 18),
          10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 23: (256, 136)}


def random_blocks(rng, gtype, n):
    """n elements of block type gtype as random bytes with every f16 scale field set finite (any bytes
    are a valid block; finite scales keep the seed a loadable model)."""
    qk, size = BLOCKS[gtype]
    raw = bytearray(rng.integers(0, 256, n // qk * size, dtype=np.uint8).tobytes())
    for b in range(0, len(raw), size):  # clear the top exponent bit of every 2-byte field: no Inf/NaN halves
        for o in range(1, size, 2):
            raw[b + o] &= 0x3F
    return bytes(raw)


def tensor_only_gguf(path, gtype, rows=4):
    """A GGUF holding one (QK_K, rows) tensor of block type gtype and no model: the reader's block
    checks (ds_gguf_open), then a load that fails naming the missing tensors."""
    rng = np.random.default_rng(100 + gtype)
    kvs = [("general.architecture", STRING, "llama")]
    write_gguf(path, kvs, [("token_embd.weight", (256, rows), gtype, random_blocks(rng, gtype, 256 * rows))])


def tiny_llama_gguf(path, gtype=0, dim=8, ffn=16, layers=1, n_vocab=300):
    """A llama GGUF with the first n_vocab pieces of stories260K's SentencePiece vocabulary."""
    rng = np.random.default_rng(7)
    pieces = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    pieces += ["▁t", "he", "▁a", "▁the", "in", "▁s", "er", "▁w", "on", "▁b", "at", "nd", "▁o", "re", "▁h", "ou",
               "▁T", "▁c", "en", "▁he", "ed", "is", "an", "▁f", "it", "▁l", "▁d", "▁m", "ar", "▁p", "es", "ing",
               "▁to", "▁and", "▁was", "ll", "▁g", "om", "▁n", "▁wa", "▁Th"][:n_vocab - 259]
    n_vocab = len(pieces)
    types = [2, 3, 3] + [6] * 256 + [1] * (n_vocab - 259)
    scores = [0.0] * 259 + [-float(i) for i in range(n_vocab - 259)]
    kvs = [("general.architecture", STRING, "llama"), ("general.name", STRING, "tiny"),
           ("llama.context_length", U32, 256), ("llama.embedding_length", U32, dim),
           ("llama.feed_forward_length", U32, ffn), ("llama.attention.head_count", U32, 2),
           ("llama.attention.head_count_kv", U32, 1), ("llama.block_count", U32, layers),
           ("llama.rope.dimension_count", U32, dim // 2), ("llama.attention.layer_norm_rms_epsilon", F32, 1e-5),
           ("tokenizer.ggml.model", STRING, "llama"), ("tokenizer.ggml.tokens", ARRAY, (STRING, pieces)),
           ("tokenizer.ggml.scores", ARRAY, (F32, scores)), ("tokenizer.ggml.token_type", ARRAY, (I32, types)),
           ("tokenizer.ggml.bos_token_id", U32, 1), ("tokenizer.ggml.eos_token_id", U32, 2),
           ("tokenizer.ggml.unknown_token_id", U32, 0)]

    def t(name, *ne, norm=False):
        n = int(np.prod(ne))
        a = (1.0 + 0.1 * rng.standard_normal(n) if norm else 0.1 * rng.standard_normal(n)).astype(np.float32)
        if norm or gtype == 0:
            return (name, ne, 0, a.tobytes())
        if gtype == 1:
            return (name, ne, 1, a.astype(np.float16).tobytes())
        if gtype in BLOCKS:
            return (name, ne, gtype, random_blocks(rng, gtype, n))
        return (name, ne, 8, q8_0(a))

    kv_dim = dim // 2
    tensors = [t("token_embd.weight", dim, n_vocab), t("output_norm.weight", dim, norm=True)]
    for i in range(layers):
        p = "blk.%d." % i
        tensors += [t(p + "attn_q.weight", dim, dim), t(p + "attn_k.weight", dim, kv_dim),
                    t(p + "attn_v.weight", dim, kv_dim), t(p + "attn_output.weight", dim, dim),
                    t(p + "attn_norm.weight", dim, norm=True), t(p + "ffn_gate.weight", dim, ffn),
                    t(p + "ffn_down.weight", ffn, dim), t(p + "ffn_up.weight", dim, ffn),
                    t(p + "ffn_norm.weight", dim, norm=True)]
    write_gguf(path, kvs, tensors)


# ---- training data --------------------------------------------------------------------------------

def fnv1a64(b):
    h = 0xcbf29ce484222325
    for x in b:
        h = ((h ^ x) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def data_file(vocab, seqs):
    """A DSPKDATA v1 file (src/train/data.h): seqs = [(ids, n_prompt)]."""
    b = b"DSPKDATA" + struct.pack("<IIQQ", 1, 0, vocab, len(seqs))
    for ids, n_prompt in seqs:
        b += struct.pack("<II", len(ids), n_prompt) + struct.pack("<%dI" % len(ids), *ids)
    return b + struct.pack("<Q", fnv1a64(b))


# ---- the corpus -----------------------------------------------------------------------------------

def build(root):
    fx, cp = os.path.join(root, "fixtures"), os.path.join(root, "corpus")
    seeds = {}

    def seed(target, name, data):
        assert len(data) <= MAX_SEED, (target, name, len(data))
        seeds.setdefault(target, {})["seed-" + name] = data

    with tempfile.TemporaryDirectory() as tmp:
        # Fixtures: the target and the chat tokenizers.
        target = os.path.join(fx, "target")
        make_hf_llama.make_hf_llama(target, seed=3, dim=16, layers=3, heads=2, kv_heads=1, ffn=32,
                                    vocab=vocab_size("chatml"), tied=True, dtype="bf16", max_ctx=512)
        tj, tc = tokenizer_files("chatml")
        open(os.path.join(target, "tokenizer.json"), "w").write(tj)
        open(os.path.join(target, "tokenizer_config.json"), "w").write(tc)
        for fmt in CHAT_FORMATS:
            d = os.path.join(fx, "chat_" + fmt)
            os.makedirs(d, exist_ok=True)
            tj, tc = tokenizer_files(fmt)
            open(os.path.join(d, "tokenizer.json"), "w").write(tj)
            open(os.path.join(d, "tokenizer_config.json"), "w").write(tc)

        # gguf: llama models (F32, F16, Q8_0) and a tokenizer-only (byte-level BPE) file.
        # The 32-element block types as whole models (every matrix of the type); the 256-element ones
        # (K-quants, IQ4_XS) as one tensor each (a model would pass 64 KB).
        for name, gt, dim in (("f32", 0, 8), ("f16", 1, 8), ("q8_0", 8, 32), ("q4_0", 2, 32), ("q4_1", 3, 32),
                              ("q5_0", 6, 32), ("q5_1", 7, 32), ("iq4_nl", 20, 32)):
            p = os.path.join(tmp, name + ".gguf")
            tiny_llama_gguf(p, gtype=gt, dim=dim, ffn=2 * dim, n_vocab=270)
            seed("gguf", "llama-" + name, open(p, "rb").read())
        for name, gt in (("q2_k", 10), ("q3_k", 11), ("q4_k", 12), ("q5_k", 13), ("q6_k", 14), ("iq4_xs", 23)):
            p = os.path.join(tmp, name + ".gguf")
            tensor_only_gguf(p, gt)
            seed("gguf", "tensor-" + name, open(p, "rb").read())
        # A DSpark drafter as llama.cpp's converter writes it (arch dflash) for the fixture target
        # (hidden 16, vocab 268, 3 layers): 1 layer, 2/1 heads of 8, FFN 32, tap layer 1, Markov
        # rank 4, confidence head over [h ; W1[prev]].
        rng = np.random.default_rng(5)
        def f32(*ne):
            return rng.standard_normal(int(np.prod(ne))).astype("<f4").tobytes()
        H, V, R = 16, vocab_size("chatml"), 4
        kvs = [("general.architecture", STRING, "dflash"), ("dflash.block_count", U32, 1),
               ("dflash.embedding_length", U32, H), ("dflash.feed_forward_length", U32, 32),
               ("dflash.attention.head_count", U32, 2), ("dflash.attention.head_count_kv", U32, 1),
               ("dflash.attention.key_length", U32, 8), ("dflash.attention.layer_norm_rms_epsilon", F32, 1e-6),
               ("dflash.rope.freq_base", F32, 1e6), ("dflash.block_size", U32, 4),
               ("dflash.target_layers", ARRAY, (I32, [2])), ("tokenizer.ggml.mask_token_id", U32, 3)]
        ts = [("fc.weight", (H, H), 0, f32(H, H)), ("enc.output_norm.weight", (H,), 0, f32(H)),
              ("output_norm.weight", (H,), 0, f32(H))]
        for n, ne in (("attn_norm", (H,)), ("ffn_norm", (H,)), ("attn_q", (H, 16)), ("attn_k", (H, 8)),
                      ("attn_v", (H, 8)), ("attn_output", (16, H)), ("attn_q_norm", (8,)), ("attn_k_norm", (8,)),
                      ("ffn_gate", (H, 32)), ("ffn_up", (H, 32)), ("ffn_down", (32, H))):
            ts.append(("blk.0.%s.weight" % n, ne, 0, f32(*ne)))
        ts += [("markov_w1.weight", (R, V), 0, f32(R, V)), ("markov_w2.weight", (R, V), 0, f32(R, V)),
               ("conf_proj.weight", (H + R, 1), 0, f32(H + R)), ("conf_proj.bias", (1,), 0, f32(1))]
        p = os.path.join(tmp, "dflash.gguf")
        write_gguf(p, kvs, ts)
        seed("gguf", "drafter-dflash", open(p, "rb").read())
        p = os.path.join(tmp, "tok.gguf")
        gguf_tok_writer.write_from_hf(os.path.join(fx, "chat_chatml"), p, "qwen2")
        seed("gguf", "tokenizer-bpe", open(p, "rb").read())
        # Gemma 4 as llama.cpp's converter writes it (hf_to_gguf.py): the E-series (per-layer
        # embeddings, KV sharing, per-layer widths) and the MoE (router scales, fused gate_up), and
        # its tokenizer ("gemma4") over the gemma chat fixture's vocabulary.
        for name, arch, layers in (("gemma4e", "gemma4e", 6), ("gemma4-moe", "gemma4_moe", 2)):
            d = make_hf_models.make_hf_model(os.path.join(tmp, name), arch, seed=9, dim=16, layers=layers, heads=2,
                                             kv_heads=1, head_dim=8, ffn=16, vocab=32)
            p = hf_to_gguf.convert(d, os.path.join(tmp, name + ".gguf"), outtype="bf16")
            seed("gguf", name, open(p, "rb").read())
        p = os.path.join(tmp, "tok_gemma4.gguf")
        gguf_tok_writer.write_gemma4_from_hf(os.path.join(fx, "chat_gemma"), p)
        seed("gguf", "tokenizer-gemma4", open(p, "rb").read())

        # safetensors: the target's weights, a drafter's (F32), a file of every dtype with metadata.
        seed("safetensors", "target-bf16", open(os.path.join(target, "model.safetensors"), "rb").read())
        hdr = {"__metadata__": {"format": "pt", "note": "x"},
               "a": {"dtype": "F16", "shape": [2, 3], "data_offsets": [0, 12]},
               "b": {"dtype": "I32", "shape": [2], "data_offsets": [12, 20]},
               "c": {"dtype": "U32", "shape": [], "data_offsets": [20, 24]},
               "d": {"dtype": "F32", "shape": [0, 4], "data_offsets": [24, 24]}}
        h = json.dumps(hdr).encode()
        h += b" " * ((-len(h)) % 8)
        seed("safetensors", "dtypes", struct.pack("<Q", len(h)) + h + bytes(range(24)))

        # safetensors (sharded directory) and hf_dir: sharded and single-file models of each architecture.
        d = make_hf_llama.make_hf_llama(os.path.join(tmp, "sharded"), dim=8, layers=2, heads=2, kv_heads=1,
                                        ffn=16, vocab=32, shards=3, dtype="f16")
        seed("safetensors", "llama-3-shards", pack_dir(d, skip=("config.json",)))
        seed("hf_dir", "llama-3-shards", pack_dir(d))
        seed("hf_dir", "target-with-tokenizer", pack_dir(target))
        for arch in make_hf_models.ARCHS:
            d = make_hf_models.make_hf_model(os.path.join(tmp, arch), arch, dim=16, layers=2, heads=2,
                                             kv_heads=1, ffn=16, vocab=32, head_dim=8, dtype="bf16")
            seed("hf_dir", arch, pack_dir(d))

        # tokenizer: the chat tokenizers with a text to encode, and variants of the format.
        text = "=== text\nHello world, the thin <|im_start|>caf\u00e9 123 \U0001F600\n\n  x".encode()
        for fmt in CHAT_FORMATS:
            tj, tc = tokenizer_files(fmt)
            seed("tokenizer", fmt, pack([("tokenizer.json", tj.encode()), ("tokenizer_config.json", tc.encode())])
                 + b"\n" + text)
        tj, tc = tokenizer_files("chatml", regex=False, extra={
            "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"},
                                                               {"type": "Replace", "pattern": {"String": " "},
                                                                "content": "\u2581"}]},
            "pre_tokenizer": None,
            "decoder": {"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
                {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}})
        sp = json.loads(tj)
        sp["model"].update({"byte_fallback": True, "fuse_unk": True, "unk_token": "<unk>"})
        sp["model"]["vocab"].update({"<unk>": len(sp["model"]["vocab"]) + 10, "<0x41>": len(sp["model"]["vocab"]) + 11})
        seed("tokenizer", "spm-style", pack([("tokenizer.json", json.dumps(sp, ensure_ascii=False).encode()),
                                             ("tokenizer_config.json", tc.encode())]) + b"\n" + text)
        lj = json.loads(tokenizer_files("llama3")[0])
        lj["model"]["ignore_merges"] = True
        lj["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"
        seed("tokenizer", "ignore-merges", pack([("tokenizer.json", json.dumps(lj, ensure_ascii=False).encode())])
             + b"\n" + text)

        # chat: per format, a conversation (byte 0: format | add_generation_prompt << 2).
        conv = b"\0".join([b"system", b"You are terse.", b"user", b"  Hi  ", b"assistant",
                           b"<think>\nhmm\n</think>\n\nHello.", b"user", b"2+2?"])
        for i, fmt in enumerate(("chatml", "gemma", "llama3", "plain")):
            seed("chat", fmt, bytes([i | 4]) + conv)
            seed("chat", fmt + "-one", bytes([i]) + b"user\0caf\xc3\xa9")

        # drafter: DeepSpec drafters for the target, each head type, with calibration.json.
        calib = json.dumps({"method": "sts", "temperatures": [1.0, 1.2, 1.5],
                            "acceptance": [0.9, 0.7, None]}).encode()
        for name, opts in (("vanilla", {}), ("gated", {"markov_head": "gated"}), ("rnn", {"markov_head": "rnn"}),
                           ("dflash", {"markov_head": "none", "conf": False}),
                           ("gemma4", {"style": "gemma4", "head_dim": 8}), ("f32-2shards", {"dtype": "f32", "shards": 2})):
            o = {"layers": 1, "heads": 2, "kv_heads": 1, "head_dim": 8, "ffn": 16, "block": 4, "markov_rank": 4,
                 "taps": [0, 1], "mask_token": 3, "dtype": "bf16", "embed_from": target}
            o.update(opts)
            d = make_deepspec.make_deepspec(os.path.join(tmp, "d-" + name), **o)
            if o.get("conf", True):
                open(os.path.join(d, "calibration.json"), "wb").write(calib)
            seed("drafter", name, pack_dir(d))

        # data: a datagen file, and prompt files (plain and JSON lines).
        seed("data", "three-seqs", data_file(300, [([1, 5, 9, 2], 2), ([1, 7], 1), ([1] + list(range(3, 40)), 5)]))
        seed("data", "empty", data_file(32, []))
        seed("data", "prompts-txt", b"Once upon a time\n\n  there was\r\ncaf\xc3\xa9\n")
        seed("data", "prompts-jsonl", b'{"prompt": "Once upon"}\n{"prompt": "a \\u00e9 b", "x": 1}\nplain\n')

        # costs: dspark profile's file.
        seed("costs", "profile", json.dumps({"model": "tiny", "threads": 2, "unit": "verification steps per second",
                                             "sps": [900.0, 850.5, 800, 700, 650, 600, 400, 300.25]}, indent=2).encode())
        seed("costs", "one", b'{"sps": [1e3]}')

        # request: completion and chat bodies (byte 0: 0 completions, 1 chat).
        for name, chat, body in (
                ("completion", 0, {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}),
                ("completion-full", 0, {"prompt": "the", "max_tokens": 4, "temperature": 0.8, "top_k": 40,
                                        "top_p": 0.9, "min_p": 0.05, "seed": 7, "stop": ["\n", "the"],
                                        "stream": True, "stream_options": {"include_usage": True}}),
                ("completion-ids", 0, {"prompt": [1, 2, 3, 260], "max_tokens": 2, "stop": "x"}),
                ("chat", 1, {"messages": [{"role": "system", "content": "Be brief."},
                                          {"role": "user", "content": "Hi"}], "max_tokens": 3}),
                ("chat-stream", 1, {"messages": [{"role": "user", "content": "caf\u00e9"}], "stream": True,
                                    "max_completion_tokens": 5, "seed": 1, "temperature": 1.0})):
            seed("request", name, bytes([chat]) + json.dumps(body, ensure_ascii=False).encode())

    # template: byte 0 even + a chat template (the real ones of tests/fixtures/templates), or byte 0
    # odd (syntax in bits 1-3, mod 5: 1 hermes, 2 llama3, 3 mistral, 4 gemma4) + model output for the
    # tool-call parser.
    tdir = os.path.join(HERE, "..", "fixtures", "templates")
    for fn in sorted(os.listdir(tdir)):
        if fn.endswith(".jinja"):
            with open(os.path.join(tdir, fn), "rb") as f:
                seed("template", fn[:-6], b"\x00" + f.read())
    seed("template", "jinja-misc", b'\x00{%- set ns = namespace(a=[]) -%}{% for x in range(3) if x is odd %}{{ loop.index }}'
         b'{{ x|string ~ "a"|upper }}{% else %}e{% endfor %}{{ {"a": 1.5e-7, "b": [none, true]}|tojson(indent=2) }}'
         b'{{ "abc"[::-1] }}{% macro m(a, b=2) %}{{ a + b }}{% endmacro %}{{ m(1) }}{% raw %}{{ x }}{% endraw %}'
         b'{{ "x" if 1 < 2 < 3 else "y" }}{% filter upper %}f{% endfilter %}')
    seed("template", "tc-hermes", bytes([1 | 1 << 1]) + b'Hi <tool_call>\n{"name": "get", "arguments": {"city": "Paris"}}\n'
         b'</tool_call>\n<tool_call>\n{"name": "x"')
    seed("template", "tc-llama3", bytes([1 | 2 << 1]) + b'<|python_tag|>{"name": "get", "parameters": {"a": [1, {"b": null}]}}; '
         b'{"name": "h", "parameters": {}}')
    seed("template", "tc-mistral", bytes([1 | 3 << 1]) + b'[TOOL_CALLS] [{"name": "get", "arguments": {"q": "\\u00e9"}}, '
         b'{"name": "y", "arguments": "{}"}]')
    seed("template", "tc-mistral-args", bytes([1 | 3 << 1]) + b'[TOOL_CALLS]get[ARGS]{"q": 1}')
    seed("template", "tc-gemma4", bytes([1 | 4 << 1]) + '<|tool_call>call:get{city:<|"|>Paris<|"|>,n:[1,-2.5e3,'
         '{a:true,b:null}],<|"|>q k<|"|>:false}<tool_call|> then <|tool_call>call:x{y:<|"|>'.encode())
    return seeds


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="only report files that differ")
    args = ap.parse_args(argv)
    if args.check:
        tmp = tempfile.mkdtemp()
        try:
            shutil.copytree(os.path.join(HERE, "fixtures"), os.path.join(tmp, "fixtures"))
            seeds = build(tmp)
            bad = []
            for t, files in seeds.items():
                for n, data in files.items():
                    p = os.path.join(HERE, "corpus", t, n)
                    if not os.path.exists(p) or open(p, "rb").read() != data:
                        bad.append(p)
            for dp, _, fns in os.walk(os.path.join(tmp, "fixtures")):
                for fn in fns:
                    a = os.path.join(dp, fn)
                    b = os.path.join(HERE, os.path.relpath(a, tmp))
                    if not os.path.exists(b) or open(a, "rb").read() != open(b, "rb").read():
                        bad.append(b)
        finally:
            shutil.rmtree(tmp)
        for p in bad:
            print("differs:", p)
        return 1 if bad else 0
    seeds = build(HERE)
    for t, files in seeds.items():
        d = os.path.join(HERE, "corpus", t)
        os.makedirs(d, exist_ok=True)
        for fn in os.listdir(d):
            if fn.startswith("seed-") and fn not in files:
                os.remove(os.path.join(d, fn))
        for n, data in files.items():
            with open(os.path.join(d, n), "wb") as f:
                f.write(data)
    total = sum(len(v) for f in seeds.values() for v in f.values())
    print("make_corpus: %d seeds, %d bytes" % (sum(len(f) for f in seeds.values()), total))
    return 0


if __name__ == "__main__":
    sys.exit(main())
