#!/usr/bin/python3
"""Does llama.cpp compute what dspark computes on the same GGUF file? For each architecture dspark loads
from GGUF, a random tiny Hugging Face checkpoint (tests/reference/make_hf_models.py) converted by the
reference converter (tests/reference/hf_to_gguf.py, with tokenizer.ggml.model "no_vocab": llama.cpp
then runs on token ids), run by llama.cpp's own library (bench/peer/llama_greedy.c: one thread, f32 KV
cache, no flash attention) and by dspark (ds_ref_dump, ds_greedy):

    bench/peer_gguf_check.py LLAMA_CPP_DIR [BUILD_DIR]    (LLAMA_CPP_DIR: built by scripts/bench_peer.sh)

Prints one JSON line per model: the largest logit difference after an 8-token prompt, the logits'
scale, whether 12 greedy ids agree, the same difference on llama-quantize's Q4_K_M of the file (and,
for scale, how far that file's logits lie from the f32 file's), the tensors whose type differs between llama-quantize's Q4_K_M of
the file and `dspark quantize --gguf Q4_K_M` of the checkpoint (row widths of 64 here: every K-quant
falls back as ggml's rules say), and for the Gemma 4 files a negative control: the same file with
one of gemma4's mappings broken for llama.cpp only (proportional RoPE made full, the per-expert scales
made 1, the per-layer embedding table zeroed), which must differ far more than the two engines do.
ggml's CPU GELU reads a table of halves (GGML_GELU_FP16), so Gemma's logits differ by ~1e-3 where
Qwen3's (SiLU) agree to ~1e-6."""

import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "reference"))
import common  # noqa: E402
import hf_to_gguf  # noqa: E402
import make_hf_models  # noqa: E402
from gguf_py import GGUFFile, T_UINT32  # noqa: E402

GEMMA3 = {"sliding_window_pattern": 6, "query_pre_attn_scalar": 16}
MODELS = [  # (name, make_hf_models arch, options, control: (tensor, how to break it for llama.cpp) or None)
    ("llama3", "llama3", {}, None),
    ("qwen3", "qwen3", {}, None),
    ("qwen3_moe", "qwen3_moe", {"config_overrides": {"mlp_only_layers": []}}, None),
    ("gemma3", "gemma3", {"layers": 7, "config_overrides": GEMMA3}, None),
    ("gemma4", "gemma4", {}, ("rope_freqs.weight", "ones")),
    # (8 layers: llama-quantize needs per-layer table rows of a multiple of 32; 2 shared: llama.cpp takes a shared
    # layer's cache from the layer before the first shared one (full) or the one before that (sliding))
    ("gemma4e", "gemma4e", {"layers": 8, "config_overrides": {"num_kv_shared_layers": 2}},
     ("per_layer_token_embd.weight", "zeros")),
    ("gemma4_moe", "gemma4_moe", {}, ("blk.0.ffn_down_exps.scale", "ones")),
]
PROMPT = [5, 17, 33, 2, 99, 150, 7, 64]


def build_tool(llama, out):
    lib = os.path.join(llama, "build-dspark-peer", "bin")
    subprocess.run(["gcc", "-O2", "-std=c11", "-o", out, os.path.join(HERE, "peer", "llama_greedy.c"),
                    "-I" + os.path.join(llama, "include"), "-I" + os.path.join(llama, "ggml", "include"),
                    "-L" + lib, "-lllama", "-Wl,-rpath," + lib], check=True)


def convert(hf, path, arch, broken=None):
    def edit(w):
        w.add("tokenizer.ggml.model", "no_vocab")
        w.add(arch + ".vocab_size", 300, T_UINT32)
        if broken:
            name, how = broken
            for i, t in enumerate(w.tensors):
                if t[0] == name:
                    n = len(t[3]) // 4
                    w.tensors[i] = (name, t[1], t[2], (np.ones if how == "ones" else np.zeros)(n, np.float32).tobytes())
    return hf_to_gguf.convert(hf, path, outtype="f32", edit=edit)


def llama_run(tool, path, n):
    p = subprocess.run([tool, path, ",".join(map(str, PROMPT)), str(n)], capture_output=True, text=True, timeout=300)
    if p.returncode:
        raise RuntimeError(p.stderr.strip())
    r = json.loads(p.stdout)
    return np.array(r["logits"], np.float32), r["ids"]


def quantize_both(llama, hf, path):
    """llama-quantize's Q4_K_M of the f32 file and `dspark quantize --gguf Q4_K_M` of the checkpoint;
    returns llama-quantize's file and the tensors the two type differently."""
    theirs, ours = path + ".llama-q4km.gguf", path + ".dspark-q4km.gguf"
    subprocess.run([os.path.join(llama, "build-dspark-peer", "bin", "llama-quantize"), path, theirs, "Q4_K_M"],
                   check=True, capture_output=True)
    subprocess.run([common.tool("dspark"), "quantize", hf, ours, "--gguf", "Q4_K_M"], check=True, capture_output=True)
    a, b = GGUFFile(theirs).tensors, GGUFFile(ours).tensors
    return theirs, sorted(n for n in set(a) | set(b) if n not in a or n not in b or a[n].ggml_type != b[n].ggml_type)


def main(argv):
    if len(argv) not in (1, 2):
        sys.exit(__doc__.split("\n\n")[1])
    if len(argv) == 2:
        os.environ["DSPARK_BIN"] = os.path.join(os.path.abspath(argv[1]), "bin")
    tmp = os.path.join(common.tmp_dir(), "peer_gguf")
    os.makedirs(tmp, exist_ok=True)
    tool = os.path.join(tmp, "llama_greedy")
    build_tool(argv[0], tool)
    for name, arch, opts, control in MODELS:
        hf = make_hf_models.make_hf_model(os.path.join(tmp, name), arch, seed=3, **opts)
        garch = json.load(open(os.path.join(hf, "config.json"))).get("architectures")[0]
        garch = hf_to_gguf.ARCHS[garch]
        path = convert(hf, os.path.join(tmp, name + ".gguf"), garch)
        theirs, their_ids = llama_run(tool, path, 12)
        ours = common.ref_dump(path, PROMPT, tag="peer_" + name)["logits"][-1]
        out = common.run([common.tool("ds_greedy"), path, "--prompt-ids", common.ids_arg(PROMPT), "-n", "12"]).split()[0]
        our_ids = [int(t) for t in out.split(",") if t]
        r = {"model": name, "arch": garch, "max_abs_logit_diff": float(np.abs(theirs - ours).max()),
             "logit_scale": float(np.abs(ours).max()), "greedy_ids_equal": our_ids == their_ids,
             "q4_k_m_type_mismatches": None}
        q4, r["q4_k_m_type_mismatches"] = quantize_both(argv[0], hf, path)
        # llama-quantize's own Q4_K_M file, run by both engines (K-quant and fallback blocks dequantized
        # as ggml does; llama.cpp multiplies them against its own quantized activations)
        ours_q = common.ref_dump(q4, PROMPT, tag="peer_q_" + name)["logits"][-1]
        r["q4_k_m_max_abs_logit_diff"] = float(np.abs(llama_run(tool, q4, 0)[0] - ours_q).max())
        r["q4_k_m_vs_f32_max_abs_logit_diff"] = float(np.abs(ours_q - ours).max())
        if control:
            bad = convert(hf, os.path.join(tmp, name + "_broken.gguf"), garch, control)
            r["control"] = f"{control[0]} set to {control[1]} for llama.cpp"
            r["control_max_abs_logit_diff"] = float(np.abs(llama_run(tool, bad, 0)[0] - ours).max())
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
