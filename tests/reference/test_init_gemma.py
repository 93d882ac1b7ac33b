#!/usr/bin/python3
"""`dspark init-drafter` for Gemma 3 / 4 targets writes Gemma4DSparkModel drafters on the target's
global attention geometry; `--style` overrides the choice both ways; a Qwen3 target keeps getting a
Qwen3 drafter.

Targets: tiny random HF checkpoints from make_hf_models.py (gemma3: linear RoPE scaling, softcap 10;
gemma4: global layers with head dim 32, 1 KV head, K = V, proportional RoPE rotating 4 of 16 pairs,
softcap 10; a bf16 gemma4 with hidden 48, where sqrt(48) rounds differently in bf16 and f32; a
Gemma 4 E-series gemma4e with per-layer embeddings and KV sharing, whose global layers have head dim
32 and separate K / V, 2 KV heads).

For every drafter:
  - config.json against the target's config.json read here (not through dspark): architecture,
    global_head_dim / num_global_key_value_heads (the full-attention layer's geometry, not the
    sliding one), rope_theta and partial_rotary_factor of rope_parameters.full_attention,
    final_logit_softcapping, attention_k_eq_v; taps and mask token equal to what the Qwen3 style
    picks for the same target;
  - embeddings: embed_tokens · (the drafter's embed scale, docs/formats/deepspec-checkpoint.md §4) equals the target's
    scaled embedding (f32: bit for bit where a stored f32 can reproduce it, else within one ulp;
    bf16 drafter of a bf16 target: the verbatim table); lm_head is the target's output matrix
    verbatim;
  - parity: its logits and confidences through ds_draft_dump against deepspec_ref.py (PyTorch),
    max |diff| < 1e-4 (as test_drafter_parity.py);
  - greedy speculative decoding with it (ds_greedy --drafter) is token-identical to plain decoding.
Training (on the gemma4 and the gemma4e targets): datagen --unconditional (the tiny targets have no
tokenizer) and a few `dspark train` steps from the Gemma 4 drafter: finite losses, frozen embed_tokens / lm_head unchanged, the
checkpoint reloads (parity against the reference again, now with a trained Markov head) and stays
lossless; `dspark train` without --init on a Gemma target writes a Gemma4DSparkModel init.
Qwen3 target: a Qwen3DSparkModel, and `--style qwen3` writes the same bytes as the default.
`--style bogus` is a usage error.
"""

import hashlib
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import deepspec_ref as ds  # noqa: E402
import llama_ref  # noqa: E402
import make_hf_models  # noqa: E402
import test_drafter_parity as parity  # noqa: E402

PROMPT = [1, 17, 42, 99, 5, 250, 31, 8, 77, 123, 64, 200]
TMP = os.path.join(common.tmp_dir(), f"init_gemma_{os.getpid()}")


def dspark(*args, ok=True):
    p = subprocess.run([common.tool("dspark"), *args], capture_output=True, text=True, timeout=600)
    if ok and p.returncode != 0:
        common.fail(f"dspark {' '.join(args)}: exit {p.returncode}\n{p.stderr.strip()}")
    return p


def init(target, name, *opts):
    d = os.path.join(TMP, name)
    dspark("init-drafter", "-m", target, "-o", d, "--layers", "2", "--block", "4", "--markov-rank", "16", *opts)
    return d


def load_json(path):
    with open(path) as f:
        return json.load(f)


def tensors(d):
    return llama_ref.read_hf_tensors(d)


def target_facts(target):
    """What the drafter must take from the target, read from its config.json and tensors."""
    top = load_json(os.path.join(target, "config.json"))
    c = top.get("text_config", top)
    gemma = top["architectures"][0].startswith("Gemma")
    t = tensors(target)
    pre = next(p for p in ("model.", "model.language_model.") if p + "embed_tokens.weight" in t)
    emb = np.asarray(t[pre + "embed_tokens.weight"], dtype=np.float32)
    head = np.asarray(t.get("lm_head.weight", emb), dtype=np.float32)
    H = c["hidden_size"]
    scale = np.float32(1.0)
    if gemma:  # sqrt(hidden) in the weight dtype
        scale = np.float32(math.sqrt(H))
        if c.get("torch_dtype") == "bfloat16":
            scale = np.float32(ds.embed_scale_for(H, "BF16"))
    hd = c.get("head_dim") or H // c["num_attention_heads"]
    kv = c.get("num_key_value_heads", c["num_attention_heads"])
    g = dict(head_dim=hd, kv=kv, theta=c.get("rope_theta", 1e6 if gemma else 1e4), partial=1.0,
             softcap=c.get("final_logit_softcapping") or 0.0)
    full = (c.get("rope_parameters") or {}).get("full_attention")
    if full:  # Gemma 4: the global (full-attention) layers' geometry and RoPE
        g["theta"] = full["rope_theta"]
        g["partial"] = full.get("partial_rotary_factor", 1.0)
        if c.get("attention_k_eq_v"):
            g["kv"] = c.get("num_global_key_value_heads", kv)
        g["head_dim"] = c.get("global_head_dim", hd)
    return dict(cfg=c, gemma=gemma, H=H, embed=emb, head=head, scale=scale, n_layers=c["num_hidden_layers"],
                global_=g)


def check_config(chk, label, d, tf, style):
    c = load_json(os.path.join(d, "config.json"))
    want_arch = "Gemma4DSparkModel" if style == "gemma4" else "Qwen3DSparkModel"
    chk.equal(f"{label}: architectures", c["architectures"], [want_arch])
    chk.equal(f"{label}: num_target_layers", c["num_target_layers"], tf["n_layers"])
    tc = tf["cfg"]
    if style == "gemma4":
        g = tf["global_"]
        fa = c.get("rope_parameters", {}).get("full_attention", {})
        got = (c.get("global_head_dim"), c.get("num_global_key_value_heads"), c.get("attention_k_eq_v"),
               fa.get("rope_theta"), fa.get("partial_rotary_factor", 1.0),
               float(c.get("final_logit_softcapping") or 0.0), c.get("hidden_activation"))
        want = (g["head_dim"], g["kv"], True, g["theta"], g["partial"], float(g["softcap"]), "gelu_pytorch_tanh")
        chk.equal(f"{label}: global geometry (head dim, kv heads, k_eq_v, theta, partial, softcap, act)", got, want)
    else:
        hd = tc.get("head_dim") or tf["H"] // tc["num_attention_heads"]
        chk.equal(f"{label}: qwen3 geometry (head_dim, kv heads)", (c.get("head_dim"), c.get("num_key_value_heads")),
                  (hd, tc.get("num_key_value_heads", tc["num_attention_heads"])))
    return c


def check_embeddings(chk, label, d, tf, verbatim):
    dt = ds.stored_dtypes(d)
    t = tensors(d)
    cfg = ds.parse_config(load_json(os.path.join(d, "config.json")), dt["embed_tokens.weight"])
    e = np.asarray(t["embed_tokens.weight"], dtype=np.float32)
    got = e * np.float32(cfg.embed_scale)           # what the drafter feeds its layers (f32)
    want = tf["embed"] * tf["scale"]                # what the target feeds its first layer (f32)
    if verbatim:
        chk.equal(f"{label}: embed_tokens is the target's table verbatim", bool(np.array_equal(e, tf["embed"])), True)
    exact = float(np.mean(got == want))
    ulp = np.spacing(np.abs(want).astype(np.float32))
    worst = float(np.max(np.abs(got.astype(np.float64) - want) / np.maximum(ulp, 1e-45)))
    print(f"{label}: embed scale drafter {cfg.embed_scale} target {float(tf['scale'])}; "
          f"scaled embeddings equal bit for bit: {exact:.4%}, worst {worst:.2f} ulp")
    if dt["embed_tokens.weight"] == "F32":
        chk.equal(f"{label}: scaled embeddings within one f32 ulp of the target's", worst <= 1.0, True)
        chk.equal(f"{label}: scaled embeddings mostly bit-identical ({exact:.4f})", exact >= 0.7, True)
    h = np.asarray(t["lm_head.weight"], dtype=np.float32)
    want_h = tf["head"]
    if dt["lm_head.weight"] == "BF16":
        want_h = np.asarray(ds.torch.tensor(want_h).to(ds.torch.bfloat16).to(ds.torch.float32))
    chk.equal(f"{label}: lm_head is the target's output matrix", bool(np.array_equal(h, want_h)), True)


def check_parity(chk, label, target, d, chunks=(5, 3, 7)):
    m = ds.load(d)
    cfg = m.config
    rng = np.random.default_rng(len(label) * 7 + sum(chunks))
    rows = rng.standard_normal((sum(chunks), cfg.n_taps * cfg.hidden)).astype(np.float32)
    anchors = [int(a) for a in rng.integers(0, cfg.vocab, len(chunks))]
    anchors[-1] = cfg.mask_token_id
    dump = parity.run_draft_dump(target, d, rows, chunks, anchors, f"ginit_{label}")
    ctx, used, worst = ds.empty_context(m), 0, 0.0
    for i, (n, anchor) in enumerate(zip(chunks, anchors)):
        ctx = ds.append_context(m, ctx, rows[used:used + n])
        used += n
        got = dump["drafts"][i]
        ref = ds.draft(m, ctx, anchor, forced=got["tokens"])
        rl = ref.logits.numpy()
        worst = max(worst, float(np.max(np.abs(got["logits"] - rl))))
        chk.close(f"{label} draft {i}: logits", got["logits"], rl, parity.TOL_LOGITS)
        if cfg.conf:
            chk.close(f"{label} draft {i}: confidences", got["conf"], ref.conf.numpy(), parity.TOL_CONF)
        for k, (tc, tr) in enumerate(zip(got["tokens"], ref.tokens)):
            if tc != tr and rl[k, tr] - rl[k, tc] < parity.TOL_LOGITS:
                print(f"note [{label}] draft {i} slot {k}: near-tie, C {tc}, reference {tr}")
            else:
                chk.equal(f"{label} draft {i}: slot {k} token", tc, tr)
    print(f"{label}: max |logits - reference| = {worst:.2e}")
    return m


def greedy(target, n, drafter=None):
    args = [common.tool("ds_greedy"), target, "--prompt-ids", common.ids_arg(PROMPT), "-n", str(n)]
    if drafter:
        args += ["--drafter", drafter]
    lines = common.run(args).splitlines()
    return [int(x) for x in lines[0].split(",") if x], lines[1]


def check_greedy(chk, label, target, d, n=40):
    plain = greedy(target, n)
    spec = greedy(target, n, d)
    chk.equal(f"{label}: speculative greedy == plain greedy ({len(plain[0])} tokens)", spec, plain)


def check_drafter(chk, label, target, d, tf, style, verbatim):
    check_config(chk, label, d, tf, style)
    check_embeddings(chk, label, d, tf, verbatim)
    m = check_parity(chk, label, target, d)
    chk.equal(f"{label}: reference drafter style", m.config.style, style)
    check_greedy(chk, label, target, d)


def check_training(chk, target, d, tf, tag="g4"):
    data = os.path.join(TMP, f"{tag}.data")
    dspark("datagen", "-m", target, "--unconditional", "-n", "8", "--max-tokens", "40", "--seed", "1",
           "-t", "2", "-o", data)
    out = os.path.join(TMP, f"{tag}_trained")
    dspark("train", "-m", target, "--data", data, "--init", d, "--steps", "12", "--anchors", "16", "--batch", "4",
           "--lr", "3e-3", "--seed", "3", "-t", "2", "-o", out)
    with open(os.path.join(out, "metrics.jsonl")) as f:
        losses = [json.loads(x)["loss"] for x in f if x.strip()]
    print(f"{tag} train losses:", " ".join(f"{x:.4f}" for x in losses))
    chk.equal(f"{tag} train: 12 steps logged", len(losses), 12)
    chk.equal(f"{tag} train: every loss finite", all(math.isfinite(x) for x in losses), True)
    chk.equal(f"{tag} train: loss falls (mean of the last 3 steps below the first 3)",
              sum(losses[-3:]) < sum(losses[:3]), True)
    chk.equal(f"{tag} train: checkpoint is a Gemma4DSparkModel",
              load_json(os.path.join(out, "config.json"))["architectures"], ["Gemma4DSparkModel"])
    a, b = tensors(d), tensors(out)
    for name in ("embed_tokens.weight", "lm_head.weight"):
        chk.equal(f"{tag} train: {name} frozen", bool(np.array_equal(a[name], b[name])), True)
    chk.equal(f"{tag} train: Markov W2 moved off 0", bool(np.any(b["markov_head.markov_w2.weight"] != 0)), True)
    check_parity(chk, f"{tag}_trained", target, out)
    check_greedy(chk, f"{tag}_trained", target, out)
    # A fresh drafter inside `dspark train` (no --init) follows the target's family too.
    out2 = os.path.join(TMP, f"{tag}_fresh")
    dspark("train", "-m", target, "--data", data, "--layers", "1", "--block", "3", "--markov-rank", "8",
           "--steps", "2", "--anchors", "8", "--batch", "2", "-t", "2", "-o", out2)
    chk.equal("train without --init: init is a Gemma4DSparkModel",
              load_json(os.path.join(out2, "init", "config.json"))["architectures"], ["Gemma4DSparkModel"])


def sha(d):
    h = hashlib.sha256()
    for fn in ("config.json", "model.safetensors"):
        with open(os.path.join(d, fn), "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def main():
    chk = common.Checker("init_gemma")
    shutil.rmtree(TMP, ignore_errors=True)
    os.makedirs(TMP)
    mk = make_hf_models.make_hf_model
    g3 = mk(os.path.join(TMP, "t_gemma3"), "gemma3", seed=31)
    g4 = mk(os.path.join(TMP, "t_gemma4"), "gemma4", seed=32)
    g4b = mk(os.path.join(TMP, "t_gemma4_bf16"), "gemma4", seed=33, dim=48, dtype="bf16")
    q3 = mk(os.path.join(TMP, "t_qwen3"), "qwen3", seed=34)
    try:
        facts = {p: target_facts(p) for p in (g3, g4, g4b, q3)}
        d_g3 = init(g3, "d_gemma3")
        check_drafter(chk, "gemma3", g3, d_g3, facts[g3], "gemma4", verbatim=True)
        d_g4 = init(g4, "d_gemma4")
        check_drafter(chk, "gemma4", g4, d_g4, facts[g4], "gemma4", verbatim=True)
        # bf16 target, hidden 48: an f32 drafter's scale sqrt(48) differs from the target's bf16 one.
        check_drafter(chk, "gemma4_bf16_f32", g4b, init(g4b, "d_g4b_f32"), facts[g4b], "gemma4", verbatim=False)
        check_drafter(chk, "gemma4_bf16_bf16", g4b, init(g4b, "d_g4b_bf16", "--dtype", "bf16"), facts[g4b], "gemma4",
                      verbatim=True)
        # Global head dim 48, partial_rotary_factor 0.3: 7 of 24 pairs rotate (a factor that is no
        # binary fraction; the written one must give exactly 7 to the loader and the reference).
        rp = {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
              "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.3, "rope_theta": 50000.0}}
        g4o = mk(os.path.join(TMP, "t_gemma4_odd"), "gemma4", seed=35, head_dim=24, layers=5,
                 config_overrides={"rope_parameters": rp})
        f_o = target_facts(g4o)
        f_o["global_"]["partial"] = 14 / 48  # what 0.3 means: floor(0.3 * 48 / 2) = 7 pairs
        d_o = init(g4o, "d_gemma4_odd")
        check_drafter(chk, "gemma4_partial_0.3", g4o, d_o, f_o, "gemma4", verbatim=True)
        chk.equal("gemma4_partial_0.3: reference rotates 7 pairs", ds.load(d_o).config.rope_pairs, 7)
        # --style overrides, both ways.
        d_q = init(g4, "d_gemma4_as_qwen3", "--style", "qwen3")
        check_drafter(chk, "gemma4 --style qwen3", g4, d_q, facts[g4], "qwen3", verbatim=False)
        c_q, c_g = load_json(os.path.join(d_q, "config.json")), load_json(os.path.join(d_g4, "config.json"))
        chk.equal("gemma4: taps and mask token as the Qwen3 style picks them",
                  (c_g["target_layer_ids"], c_g["mask_token_id"]), (c_q["target_layer_ids"], c_q["mask_token_id"]))
        check_drafter(chk, "qwen3 --style gemma4", q3, init(q3, "d_qwen3_as_gemma4", "--style", "gemma4"), facts[q3],
                      "gemma4", verbatim=False)
        # Qwen3 target: Qwen3DSparkModel by default, the same bytes as --style qwen3.
        d_q3 = init(q3, "d_qwen3")
        check_drafter(chk, "qwen3", q3, d_q3, facts[q3], "qwen3", verbatim=True)
        chk.equal("qwen3: --style qwen3 writes the default's bytes", sha(init(q3, "d_qwen3_s", "--style", "qwen3")),
                  sha(d_q3))
        p = dspark("init-drafter", "-m", q3, "-o", os.path.join(TMP, "d_bad"), "--style", "llama", ok=False)
        chk.equal(f"--style llama: usage error naming --style ({p.stderr.strip()!r})",
                  (p.returncode, "--style" in p.stderr, os.path.exists(os.path.join(TMP, "d_bad"))), (2, True, False))
        check_training(chk, g4, d_g4, facts[g4])
        # Gemma 4 E-series: per-layer embeddings, KV sharing, full layers with their own V.
        g4e = mk(os.path.join(TMP, "t_gemma4e"), "gemma4e", seed=36, layers=6)
        f_e = target_facts(g4e)
        d_e = init(g4e, "d_gemma4e")
        check_drafter(chk, "gemma4e", g4e, d_e, f_e, "gemma4", verbatim=True)
        check_training(chk, g4e, d_e, f_e, tag="g4e")
    finally:
        if chk.failures == 0:
            shutil.rmtree(TMP, ignore_errors=True)
    chk.finish()


if __name__ == "__main__":
    main()
