#!/usr/bin/python3
"""Checks of the DeepSpec drafter reference (deepspec_ref.py) and writer (make_deepspec.py) on
their own (no C binaries needed):

  - make_deepspec round-trips through deepspec_ref.load: exact f32 values, bf16 rounding, sharding
    does not change any value, same seed = same bytes; tensor names/counts are the format's (64
    for a 5-layer Qwen3 DSpark with confidence head, 74 for Gemma 4); --embed-from copies the
    stories260K embeddings exactly; the CLI works;
  - with W2 = 0, the vanilla / gated / rnn Markov walks equal the DFlash (markov_rank 0) walk;
  - the walk (Markov bias, confidences, prev chaining, lowest-id ties) equals a second, plain
    numpy loop implementation for every head type;
  - the drafter is invariant to the order of context rows when rows move with their positions,
    and not when only the rows move (RoPE matters); chunked context equals one projection;
  - the block is bidirectional (a later slot's input changes slot 0) and sees the context;
  - Gemma proportional RoPE with factor 1.0 equals full RoPE (and llama_ref's halves RoPE); with
    factor 0.25 only the first gd/8 pairs rotate; partial vs full changes the drafter;
  - GQA: duplicating kv heads into an MHA drafter gives the same output;
  - Gemma embed scale is sqrt(H) rounded to the embedding dtype (bf16(sqrt(3840)) = 62);
    layer_scalar and the softcap are applied;
  - the loader rejects the broken drafters the C parity test uses, naming the problem.
"""

import copy
import json
import os
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import deepspec_ref as ds  # noqa: E402
import llama_ref  # noqa: E402
import make_deepspec  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def tmp(name):
    return os.path.join(common.tmp_dir(), "dsself_" + name)


def rows_for(m, n, seed):
    return np.random.default_rng(seed).standard_normal((n, m.config.n_taps * m.config.hidden)).astype(np.float32)


def ctx_of(m, rows):
    return ds.project_context(m, rows, np.arange(len(rows)))


# ---------------------------------------------------------------------------------------------

def check_roundtrip(chk):
    base = dict(hidden=32, vocab=64, layers=2, heads=4, kv_heads=2, ffn=40, seed=21,
                markov_head="gated", attention_bias=True)
    for style in ("qwen3", "gemma4"):
        hd = 8 if style == "qwen3" else 16
        single = make_deepspec.make_deepspec(tmp(f"rt_{style}"), style=style, head_dim=hd, **base)
        m = ds.load(single)
        plan = make_deepspec.tensor_plan(style, 32, 64, 2, 4, 2, hd, 40, 2, 16, "gated", True, True, True)
        chk.equal(f"{style}: plan names = expected_tensors", sorted(n for n, _, _ in plan),
                  sorted(ds.expected_tensors(m.config)))
        for name, shape, kind in plan:
            want = make_deepspec.random_tensor(21, name, shape, kind, style)
            chk.close(f"{style} f32 round trip {name}", m.w(name).numpy(), want, 1e-30)
        sh_dir = make_deepspec.make_deepspec(tmp(f"rt_{style}_sh"), style=style, head_dim=hd, shards=3, **base)
        files = sorted(f for f in os.listdir(sh_dir) if f.endswith(".safetensors"))
        chk.equal(f"{style}: shard files", files, ["model-%05d-of-00003.safetensors" % i for i in (1, 2, 3)])
        sh = ds.load(sh_dir)
        chk.equal(f"{style}: sharded tensor names", sorted(sh.weights), sorted(m.weights))
        for name in m.weights:
            chk.close(f"{style} sharded {name}", sh.w(name).numpy(), m.w(name).numpy(), 1e-30)
        bf = ds.load(make_deepspec.make_deepspec(tmp(f"rt_{style}_bf16"), style=style, head_dim=hd, dtype="bf16", **base))
        for name in m.weights:
            want = m.w(name).to(torch.bfloat16).double()
            chk.close(f"{style} bf16 round trip {name}", bf.w(name).numpy(), want.numpy(), 1e-30)
        again = make_deepspec.make_deepspec(tmp(f"rt_{style}_again"), style=style, head_dim=hd, **base)
        with open(os.path.join(single, "model.safetensors"), "rb") as a, \
                open(os.path.join(again, "model.safetensors"), "rb") as b:
            chk.equal(f"{style}: same seed, same bytes", a.read() == b.read(), True)
    # Released geometry: 5 layers, vanilla Markov head, confidence head with Markov input.
    for style, count in (("qwen3", 64), ("gemma4", 74)):
        plan = make_deepspec.tensor_plan(style, 64, 512, 5, 4, 2, 16, 96, 5, 16, "vanilla", True, True, False)
        chk.equal(f"{style}: tensor count of a 5-layer DSpark", len(plan), count)
    # --embed-from copies the target's embeddings (GGUF) exactly.
    stories = common.stories_model()
    d = make_deepspec.make_deepspec(tmp("embed_from"), embed_from=stories)
    m = ds.load(d)
    t = llama_ref.load_gguf(stories)
    chk.close("embed_from: embed_tokens", m.w("embed_tokens.weight").numpy(), t.w("token_embd.weight").numpy(), 1e-30)
    chk.close("embed_from: lm_head", m.w("lm_head.weight").numpy(), t.w("output.weight").numpy(), 1e-30)
    chk.equal("embed_from: hidden/vocab/target layers", (m.config.hidden, m.config.vocab, m.config.num_target_layers),
              (64, 512, 5))
    # The CLI.
    out = tmp("cli")
    args = [sys.executable, os.path.join(HERE, "make_deepspec.py"), out, "--style", "gemma4", "--hidden", "64",
            "--vocab", "512", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--head-dim", "32",
            "--ffn", "96", "--block", "7", "--markov-rank", "16", "--markov-head", "rnn", "--conf", "1",
            "--conf-with-markov", "0", "--taps", "-1,3", "--num-target-layers", "5", "--mask-token", "3",
            "--dtype", "bf16", "--shards", "2", "--layer-scalar", "0.75", "--attention-bias", "0",
            "--seed", "5"]
    p = subprocess.run(args, capture_output=True, text=True)
    chk.equal("CLI exit status", (p.returncode, p.stderr), (0, ""))
    m = ds.load(out)
    c = m.config
    chk.equal("CLI config", (c.style, c.head_dim, c.n_kv_heads, c.markov_type, c.conf, c.conf_with_markov,
                             c.target_layer_ids, c.rope_pairs),
              ("gemma4", 32, 2, "rnn", True, False, (-1, 3), 4))
    chk.equal("CLI layer_scalar", float(m.w("layers.1.layer_scalar")[0]), 0.75)


def check_w2_zero(chk):
    for head in ("vanilla", "gated", "rnn"):
        for style in ("qwen3", "gemma4"):
            m = ds.load(make_deepspec.make_deepspec(tmp(f"w2_{style}_{head}"), style=style, markov_head=head,
                                                    conf=False, seed=31))
            m.weights["markov_head.markov_w2.weight"] = torch.zeros_like(m.w("markov_head.markov_w2.weight"))
            dflash = ds.with_config(m, markov_rank=0, markov_type="none")
            ctx = ctx_of(m, rows_for(m, 6, 1))
            for anchor in (0, 17, 511):
                a, b = ds.draft(m, ctx, anchor), ds.draft(dflash, ctx, anchor)
                chk.close(f"W2=0 {style}/{head} anchor {anchor}: logits", a.logits.numpy(), b.logits.numpy(), 1e-12)
                chk.equal(f"W2=0 {style}/{head} anchor {anchor}: tokens", a.tokens, b.tokens)
            # and with the real W2 the head does matter
            m2 = ds.load(make_deepspec.make_deepspec(tmp(f"w2_{style}_{head}"), style=style, markov_head=head,
                                                     conf=False, seed=31))
            diff = float((ds.draft(m2, ctx, 17).logits - ds.draft(dflash, ctx, 17).logits).abs().max())
            chk.equal(f"{style}/{head}: the Markov bias changes the logits", diff > 0.1, True)


def numpy_walk(m, h, U, anchor):
    """A second, plain loop implementation of the greedy walk and the confidences."""
    cfg = m.config
    W = {k: v.numpy() for k, v in m.weights.items()}
    h, U = h.numpy(), U.numpy()
    r, V, H = cfg.markov_rank, cfg.vocab, cfg.hidden
    sig = lambda z: 1.0 / (1.0 + np.exp(-z))  # noqa: E731
    prev, s = anchor, np.zeros(r)
    toks, logits, confs = [], [], []
    for k in range(cfg.block_size):
        bias = np.zeros(V)
        if r:
            w1 = W["markov_head.markov_w1.weight"][prev]
            if cfg.markov_type == "vanilla":
                u = w1
            elif cfg.markov_type == "gated":
                gw, gb = W["markov_head.gate_proj.weight"], W["markov_head.gate_proj.bias"]
                u = np.array([sig(sum(gw[i, j] * h[k, j] for j in range(H)) +
                                  sum(gw[i, H + j] * w1[j] for j in range(r)) + gb[i]) * w1[i] for i in range(r)])
            else:
                jw, jb = W["markov_head.joint_proj.weight"], W["markov_head.joint_proj.bias"]
                z = np.concatenate([s, w1, h[k]])
                g, c, o = (jw[:r] @ z + jb[:r]), (jw[r:2 * r] @ z + jb[r:2 * r]), (jw[2 * r:] @ z + jb[2 * r:])
                s = sig(g) * s + (1 - sig(g)) * np.tanh(c)
                u = np.tanh(o)
            w2 = W["markov_head.markov_w2.weight"]
            bias = np.array([sum(w2[v, i] * u[i] for i in range(r)) for v in range(V)])
        lk = U[k] + bias
        tok = min(v for v in range(V) if lk[v] == lk.max())
        if cfg.conf:
            pw, pb = W["confidence_head.proj.weight"][0], W["confidence_head.proj.bias"][0]
            feat = np.concatenate([h[k], W["markov_head.markov_w1.weight"][prev]]) if cfg.conf_with_markov else h[k]
            confs.append(sig(float(pw @ feat) + pb))
        else:
            confs.append(np.nan)
        toks.append(tok)
        logits.append(lk)
        prev = tok
    return toks, np.array(logits), np.array(confs)


def check_walk(chk):
    cases = [("none", False, False), ("vanilla", True, True), ("gated", True, True), ("gated", True, False),
             ("rnn", True, False), ("rnn", True, True), ("vanilla", False, False)]
    for i, (head, conf, cwm) in enumerate(cases):
        m = ds.load(make_deepspec.make_deepspec(tmp(f"walk_{i}"), hidden=16, vocab=40, heads=2, kv_heads=1,
                                                head_dim=8, ffn=24, markov_rank=6, markov_head=head, conf=conf,
                                                conf_with_markov=cwm, block=5, seed=40 + i))
        ctx = ctx_of(m, rows_for(m, 4, i))
        for anchor in (0, 13):
            r = ds.draft(m, ctx, anchor)
            toks, logits, confs = numpy_walk(m, r.h, r.U, anchor)
            label = f"walk {head} conf={conf} with_markov={cwm} anchor {anchor}"
            chk.equal(f"{label}: tokens", r.tokens, toks)
            chk.close(f"{label}: logits", r.logits.numpy(), logits, 1e-10)
            chk.equal(f"{label}: NaN confidences", list(np.isnan(r.conf.numpy())), list(np.isnan(confs)))
            if conf:
                chk.close(f"{label}: confidences", r.conf.numpy(), confs, 1e-12)
    # Ties go to the lowest id.
    m = ds.load(make_deepspec.make_deepspec(tmp("walk_tie"), hidden=16, vocab=40, heads=2, kv_heads=1, head_dim=8,
                                            ffn=24, markov_head="none", conf=False, block=3))
    U = torch.zeros(3, 40, dtype=torch.float64)
    U[1, 7] = U[1, 30] = 1.0
    toks, _, _, _ = ds.walk(m, torch.zeros(3, 16, dtype=torch.float64), U, 5)
    chk.equal("ties: lowest id", toks, [0, 7, 0])


def check_context_order(chk):
    for style in ("qwen3", "gemma4"):
        m = ds.load(make_deepspec.make_deepspec(tmp(f"perm_{style}"), style=style, seed=51))
        rows = rows_for(m, 9, 2)
        ref = ds.draft(m, ctx_of(m, rows), 33)
        perm = np.random.default_rng(3).permutation(9)
        moved = ds.draft(m, ds.project_context(m, rows[perm], perm), 33)
        chk.close(f"{style}: rows permuted with their positions", moved.logits.numpy(), ref.logits.numpy(), 1e-10)
        chk.close(f"{style}: ... confidences", moved.conf.numpy(), ref.conf.numpy(), 1e-12)
        wrong = ds.draft(m, ds.project_context(m, rows[perm], np.arange(9)), 33)
        chk.equal(f"{style}: rows permuted without their positions change the logits",
                  float((wrong.logits - ref.logits).abs().max()) > 1e-6, True)
        ctx = ds.empty_context(m)
        for a, b in ((0, 4), (4, 5), (5, 9)):
            ctx = ds.append_context(m, ctx, rows[a:b])
        chunked = ds.draft(m, ctx, 33)
        chk.close(f"{style}: chunked context", chunked.logits.numpy(), ref.logits.numpy(), 1e-12)
        # the block sees the context, and is bidirectional
        rows2 = rows.copy()
        rows2[0] += 1.0
        chk.equal(f"{style}: the first context row matters",
                  float((ds.draft(m, ctx_of(m, rows2), 33).logits - ref.logits).abs().max()) > 1e-6, True)
        x = ds.block_input(m, 33)
        x[-1] += torch.from_numpy(np.random.default_rng(4).standard_normal(m.config.hidden))
        h, U = ds.block_forward(m, ctx_of(m, rows), 33, x=x)
        chk.equal(f"{style}: the last slot's input changes slot 0 (bidirectional)",
                  float((U[0] - ref.U[0]).abs().max()) > 1e-6, True)
        h0, U0 = ds.block_forward(m, ctx_of(m, rows), 33)
        chk.close(f"{style}: block_forward with x=None", U0.numpy(), ref.U.numpy(), 1e-14)
        # s shifts the block position: default s = number of context rows
        chk.equal(f"{style}: block position matters",
                  float((ds.draft(m, ctx_of(m, rows), 33, s=12).logits - ref.logits).abs().max()) > 1e-6, True)


def check_rope(chk):
    gd = 32
    cfg_full = ds.DeepSpecConfig(style="gemma4", hidden=64, vocab=8, ffn=8, n_layers=1, n_heads=2, n_kv_heads=1,
                                 head_dim=gd, norm_eps=1e-6, rope_theta=1e6, rope_pairs=gd // 2, attn_scale=1.0,
                                 attention_bias=False, softcap=0, embed_scale=1, block_size=1, mask_token_id=0,
                                 markov_rank=0, markov_type="none", conf=False, conf_with_markov=False,
                                 target_layer_ids=(0,), num_target_layers=2)
    with open(os.path.join(make_deepspec.make_deepspec(tmp("rope_cfg"), style="gemma4"), "config.json")) as f:
        base = json.load(f)
    c1 = copy.deepcopy(base)
    c1["rope_parameters"]["full_attention"]["partial_rotary_factor"] = 1.0
    p1 = ds.parse_config(c1)
    c_def = copy.deepcopy(base)
    c_def["rope_parameters"]["full_attention"] = {"rope_theta": 1e6, "rope_type": "default"}
    pdef = ds.parse_config(c_def)
    p25 = ds.parse_config(base)
    chk.equal("proportional factor 1.0 rotates every pair", (p1.rope_pairs, pdef.rope_pairs, p25.rope_pairs),
              (16, 16, 4))
    x = torch.from_numpy(np.random.default_rng(6).standard_normal((20, 3, gd)))
    pos = torch.arange(20, dtype=torch.float64) + 5
    full = ds.rope(x, pos, cfg_full)
    cos, sin = llama_ref.rope_tables(20, gd, 1e6, torch.float64, start=5)
    chk.close("full RoPE = llama_ref halves RoPE", full.numpy(), llama_ref.apply_rope(x, cos, sin, "halves").numpy(), 1e-12)
    chk.close("factor 1.0 = full RoPE", ds.rope(x, pos, p1).numpy(), full.numpy(), 1e-15)
    part = ds.rope(x, pos, p25)
    rot = list(range(4)) + list(range(16, 20))
    ident = list(range(4, 16)) + list(range(20, 32))
    chk.close("factor 0.25: first 4 pairs rotate as full RoPE", part[..., rot].numpy(), full[..., rot].numpy(), 1e-15)
    chk.close("factor 0.25: the other pairs are the identity", part[..., ident].numpy(), x[..., ident].numpy(),
              1e-300)
    chk.close("inv_freq divisor is the full head dim", ds.inv_freq(p25)[:4].numpy(),
              1e6 ** (-2.0 * np.arange(4) / gd), 1e-18)
    # Whole drafter: full RoPE via factor 1.0 and rope_type default agree; partial differs.
    m = ds.load(make_deepspec.make_deepspec(tmp("rope_model"), style="gemma4", seed=61))
    rows = rows_for(m, 7, 7)
    ra = ds.draft(ds.with_config(m, rope_pairs=p1.rope_pairs), ctx_of(ds.with_config(m, rope_pairs=16), rows), 9)
    rb = ds.draft(ds.with_config(m, rope_pairs=pdef.rope_pairs), ctx_of(ds.with_config(m, rope_pairs=16), rows), 9)
    rp = ds.draft(m, ctx_of(m, rows), 9)
    chk.close("drafter: factor 1.0 = default RoPE", ra.logits.numpy(), rb.logits.numpy(), 1e-15)
    chk.equal("drafter: partial RoPE differs from full", float((ra.logits - rp.logits).abs().max()) > 1e-6, True)
    # Qwen3 theta comes from rope_theta; Gemma ignores the top-level / sliding theta.
    chk.equal("gemma theta from full_attention", p25.rope_theta, 1e6)


def check_gqa(chk):
    for style in ("qwen3", "gemma4"):
        m = ds.load(make_deepspec.make_deepspec(tmp(f"gqa_{style}"), style=style, heads=4, kv_heads=2, seed=71,
                                                attention_bias=(style == "qwen3")))
        cfg = m.config
        d = cfg.head_dim
        w = dict(m.weights)
        for i in range(cfg.n_layers):
            for nm in ("k_proj", "v_proj"):
                for suffix in (".weight", ".bias"):
                    key = f"layers.{i}.self_attn.{nm}{suffix}"
                    if key in w:
                        t = w[key].reshape(cfg.n_kv_heads, d, *w[key].shape[1:])
                        t = t.repeat_interleave(cfg.n_heads // cfg.n_kv_heads, dim=0)
                        w[key] = t.reshape(cfg.n_heads * d, *w[key].shape[1:])
        mha = ds.DeepSpecModel(ds.replace(cfg, n_kv_heads=cfg.n_heads), w)
        rows = rows_for(m, 5, 8)
        a, b = ds.draft(m, ctx_of(m, rows), 21), ds.draft(mha, ctx_of(mha, rows), 21)
        chk.close(f"{style}: GQA = MHA with duplicated kv heads", a.logits.numpy(), b.logits.numpy(), 1e-11)


def check_gemma_details(chk):
    chk.equal("bf16(sqrt(3840))", ds.embed_scale_for(3840, "BF16"), 62.0)
    chk.equal("f32(sqrt(64))", ds.embed_scale_for(64, "F32"), 8.0)
    chk.equal("f32(sqrt(48))", ds.embed_scale_for(48, "F32"), float(np.float32(np.sqrt(48))))
    chk.equal("f16(sqrt(3840))", ds.embed_scale_for(3840, "F16"), 61.96875)
    for dtype, want in (("f32", float(np.float32(np.sqrt(48)))), ("bf16", 6.9375)):
        m = ds.load(make_deepspec.make_deepspec(tmp(f"escale_{dtype}"), style="gemma4", hidden=48, dtype=dtype))
        chk.equal(f"gemma {dtype} drafter with H=48: embed scale", m.config.embed_scale, want)
    q = ds.load(make_deepspec.make_deepspec(tmp("escale_q"), style="qwen3", hidden=48, dtype="bf16"))
    chk.equal("qwen3: no embed scale", q.config.embed_scale, 1.0)
    # layer_scalar: 0.75 equals 1.0 with the scalar multiplied in by hand
    d1 = make_deepspec.make_deepspec(tmp("ls_1"), style="gemma4", seed=81, layers=1, layer_scalar=1.0)
    d75 = make_deepspec.make_deepspec(tmp("ls_75"), style="gemma4", seed=81, layers=1, layer_scalar=0.75)
    m1, m75 = ds.load(d1), ds.load(d75)
    rows = rows_for(m1, 4, 9)
    a = ds.load(make_deepspec.make_deepspec(tmp("ls2_1"), style="gemma4", seed=81, layers=2, layer_scalar=1.0))
    b = ds.load(make_deepspec.make_deepspec(tmp("ls2_75"), style="gemma4", seed=81, layers=2, layer_scalar=0.75))
    chk.equal("two layers: layer_scalar 0.75 changes the drafter",
              float((ds.draft(a, ctx_of(a, rows), 3).logits - ds.draft(b, ctx_of(b, rows), 3).logits).abs().max()) > 1e-3,
              True)
    # With one layer, x_out * 0.75 then the final RMSNorm: only eps distinguishes the two, so the
    # normed hidden states agree to ~eps.
    h1, _ = ds.block_forward(m1, ctx_of(m1, rows), 3)
    h75, _ = ds.block_forward(m75, ctx_of(m75, rows), 3)
    chk.close("one layer: layer_scalar only rescales before the final norm", h75.numpy(), h1.numpy(), 1e-5)
    # softcap
    m = ds.load(make_deepspec.make_deepspec(tmp("softcap"), style="gemma4", seed=82, softcap=2.0))
    r = ds.draft(m, ctx_of(m, rows_for(m, 3, 10)), 5)
    chk.equal("softcap bounds U", float(r.U.abs().max()) < 2.0, True)
    raw = r.h @ m.w("lm_head.weight").T
    chk.close("softcap = tanh(U/c)*c", r.U.numpy(), (torch.tanh(raw / 2.0) * 2.0).numpy(), 1e-14)


BROKEN = [  # (label, make_deepspec overrides, words of which one must appear in the error)
    ("markov_head_type lstm", dict(config_overrides={"markov_head_type": "lstm"}), ("markov_head_type",)),
    ("missing tensor", dict(drop_tensors=["layers.1.self_attn.k_norm.weight"]), ("layers.1.self_attn.k_norm.weight",)),
    ("extra tensor", dict(extra_tensors={"layers.0.self_attn.extra.weight": (4, 4)}), ("layers.0.self_attn.extra.weight",)),
    ("wrong shape", dict(shape_overrides={"layers.0.mlp.up_proj.weight": (97, 64)}), ("layers.0.mlp.up_proj.weight",)),
    ("target layer 4", dict(taps=(1, 4)), ("layer",)),
    ("target layer 7", dict(taps=(1, 7)), ("layer",)),
    ("mask token 512", dict(mask_token=512), ("mask",)),
    ("moe", dict(config_overrides={"enable_moe_block": True}), ("moe",)),
    ("gemma k_eq_v false", dict(style="gemma4", config_overrides={"attention_k_eq_v": False}), ("k_eq_v",)),
    ("gemma extra v_proj", dict(style="gemma4", extra_tensors={"layers.0.self_attn.v_proj.weight": (64, 64)}),
     ("layers.0.self_attn.v_proj.weight",)),
]


def check_rejects(chk):
    for i, (label, over, words) in enumerate(BROKEN):
        d = make_deepspec.make_deepspec(tmp(f"bad_{i}"), **over)
        try:
            ds.load(d)
            chk.equal(f"reference rejects {label}", "loaded", "ValueError")
        except ValueError as e:
            chk.equal(f"reference rejects {label} naming {words}", any(w.lower() in str(e).lower() for w in words), True)
    m = ds.load(make_deepspec.make_deepspec(tmp("pair_ok")))
    ds.check_pairing(m.config, 64, 512, 5)
    for args, word in (((32, 512, 5), "hidden"), ((64, 500, 5), "vocab"), ((64, 512, 6), "layers")):
        try:
            ds.check_pairing(m.config, *args)
            chk.equal(f"pairing {args} rejected", False, True)
        except ValueError as e:
            chk.equal(f"pairing {args} rejected naming {word}", word in str(e), True)
    with open(os.path.join(tmp("pair_ok"), "config.json"), "w") as f:
        f.write('{"architectures": ["Qwen3DSparkModel"], ')
    try:
        ds.load(tmp("pair_ok"))
        chk.equal("invalid JSON rejected", False, True)
    except json.JSONDecodeError:
        chk.equal("invalid JSON rejected", True, True)


def main():
    chk = common.Checker("deepspec_selfcheck")
    check_roundtrip(chk)
    check_w2_zero(chk)
    check_walk(chk)
    check_context_order(chk)
    check_rope(chk)
    check_gqa(chk)
    check_gemma_details(chk)
    check_rejects(chk)
    chk.finish()


if __name__ == "__main__":
    main()
