#!/usr/bin/python3
"""Our C trainer's loss and gradients equal the independent autograd reference (train_ref.py) on
random tiny drafters paired with the stories260K target (embed_tokens / lm_head copied from it).

First the reference proves itself, on every case in float64: (a) central finite differences of
the loss -- with the detached soft label c* held at its values -- agree with its autograd
gradient along a random direction over all trainable tensors and on the largest element of a few
tensors (relative 1e-6; observed <= 1e-7); (b) the loss values are recomputed another way -- each
block through deepspec_ref.draft (own context projection, Markov walk forced along the labels),
the target distribution from llama_ref's logits, sums in numpy -- within 1e-9. Then, through
`ds_train_grad`:

    ds_train_grad TARGET DRAFTER_DIR --tokens 1,2,3,... --n-prompt P --anchors 3,7,12 \
        [--ce 0.1 --l1 0.9 --conf 1.0 --kl 0] --out FILE

FILE: a safetensors file holding, for every trainable tensor (all but embed_tokens.weight and
lm_head.weight), its gradient under the same name (F32, same shape), plus the F32 scalars [1]
"loss", "loss_ce", "loss_l1", "loss_conf", "loss_kl" (0 when --kl is 0: not computed then) -- and
nothing else. Checks: every loss within 1e-4
relative; per tensor ||g_c - g_ref|| / max(||g_ref||, 1e-8) < 1e-3 (the C works in fp32).

Matrix (2 layers, f32, block 4 or 5): Qwen3 DFlash (no Markov head, no confidence), vanilla +
confidence with Markov input, gated + confidence without Markov input, rnn + confidence,
attention_bias; Gemma 4 vanilla and rnn (layer_scalar 0.75, softcap 30; the rnn one with
rms_norm_eps 0.05, so that its last layer_scalar has a real gradient); weights (1, 0, 0) once;
the KL(target || drafter) term (--kl) alone (0, 0, 0, 1) and next to the defaults (Qwen3 vanilla,
Gemma 4 rnn).
Gemma's last layer_scalar under eps 1e-6 has a gradient of ~4e-7 (the final RMSNorm is scale
invariant up to eps): it is held to an absolute bound, 1e-3 x 1e-4 x the whole gradient's norm.
The sequence is 24 stories tokens, n_prompt 5, anchors including ones near the end so some slots
have no label. `--ref-only` runs just the reference's self-checks.
"""

import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import deepspec_ref as ds  # noqa: E402
import llama_ref  # noqa: E402
import make_deepspec  # noqa: E402
import spm_tokenizer  # noqa: E402
import train_ref  # noqa: E402

TOL_LOSS_REL = 1e-4
TOL_GRAD_REL = 1e-3
TOL_FD_REL = 1e-6
GRAD_FLOOR = 1e-4

TEXT = ("Once upon a time, there was a little girl named Lily. She loved to play outside "
        "in the sun with her big red ball.")
N_TOKENS = 24
N_PROMPT = 5

BASE = dict(layers=2, heads=4, kv_heads=2, ffn=48, block=4, markov_rank=8, mask_token=3, dtype="f32")
DRAFTERS = {  # name -> make_deepspec overrides
    "qwen3_dflash": dict(markov_head="none", conf=False, taps=(1, 3), seed=201),
    "qwen3_vanilla_conf": dict(markov_head="vanilla", conf=True, conf_with_markov=True, block=5,
                               taps=(-1, 2), seed=202),
    "qwen3_gated_conf": dict(markov_head="gated", conf=True, conf_with_markov=False, taps=(0, 2, 3),
                             seed=203),
    "qwen3_rnn_conf": dict(markov_head="rnn", conf=True, conf_with_markov=True, block=5, taps=(1, 3),
                           seed=204),
    "qwen3_attention_bias": dict(markov_head="vanilla", conf=True, attention_bias=True, taps=(1, 2),
                                 seed=205),
    "gemma4_vanilla": dict(style="gemma4", markov_head="vanilla", conf=True, conf_with_markov=True,
                           layer_scalar=0.75, softcap=30.0, block=5, taps=(1, 3), seed=206),
    "gemma4_rnn": dict(style="gemma4", markov_head="rnn", conf=True, conf_with_markov=False, kv_heads=1,
                       layer_scalar=0.75, softcap=30.0, taps=(-1, 1, 3), norm_eps=0.05, seed=207),
}
# (case, drafter, anchors, (ce, l1, conf[, kl]) or None for the tool's defaults). N = 24: anchor 22 has
# one labelled slot, 21 two, 20 three.
CASES = [
    ("qwen3_dflash", "qwen3_dflash", (5, 9, 16, 22), None),
    ("qwen3_vanilla_conf", "qwen3_vanilla_conf", (5, 8, 13, 20, 22), None),
    ("qwen3_gated_conf", "qwen3_gated_conf", (6, 12, 21), None),
    ("qwen3_rnn_conf", "qwen3_rnn_conf", (5, 10, 19, 21), None),
    ("qwen3_attention_bias", "qwen3_attention_bias", (7, 14, 22), None),
    ("gemma4_vanilla", "gemma4_vanilla", (5, 11, 18, 21), None),
    ("gemma4_rnn", "gemma4_rnn", (6, 13, 20, 22), None),
    ("qwen3_vanilla_conf_ce_only", "qwen3_vanilla_conf", (5, 9, 17, 21), (1.0, 0.0, 0.0)),
    ("qwen3_vanilla_conf_kl_only", "qwen3_vanilla_conf", (5, 9, 17, 21), (0.0, 0.0, 0.0, 1.0)),
    ("qwen3_vanilla_conf_kl", "qwen3_vanilla_conf", (5, 8, 13, 20, 22), (0.1, 0.9, 1.0, 0.5)),
    ("gemma4_rnn_kl", "gemma4_rnn", (6, 13, 20, 22), (0.1, 0.9, 1.0, 0.5)),
    ("gemma4_vanilla_target_softcap", "gemma4_vanilla", (5, 11, 18, 21), None),
]
# Cases whose target has a final logit softcap (Gemma targets): its distribution in the L1 and
# confidence losses is softmax(c·tanh(logits / c)). 2.0 is well inside stories260K's logit range,
# so the cap changes the distribution a lot.
TARGET_SOFTCAP = {"gemma4_vanilla_target_softcap": 2.0}


def extra_of(name):
    c = TARGET_SOFTCAP.get(name, 0.0)
    return {"target_softcap": c} if c else {}
FD_CASES = [c[0] for c in CASES]


def drafter_dir(drafter, target):
    return make_deepspec.make_deepspec(os.path.join(common.tmp_dir(), f"train_drafter_{drafter}"),
                                       embed_from=target, **{**BASE, **DRAFTERS[drafter]})


def sequence(target):
    ids = spm_tokenizer.SPMTokenizer.from_gguf(target).encode(TEXT, add_bos=True)
    if len(ids) < N_TOKENS:
        common.fail(f"the stories tokenizer gave only {len(ids)} tokens for the training text")
    return ids[:N_TOKENS]


def weights_of(w):
    return dict(zip(("ce", "l1", "conf", "kl"), w)) if w else {}


# ---------------------------------------------------------------------------------------------
# The reference checks itself: finite differences (float64)

def fd_check(chk, target, name, tokens):
    _, drafter, anchors, w = next(c for c in CASES if c[0] == name)
    kw = {**weights_of(w), **extra_of(name)}
    m = train_ref.trainable_model(ds.load(drafter_dir(drafter, target)))
    R, G = train_ref.target_rows(m, target, tokens)
    names = train_ref.trainable_names(m.config)
    out = train_ref.losses(m, R, G, tokens, N_PROMPT, anchors, **kw)
    grads = dict(zip(names, torch.autograd.grad(out["loss"], [m.w(n) for n in names])))
    cstar = out["cstar"]  # c* is detached: differentiate the loss with c* held at these values

    def f():
        with torch.no_grad():
            return float(train_ref.losses(m, R, G, tokens, N_PROMPT, anchors, cstar_fixed=cstar, **kw)["loss"])

    def central(perturb, eps):
        with torch.no_grad():
            perturb(eps)
        up = f()
        with torch.no_grad():
            perturb(-2 * eps)
        down = f()
        with torch.no_grad():
            perturb(eps)
        return (up - down) / (2 * eps)

    # 1. a random direction over every trainable tensor at once
    gen = torch.Generator().manual_seed(7)
    dirs = {n: torch.randn(m.w(n).shape, generator=gen, dtype=torch.float64) for n in names}
    norm = float(torch.sqrt(sum(torch.sum(d * d) for d in dirs.values())))
    dirs = {n: d / norm for n, d in dirs.items()}

    def along(eps):
        for n in names:
            m.w(n).add_(eps * dirs[n])

    fd = central(along, 1e-5)
    an = float(sum(torch.sum(grads[n] * dirs[n]) for n in names))
    rel = abs(fd - an) / max(abs(an), 1e-12)
    print(f"fd [{name}] random direction: finite difference {fd:.12e}, autograd {an:.12e}, rel {rel:.1e}")
    chk.close(f"{name}: reference directional derivative (relative error)", rel, 0.0, TOL_FD_REL)

    # 2. single elements: the largest-gradient element of a few tensors
    picks = ["fc.weight", "layers.0.self_attn.q_norm.weight", "layers.1.mlp.down_proj.weight", "norm.weight"]
    picks += [n for n in names if n.startswith(("markov_head.", "confidence_head.")) or n.endswith("layer_scalar")]
    for n in picks:
        g = grads[n]
        idx = np.unravel_index(int(torch.argmax(torch.abs(g))), tuple(g.shape))

        def elem(eps, n=n, idx=idx):
            m.w(n)[idx] += eps

        fd = central(elem, 1e-6)
        an = float(g[idx])
        rel = abs(fd - an) / max(abs(an), 1e-2)  # floor: layer_scalar of the last layer is ~0
        print(f"fd [{name}] {n}{list(int(i) for i in idx)}: finite difference {fd:.10e}, autograd {an:.10e}, rel {rel:.1e}")
        chk.close(f"{name}: reference d loss / d {n}{list(int(i) for i in idx)} (relative error)", rel, 0.0, TOL_FD_REL)


def assembly_check(chk, target, name, tokens):
    """The loss assembly, recomputed another way: each block through deepspec_ref.draft (its own
    context projection of R[0..p-1], the Markov walk forced along the labels), the target
    distribution from llama_ref's own logits, the sums in numpy."""
    _, drafter, anchors, w = next(c for c in CASES if c[0] == name)
    ce_w, l1_w, conf_w, kl_w = (tuple(w) + (0.0,))[:4] if w else (0.1, 0.9, 1.0, 0.0)
    m = ds.load(drafter_dir(drafter, target))
    cfg = m.config
    R, _ = train_ref.target_rows(m, target, tokens)
    t_logits = llama_ref.forward(llama_ref.load(target), tokens).logits.numpy()
    N, B = len(tokens), cfg.block_size
    sums = {"ce": 0.0, "l1": 0.0, "conf": 0.0, "kl": 0.0}
    wsum = 0.0
    for p in anchors:
        labels = [tokens[q] if n_prompt_ok(q, N) else None for q in range(p + 1, p + 1 + B)]
        n_valid = next((k for k, lab in enumerate(labels) if lab is None), B)
        forced = [lab if lab is not None else 0 for lab in labels]
        ctx = ds.project_context(m, R[:p].numpy(), np.arange(p))
        r = ds.draft(m, ctx, tokens[p], forced=forced, s=p)
        for k in range(n_valid):
            z = r.logits[k].numpy()
            pd = np.exp(z - z.max())
            pd /= pd.sum()
            tl = t_logits[p + k]
            cap = TARGET_SOFTCAP.get(name, 0.0)
            if cap:
                tl = cap * np.tanh(tl / cap)
            pt = np.exp(tl - tl.max())
            pt /= pt.sum()
            wk = np.exp(-k / 4)
            l1 = np.abs(pd - pt).sum()
            sums["ce"] += wk * -np.log(pd[labels[k]])
            sums["l1"] += wk * l1
            sums["kl"] += wk * float(np.sum(pt[pt > 0] * (np.log(pt[pt > 0]) - np.log(pd[pt > 0]))))
            if cfg.conf:
                c, cstar = float(r.conf[k]), min(max(1 - l1 / 2, 0.0), 1.0)
                sums["conf"] += wk * -(cstar * np.log(c) + (1 - cstar) * np.log1p(-c))
            wsum += wk
    want = {f"loss_{k}": v / wsum for k, v in sums.items()}
    want["loss"] = ce_w * want["loss_ce"] + l1_w * want["loss_l1"] + conf_w * want["loss_conf"] + kl_w * want["loss_kl"]
    got, _ = train_ref.loss_and_grads(drafter_dir(drafter, target), target, tokens, N_PROMPT, anchors,
                                      **weights_of(w), **extra_of(name))
    for k in train_ref.LOSS_KEYS:
        rel = abs(got[k] - want[k]) / max(abs(want[k]), 1e-12)
        chk.close(f"{name}: reference {k} {got[k]:.10g} vs recomputed {want[k]:.10g}, relative error",
                  rel, 0.0, 1e-9)


def n_prompt_ok(q, N):
    return N_PROMPT <= q < N


# ---------------------------------------------------------------------------------------------
# The C tool against the reference

def run_train_grad(target, drafter, tokens, anchors, w, tag, target_softcap=0.0):
    out = os.path.join(common.tmp_dir(), f"train_grad_{tag}_{os.getpid()}.safetensors")
    args = [common.tool("ds_train_grad"), target, drafter, "--tokens", common.ids_arg(tokens),
            "--n-prompt", str(N_PROMPT), "--anchors", common.ids_arg(anchors), "--out", out]
    for flag, v in weights_of(w).items():
        args += [f"--{flag}", repr(float(v))]
    if target_softcap:
        args += ["--target-softcap", repr(float(target_softcap))]
    common.run(args)
    try:
        return ds._header(out), llama_ref.read_safetensors(out)
    finally:
        if os.path.exists(out):
            os.remove(out)


def compare_case(chk, target, tokens, name, drafter, anchors, w):
    d = drafter_dir(drafter, target)
    ref_loss, ref_grad = train_ref.loss_and_grads(d, target, tokens, N_PROMPT, anchors, **weights_of(w), **extra_of(name))
    print(f"[{name}] anchors {list(anchors)} weights {w or 'default'}: "
          + ", ".join(f"{k} {v:.6f}" for k, v in ref_loss.items()))
    header, got = run_train_grad(target, d, tokens, anchors, w, name, **extra_of(name))
    want_names = set(ref_grad) | set(train_ref.LOSS_KEYS)
    have = {n for n in header if n != "__metadata__"}
    chk.equal(f"{name}: missing tensors", sorted(want_names - have), [])
    chk.equal(f"{name}: unexpected tensors", sorted(have - want_names), [])
    for n in sorted(have & want_names):
        chk.equal(f"{name}: {n} dtype", header[n]["dtype"], "F32")
    for k in train_ref.LOSS_KEYS:
        if k not in got:
            continue
        if not chk.equal(f"{name}: {k} shape", list(got[k].shape), [1]):
            continue
        g, r = float(got[k][0]), ref_loss[k]
        if k == "loss_kl" and not weights_of(w).get("kl"):
            chk.equal(f"{name}: loss_kl without --kl (not computed)", g, 0.0)
            continue
        rel = abs(g - r) / max(abs(r), 1e-6)
        chk.close(f"{name}: {k} = {g:.7g} vs reference {r:.7g}, relative error", rel, 0.0, TOL_LOSS_REL)
    # One tensor's gradient is structurally ~0: Gemma's last layer_scalar, right before the
    # scale-invariant final RMSNorm (its gradient exists only through rms_norm_eps: ~4e-7 with
    # eps 1e-6). fp32 cannot match it relatively (the float32 run of this same reference is off
    # by ~15% there), so it is held to ||g_c - g_ref|| < TOL_GRAD_REL * GRAD_FLOOR * ||whole
    # gradient|| instead. Every other tensor gets the plain relative check.
    total = float(np.sqrt(sum(np.sum(r * r) for r in ref_grad.values())))
    cfg = ds.load(d).config
    tiny = {f"layers.{cfg.n_layers - 1}.layer_scalar"} if cfg.style == ds.GEMMA4 else set()
    worst = (0.0, None)
    for n, r in sorted(ref_grad.items()):
        if n not in got:
            continue
        g = got[n]
        if not chk.equal(f"{name}: {n} shape", list(g.shape), list(r.shape)):
            continue
        g = g.astype(np.float64)
        if not np.all(np.isfinite(g)):
            chk.close(f"{name}: gradient {n}", g, r, TOL_GRAD_REL)  # reports the non-finite value
            continue
        denom = max(np.linalg.norm(r), GRAD_FLOOR * total if n in tiny else 0.0, 1e-8)
        if denom > max(np.linalg.norm(r), 1e-8):
            print(f"note [{name}] {n}: |g_ref| {np.linalg.norm(r):.2e} is under {GRAD_FLOOR} x |whole gradient| "
                  f"{total:.2e}; relative error taken against the latter")
        rel = float(np.linalg.norm(g - r) / denom)
        worst = max(worst, (rel, n), key=lambda t: t[0])
        chk.close(f"{name}: gradient {n} (|g_ref| {np.linalg.norm(r):.3e}, |g_c| {np.linalg.norm(g):.3e}), "
                  f"relative error", rel, 0.0, TOL_GRAD_REL)
    print(f"[{name}] worst gradient relative error {worst[0]:.2e} ({worst[1]})")


def main():
    chk = common.Checker("train_grad")
    target = common.stories_model()
    tokens = sequence(target)
    for name in FD_CASES:
        fd_check(chk, target, name, tokens)
        assembly_check(chk, target, name, tokens)
    if "--ref-only" in sys.argv[1:]:
        chk.finish()
    if chk.failures:
        chk.finish()
    common.tool("ds_train_grad")
    for name, drafter, anchors, w in CASES:
        compare_case(chk, target, tokens, name, drafter, anchors, w)
    chk.finish()


if __name__ == "__main__":
    main()
