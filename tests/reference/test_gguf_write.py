#!/usr/bin/python3
"""`dspark quantize SRC OUT.gguf --gguf TYPE` (writing GGUF), checked against independent references:

1. Types and error: llama-tiny BF16 (random weights, rows of 256 / 768) written as every TYPE, read by
   the numpy GGUF reader (gguf_py.py) and dequantized by the numpy block dequantizer
   (ggml_quants_ref.py, both written from ggml's layouts, not from the C). Per tensor: the type equals
   llama-quantize's choice (tensor_types.json: what llama.cpp's own llama-quantize wrote for these
   fixtures, so the Q4_K_M / Q5_K_M / IQ4_XS mixes and fallbacks are llama.cpp's), shapes equal, and
   the relative RMS error ||deq - src|| / ||src|| is within the type's bound (BOUND, justified there).
   Q8_0 blocks are also compared bit for bit with a numpy transcription of ggml's quantize_row_q8_0_ref.
   The Q4_K_M mix rule itself is re-derived here (use_more_bits) for stories-inflated (8 layers).
2. Metadata: general.architecture / file_type / alignment, the <arch>.* keys equal what the reference
   converter (hf_to_gguf.py) writes for an HF llama directory (qwen3_tiny_dir), and the F32 tensors
   equal its tensors bit for bit (the Q/K permutation included); the BPE tokenizer equals
   gguf_tok_writer.py's conversion of the same tokenizer.json (tokens, types, merges, chat template).
3. Round trips: stories260K.gguf -> F32 gives bit-identical logits; llama-tiny BF16 -> BF16 too; the
   HF directory -> BF16 gives the same greedy tokens (and logits to 1e-4: Q/K permuted heads sum
   in another order).
   Every architecture of test_gguf_archs.py (llama3, mistral, qwen2, qwen3, qwen2/3 MoE, gemma3,
   gemma4 dense / E-series / MoE): keys, tensor names / types / values equal hf_to_gguf.py's, logits
   equal the HF directory's, and every name is one llama.cpp knows for the architecture
   (tests/fixtures/llama_cpp_tensor_names.json). A Gemma 4 checkpoint's SentencePiece-style
   tokenizer.json is written as llama.cpp's Gemma 4 converter writes it (every tokenizer.* key equal
   gguf_tok_writer.py's).
4. llama.cpp's gguf-py reader (DSPARK_LLAMA_CPP=<llama.cpp tree>) reads the files: types and shapes.
5. Greedy speculative decoding on a Q4_K_M target written by quantize --gguf equals plain decoding
   (stories-inflated, the bigram drafter of test_spec_sampling.py, drafted tokens accepted).
6. inflate --gguf F32 / Q4_K_M: OUT/target.gguf computes what OUT/target computes (1e-4), and the
   inflated drafter's greedy speculative output on the Q4_K_M target equals plain decoding.
7. Bad inputs: a Gemma 4 checkpoint whose KV sharing llama.cpp would misread (refused naming the
   layers); unknown TYPE, OUT a directory / FIFO / an existing file not written by dspark: exit
   status 1, one line naming it, nothing replaced; a previous dspark output is replaced.
"""

import os
import shutil
import struct
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402
import gguf_tok_writer  # noqa: E402
import hf_to_gguf  # noqa: E402
from gguf_py import GGUFFile  # noqa: E402

FIX = os.path.join(common.shared_dir(), "models", "gguf-fixtures")
TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q5_0", "Q5_1", "Q4_K_S", "Q4_K_M", "Q5_K_M", "Q6_K", "IQ4_NL",
         "IQ4_XS"]
NAMES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 10: "Q2_K", 11: "Q3_K",
         12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 20: "IQ4_NL", 23: "IQ4_XS", 30: "BF16"}
FILE_TYPE = {"F32": 0, "F16": 1, "Q4_0": 2, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9, "Q4_K_S": 14, "Q4_K_M": 15,
             "Q5_K_M": 17, "Q6_K": 18, "IQ4_NL": 25, "IQ4_XS": 30, "BF16": 32}
# Relative RMS bounds per tensor type (these weights are Gaussian rows scaled per tensor). A uniform
# quantizer of step s has RMS error s/sqrt(12), and the absolute maximum of a 32-block of Gaussians is
# ~2.0-2.6 sigma: Q8_0 s = amax/127 -> ~0.55%; Q5_0 amax/16 -> ~4.4%; Q4_0 amax/8 -> ~8.7%; Q5_1
# range/31 -> ~3.8%; Q6_K (16-blocks, amax/32, searched) -> ~1.8%; Q5_K range/31 with a searched
# min -> ~3.6%; Q4_K range/15 -> ~7.2%; IQ4_NL/XS (16 levels matched to a bell, step ~amax/7.5 in the
# middle) -> ~7.7%; F16 2^-11 rounding -> < 0.03%; BF16 (the source's own values) and F32 exact.
# Each bound is that estimate + ~10%. Besides, per type, the error must not exceed 1.02 x the error of
# the file llama.cpp's llama-quantize wrote from the same weights (the fixture of that TYPE), so a
# quantizer with a worse scale search than ggml's fails even inside the bound.
BOUND = {"F32": 1e-7, "BF16": 1e-6, "F16": 3e-4, "Q8_0": 0.0065, "Q6_K": 0.02, "Q5_K": 0.04, "Q5_1": 0.042,
         "Q5_0": 0.048, "Q4_K": 0.079, "IQ4_NL": 0.085, "IQ4_XS": 0.085, "Q4_0": 0.096}


def dspark(*args):
    return subprocess.run([common.tool("dspark"), *args], capture_output=True, text=True, timeout=600)


def quantize(src, out, t):
    common.run([common.tool("dspark"), "quantize", src, out, "--gguf", t])
    return out


def infos(g):
    ts = g.tensors.values() if isinstance(g.tensors, dict) else g.tensors
    return {t.name: t for t in ts}


def q8_0_ref(x):
    """ggml's quantize_row_q8_0_ref in numpy: d = amax/127 (f16), q = roundf(x / d) (half away from zero)."""
    b = x.astype(np.float32).reshape(-1, 32)
    amax = np.abs(b).max(axis=1)
    d = (amax / np.float32(127)).astype(np.float32)
    idv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), 0).astype(np.float32)
    v = (b * idv[:, None]).astype(np.float32)
    q = (np.sign(v) * np.floor(np.abs(v) + np.float32(0.5))).astype(np.int8)
    out = np.zeros((b.shape[0], 34), dtype=np.uint8)
    out[:, :2] = d.astype("<f2").view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.tobytes()


def raw_bytes(g, info):
    n = int(np.prod(info.shape)) if hasattr(info, "shape") else None
    start = info.offset  # (absolute in the file)
    size = {8: n // 32 * 34}.get(info.ggml_type)
    return bytes(g.buf[start:start + size])


def more_bits(i, n):
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def check_types_and_error(chk, tmp):
    import json
    tt = json.load(open(os.path.join(FIX, "tensor_types.json")))
    src = os.path.join(FIX, "llama-tiny", "BF16.gguf")
    s = GGUFFile(src)
    s_inf = infos(s)
    for t in TYPES:
        out = quantize(src, os.path.join(tmp, f"lt_{t}.gguf"), t)
        g = GGUFFile(out)
        g_inf = infos(g)
        chk.equal(f"{t}: general.file_type", g.metadata.get("general.file_type"), FILE_TYPE[t])
        chk.equal(f"{t}: general.alignment", g.metadata.get("general.alignment"), 32)
        chk.equal(f"{t}: tensor names", sorted(g_inf), sorted(s_inf))
        if t in tt["llama-tiny"]:
            mine = {n: NAMES[i.ggml_type] for n, i in g_inf.items()}
            chk.equal(f"{t}: per-tensor types equal llama-quantize's (tensor_types.json)", mine, tt["llama-tiny"][t])
        worst = {}
        for name, info in g_inf.items():
            chk.equal(f"{t} {name}: shape", tuple(info.shape), tuple(s_inf[name].shape))
            a, b = g.tensor(name).astype(np.float64), s.tensor(name).astype(np.float64)
            rel = float(np.sqrt(((a - b) ** 2).sum() / max((b ** 2).sum(), 1e-30)))
            ty = NAMES[info.ggml_type]
            worst[ty] = max(worst.get(ty, 0), rel)
            if ty == "Q8_0":
                chk.equal(f"{t} {name}: Q8_0 blocks equal ggml's quantize_row_q8_0_ref",
                          raw_bytes(g, info) == q8_0_ref(s.tensor(name)), True)
        theirs = {}
        lq = os.path.join(FIX, "llama-tiny", f"{t}.gguf")
        if os.path.exists(lq) and t not in ("BF16",):
            r = GGUFFile(lq)
            for name, info in infos(r).items():
                a, b = r.tensor(name).astype(np.float64), s.tensor(name).astype(np.float64)
                ty = NAMES[info.ggml_type]
                theirs[ty] = max(theirs.get(ty, 0), float(np.sqrt(((a - b) ** 2).sum() / max((b ** 2).sum(), 1e-30))))
        for ty, rel in sorted(worst.items()):
            print(f"  {t:7s} {ty:7s} worst rel RMS {rel:.5f} (bound {BOUND[ty]}, llama-quantize {theirs.get(ty, '-')})")
            chk.equal(f"{t}: {ty} tensors' relative RMS error {rel:.5f} <= {BOUND[ty]}", rel <= BOUND[ty], True)
            if ty in theirs and ty not in ("F32", "BF16"):
                chk.equal(f"{t}: {ty} error {rel:.5f} <= 1.02 x llama-quantize's {theirs[ty]:.5f}",
                          rel <= 1.02 * theirs[ty] + 1e-7, True)
    # The Q4_K_M rule re-derived (8 layers: more bits for layers 0, 2, 5, 7 ... per use_more_bits).
    out = quantize(os.path.join(FIX, "stories-inflated", "Q6_K.gguf"), os.path.join(tmp, "si_q4km.gguf"), "Q4_K_M")
    g_inf = infos(GGUFFile(out))
    n = 8
    for name, info in sorted(g_inf.items()):
        if len(info.shape) < 2 or name.endswith("norm.weight"):
            want = "F32"
        elif name == "output.weight":
            want = "Q6_K"
        elif ".attn_v." in name or ".ffn_down." in name:
            want = "Q6_K" if more_bits(int(name.split(".")[1]), n) else "Q4_K"
        else:
            want = "Q4_K"
        if want == "Q4_K" and info.shape[-1] % 256:
            want = "Q5_0"  # llama.cpp's fallback for rows not a multiple of 256
        chk.equal(f"stories-inflated Q4_K_M {name}: the preset's rule", NAMES[info.ggml_type], want)


def check_metadata(chk, tmp):
    hf = common.qwen3_tiny_dir("gguf_write_hf")
    mine = GGUFFile(quantize(hf, os.path.join(tmp, "hf_f32.gguf"), "F32"))
    ref = GGUFFile(hf_to_gguf.convert(hf, os.path.join(tmp, "hf_ref.gguf"), outtype="f32"))
    arch = ref.metadata["general.architecture"]
    chk.equal("general.architecture", mine.metadata.get("general.architecture"), arch)
    for k, v in ref.metadata.items():
        if k.startswith(arch + "."):
            got = mine.metadata.get(k)
            ok = got == v or (isinstance(v, float) and got is not None and abs(got - v) <= 1e-6 * abs(v))
            chk.equal(f"{k} = {v!r} (the reference converter's)", got if not ok else v, v)
    m_inf, r_inf = infos(mine), infos(ref)
    chk.equal("tensor names equal the reference converter's", sorted(m_inf), sorted(r_inf))
    for name in sorted(set(m_inf) & set(r_inf)):
        chk.equal(f"{name}: F32 data equal the reference converter's (Q/K permuted)",
                  np.array_equal(mine.tensor(name), ref.tensor(name)), True)
    tok = os.path.join(tmp, "tok_ref.gguf")
    gguf_tok_writer.write_from_hf(hf, tok, "qwen2")
    t = GGUFFile(tok)
    for k in ("tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.merges", "tokenizer.chat_template"):
        chk.equal(f"{k} equals the reference conversion", mine.metadata.get(k), t.metadata.get(k))
    toks, want = mine.metadata.get("tokenizer.ggml.tokens") or [], t.metadata["tokenizer.ggml.tokens"]
    types, want_t = mine.metadata.get("tokenizer.ggml.token_type") or [], t.metadata["tokenizer.ggml.token_type"]
    n = mine.metadata.get("llama.vocab_size")
    chk.equal("tokens: the tokenizer's, padded with [PADi] to the embedding's rows", toks,
              list(want) + [f"[PAD{i}]" for i in range(len(want), n)])
    chk.equal("token types equal the reference conversion", list(types[:len(want_t)]), list(want_t))
    return hf


def check_archs(chk, tmp):
    """Every architecture test_gguf_archs.py covers (its CASES: tiny random HF checkpoints of
    make_hf_models.py): quantize --gguf in the checkpoint's dtype writes the <arch>.* keys, tensor
    names, types and values of the reference converter hf_to_gguf.py, and gives the HF directory's
    logits (bit-identical where test_gguf_archs.py finds the converter's file bit-identical)."""
    import test_gguf_archs as tga
    toks = [1, 5, 9, 2, 7, 3]
    for name, arch, opts, tol in tga.CASES:
        hf, ref_path = tga.make_pair(name, arch, opts)
        t = "BF16" if opts.get("dtype") == "bf16" else "F32"
        mine = GGUFFile(quantize(hf, os.path.join(tmp, f"arch_{name}.gguf"), t))
        ref = GGUFFile(ref_path)
        A = ref.metadata["general.architecture"]
        chk.equal(f"{name}: general.architecture", mine.metadata.get("general.architecture"), A)
        for k, v in ref.metadata.items():
            if k.startswith(A + "."):
                got = mine.metadata.get(k)
                ok = got == v or (isinstance(v, float) and isinstance(got, float) and abs(got - v) <= 1e-6 * abs(v))
                chk.equal(f"{name}: {k} (the reference converter's)", got if not ok else v, v)
        m_inf, r_inf = infos(mine), infos(ref)
        chk.equal(f"{name}: tensor names", sorted(m_inf), sorted(r_inf))
        chk.equal(f"{name}: tensor names llama.cpp does not know", tga.llama_cpp_names(mine.path), [])
        for n in sorted(set(m_inf) & set(r_inf)):
            chk.equal(f"{name} {n}: type", NAMES[m_inf[n].ggml_type], NAMES[r_inf[n].ggml_type])
            chk.equal(f"{name} {n}: shape", tuple(m_inf[n].ne), tuple(r_inf[n].ne))
            if n == "rope_freqs.weight":  # llama3 divisors: ours from the loaded f32 frequencies, the converter's in f32 torch
                chk.close(f"{name} {n}: values", mine.tensor(n), ref.tensor(n), 1e-5)
            else:
                chk.equal(f"{name} {n}: values equal the converter's", np.array_equal(mine.tensor(n), ref.tensor(n)), True)
        a = common.ref_dump(hf, toks, tag=f"gw_a_{name}")["logits"]
        b = common.ref_dump(mine.path, toks, tag=f"gw_b_{name}")["logits"]
        if tol == 0:
            chk.equal(f"{name}: logits bit-identical to the HF directory's", np.array_equal(a, b), True)
        else:
            chk.close(f"{name}: logits", b, a, tol)
        shutil.rmtree(hf, ignore_errors=True)
        os.remove(ref_path)


def check_gemma4_sharing(chk, tmp):
    """llama.cpp's gemma4 reads a KV-shared layer's cache from the layer before the first shared one
    (full attention) or the one before that (sliding); a checkpoint whose sharing it would misread (8
    layers, 4 shared: layer 3, the last unshared, is sliding) is refused, not written wrong."""
    import make_hf_models
    hf = make_hf_models.make_hf_model(os.path.join(tmp, "g4e_8"), "gemma4e", layers=8)
    out = os.path.join(tmp, "g4e_8.gguf")
    p = dspark("quantize", hf, out, "--gguf", "F32")
    err = p.stderr.strip().splitlines()
    chk.equal("gemma4 sharing llama.cpp would misread: exit status 1", p.returncode, 1)
    chk.equal(f"gemma4 sharing: one line naming the layers ({err[-1:]})",
              len(err) == 1 and "layer 4 shares layer 3's KV cache, where llama.cpp's gemma4 would read layer 2's" in err[0],
              True)
    chk.equal("gemma4 sharing: nothing written", os.path.exists(out), False)
    shutil.rmtree(hf, ignore_errors=True)


def check_gemma4_tokenizer(chk, tmp):
    """A Gemma 4 checkpoint with a SentencePiece-style tokenizer.json (Gemma 3's real one, 262,145
    tokens) is written with the tokenizer llama.cpp's Gemma 4 converter writes: every tokenizer.* key
    equals gguf_tok_writer.write_gemma4_from_hf's (written from the converter's facts), and the file
    loads with it (quantize's own smoke test) and tokenizes text."""
    import make_hf_models
    tokdir = os.path.join(common.REPO, "tests", "node", "node_modules", "@lenml", "tokenizer-gemma3", "models")
    hf = make_hf_models.make_hf_model(os.path.join(tmp, "g4_tok"), "gemma4", seed=77, dim=16, heads=2, kv_heads=1,
                                      head_dim=8, ffn=32, layers=2, vocab=262145)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tokdir, f), hf)
    ref_path = os.path.join(tmp, "g4_tok_ref.gguf")
    gguf_tok_writer.write_gemma4_from_hf(tokdir, ref_path)
    mine = GGUFFile(quantize(hf, os.path.join(tmp, "g4_tok.gguf"), "F32")).metadata
    ref = GGUFFile(ref_path).metadata
    keys = sorted(k for k in set(ref) | set(mine) if k.startswith("tokenizer."))
    chk.equal("gemma4 tokenizer: the converter's tokenizer keys", [k for k in keys if k in mine], [k for k in keys if k in ref])
    for k in keys:
        a, b = mine.get(k), ref.get(k)
        chk.equal(f"gemma4 tokenizer: {k}", list(a) if isinstance(a, (list, tuple)) else a,
                  list(b) if isinstance(b, (list, tuple)) else b)
    got = common.run([common.tool("ds_ref_dump"), os.path.join(tmp, "g4_tok.gguf"), "--tokenize", "Hello world"]).strip()
    chk.equal("gemma4 tokenizer: the written file tokenizes (BOS first)", got.split(",")[0], str(ref["tokenizer.ggml.bos_token_id"]))
    shutil.rmtree(hf, ignore_errors=True)


def check_round_trips(chk, tmp, hf):
    stories = common.stories_model()
    toks = [1, 403, 407, 261, 378, 8, 1237 % 512, 55]
    a = common.ref_dump(stories, toks, tag="gw_src")["logits"]
    b = common.ref_dump(quantize(stories, os.path.join(tmp, "st_f32.gguf"), "F32"), toks, tag="gw_f32")["logits"]
    chk.equal("stories260K -> F32 GGUF: logits bit-identical", np.array_equal(a, b), True)
    src = os.path.join(FIX, "llama-tiny", "BF16.gguf")
    a = common.ref_dump(src, toks, tag="gw_lt")["logits"]
    b = common.ref_dump(quantize(src, os.path.join(tmp, "lt_bf16_rt.gguf"), "BF16"), toks, tag="gw_lt2")["logits"]
    chk.equal("llama-tiny BF16 -> BF16 GGUF: logits bit-identical", np.array_equal(a, b), True)
    out = quantize(hf, os.path.join(tmp, "hf_bf16.gguf"), "BF16")
    ids = [9707, 11, 847, 829, 374]
    a = common.ref_dump(hf, ids, tag="gw_hf")["logits"]
    b = common.ref_dump(out, ids, tag="gw_hfg")["logits"]
    chk.close("HF dir -> BF16 GGUF: logits", b, a, 1e-4)
    for prompt in ("Hello, my name is", "def fibonacci(n):"):
        want = common.generate_json(hf, prompt, 16).get("tokens")
        got = common.generate_json(out, prompt, 16).get("tokens")
        chk.equal(f"HF dir -> BF16 GGUF {prompt!r}: greedy tokens equal", got, want)


def check_gguf_py(chk, tmp):
    root = os.environ.get("DSPARK_LLAMA_CPP")
    if not root or not os.path.isdir(os.path.join(root, "gguf-py")):
        print("SKIP gguf-py check: set DSPARK_LLAMA_CPP to a llama.cpp tree with gguf-py/")
        return
    sys.path.insert(0, os.path.join(root, "gguf-py"))
    from gguf import GGUFReader
    for t in ("Q4_K_M", "IQ4_XS", "BF16"):
        path = os.path.join(tmp, f"lt_{t}.gguf")
        r = GGUFReader(path)
        mine = infos(GGUFFile(path))
        got = {x.name: (int(x.tensor_type), [int(v) for v in x.shape]) for x in r.tensors}
        want = {n: (i.ggml_type, [int(v) for v in i.ne]) for n, i in mine.items()}
        chk.equal(f"gguf-py reads {t}: tensor types and shapes", got, want)
        chk.equal(f"gguf-py reads {t}: general.architecture", bytes(r.fields["general.architecture"].parts[-1]).decode(),
                  "llama")


def check_spec(chk, tmp):
    import test_spec_sampling as tss
    path = quantize(os.path.join(FIX, "stories-inflated", "Q6_K.gguf"), os.path.join(tmp, "si_spec_q4km.gguf"),
                    "Q4_K_M")
    d = tss.make_drafter(tss.EngineModel(path), path, "q4k_bigram", os.path.join(tmp, "gw_bigram"))
    for prompt in ("Once upon a time", "Lily wanted to"):
        want = common.generate_json(path, prompt, 40, ["--spec", "none"]).get("tokens")
        chk.equal(f"Q4_K_M {prompt!r}: plain decoding gives 40 tokens", len(want or []), 40)
        for dm in ("3", None):
            out = common.generate_json(path, prompt, 40, ["--spec", "dspark", "-d", d] + (["--draft-max", dm] if dm else []))
            chk.equal(f"Q4_K_M {prompt!r} draft-max {dm or 'default'}: tokens equal plain decoding", out.get("tokens"), want)
            acc = round(((out.get("tau") or 0) - 1) * (out.get("rounds") or 0))
            chk.equal(f"Q4_K_M {prompt!r} draft-max {dm or 'default'}: drafted tokens accepted ({acc}) >= 4", acc >= 4, True)


def check_inflate(chk, tmp):
    """inflate --gguf: OUT/target.gguf is the inflated target; F32 computes what OUT/target computes,
    and on Q4_K_M the inflated drafter's greedy speculative output equals plain decoding."""
    import make_deepspec
    base = dict(layers=2, heads=4, kv_heads=2, head_dim=16, ffn=96, block=7, markov_rank=16, mask_token=3,
                num_target_layers=5)
    drafter = make_deepspec.make_deepspec(os.path.join(tmp, "inf_d"), embed_from=common.stories_model(),
                                          markov_head="vanilla", conf=True, conf_with_markov=True, taps=(1, 3),
                                          seed=201, **base)
    outs = {}
    for t in ("F32", "Q4_K_M"):
        out = os.path.join(tmp, f"inf_{t}")
        common.run([common.tool("dspark"), "inflate", "-m", common.stories_model(), "-d", drafter, "-o", out,
                    "--hidden", "256", "--ffn", "512", "--layers", "8", "--dtype", "f32", "--gguf", t])
        outs[t] = out
        g = GGUFFile(os.path.join(out, "target.gguf"))
        chk.equal(f"inflate --gguf {t}: target.gguf file_type", g.metadata.get("general.file_type"), FILE_TYPE[t])
    toks = [1, 403, 407, 261, 378, 8, 55]
    a = common.ref_dump(os.path.join(outs["F32"], "target"), toks, tag="gw_inf_hf")["logits"]
    b = common.ref_dump(os.path.join(outs["F32"], "target.gguf"), toks, tag="gw_inf_g")["logits"]
    chk.close("inflate --gguf F32: target.gguf logits equal OUT/target's", b, a, 1e-4)
    path, d = os.path.join(outs["Q4_K_M"], "target.gguf"), os.path.join(outs["Q4_K_M"], "drafter")
    for prompt in ("Once upon a time", "Lily wanted to"):
        want = common.generate_json(path, prompt, 32, ["--spec", "none"]).get("tokens")
        got = common.generate_json(path, prompt, 32, ["--spec", "dspark", "-d", d]).get("tokens")
        chk.equal(f"inflate --gguf Q4_K_M {prompt!r}: speculative tokens equal plain decoding", got, want)
    p = dspark("inflate", "-m", common.stories_model(), "-d", drafter, "-o", os.path.join(tmp, "inf_bad"), "--gguf", "Q9")
    chk.equal(f"inflate --gguf Q9: one-line error naming it: {p.stderr.strip()!r}",
              p.returncode == 1 and "Q9" in p.stderr and not os.path.exists(os.path.join(tmp, "inf_bad")), True)


def check_bad(chk, tmp):
    src = common.stories_model()

    def refused(label, out, needle):
        p = dspark("quantize", src, out, "--gguf", "Q8_0")
        lines = p.stderr.strip().splitlines()
        chk.equal(f"{label}: exit status 1", p.returncode, 1)
        chk.equal(f"{label}: one line naming {needle!r}: {p.stderr.strip()!r}",
                  len(lines) >= 1 and needle in lines[-1], True)

    p = dspark("quantize", src, os.path.join(tmp, "x.gguf"), "--gguf", "Q3_X")
    chk.equal("unknown TYPE: exit status 1", p.returncode, 1)
    chk.equal(f"unknown TYPE: named with the list: {p.stderr.strip()!r}",
              "Q3_X" in p.stderr and "Q4_K_M" in p.stderr and len(p.stderr.strip().splitlines()) == 1, True)
    d = os.path.join(tmp, "a_dir")
    os.makedirs(d, exist_ok=True)
    refused("OUT a directory", d, d)
    fifo = os.path.join(tmp, "a_fifo")
    if not os.path.exists(fifo):
        os.mkfifo(fifo)
    refused("OUT a FIFO", fifo, fifo)
    other = os.path.join(tmp, "someone_elses.gguf")
    shutil.copy(src, other)
    before = open(other, "rb").read()
    refused("OUT an existing GGUF not written by dspark", other, other)
    chk.equal("that file is unchanged", open(other, "rb").read() == before, True)
    txt = os.path.join(tmp, "notes.txt")
    open(txt, "w").write("keep me\n")
    refused("OUT an existing text file", txt, txt)
    chk.equal("the text file is unchanged", open(txt).read(), "keep me\n")
    prev = os.path.join(tmp, "prev.gguf")
    quantize(src, prev, "F32")
    p = dspark("quantize", src, prev, "--gguf", "Q8_0")
    chk.equal(f"a previous dspark output is replaced: {p.stderr.strip()[-200:]!r}", p.returncode, 0)
    chk.equal("the replaced file is Q8_0", GGUFFile(prev).metadata.get("general.file_type"), 7)
    chk.equal("no temporary left behind", [f for f in os.listdir(tmp) if ".tmp." in f], [])


def main():
    chk = common.Checker("gguf_write")
    tmp = os.path.join(common.tmp_dir(), f"gguf_write_{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    check_types_and_error(chk, tmp)
    hf = check_metadata(chk, tmp)
    check_round_trips(chk, tmp, hf)
    check_archs(chk, tmp)
    check_gemma4_sharing(chk, tmp)
    check_gemma4_tokenizer(chk, tmp)
    check_gguf_py(chk, tmp)
    check_spec(chk, tmp)
    check_inflate(chk, tmp)
    check_bad(chk, tmp)
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(hf, ignore_errors=True)
    chk.finish()


if __name__ == "__main__":
    main()
