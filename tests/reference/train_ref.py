"""An independent PyTorch autograd reference of the DeepSpec drafter training loss (float64).

Written from the DeepSpec contract, docs/formats/deepspec-checkpoint.md section 6 (and sections 3-4 for the forward), not
from our C trainer. It reuses deepspec_ref's loader and building blocks (the drafter forward) and
llama_ref's target forward (taps and final hidden); the gradients come from torch autograd.

Definition, for one training sequence tok[0..N-1] with n_prompt (loss mask[i] = 1 iff
i >= n_prompt):

  * The frozen target runs the whole sequence: tap rows R (N, T*H) = the residual stream after
    each layer of target_layer_ids (-1 = embedding output), concatenated in that order, and the
    final normed hidden G (N, H).
  * Anchors p (given; each satisfies mask[p], mask[p+1] and p + 1 < N; see anchor_candidates).
    For each anchor, the block ids [tok[p], MASK x (B-1)] at positions p..p+B-1 attend (no
    mask) to the context rows 0..p-1 -- c = RMSNorm_hidden_norm(R[0..p-1] . fc^T), per layer
    K = RoPE(k_norm(c . k_proj^T)) at positions 0..p-1, V = c . v_proj^T (Gemma:
    v_norm(c . k_proj^T)) -- plus all B block rows bidirectionally: exactly deepspec_ref's
    block forward with a context of p rows. All B slots are computed, labelled or not.
  * Labels: slot k predicts position q = p + 1 + k; it is valid iff q < N, mask[q] and every
    slot < k is valid (contiguous valid prefix); label_k = tok[q].
  * Teacher-forced Markov head: prev_0 = tok[p], prev_k = tok[p + k] (= label_{k-1}) for k >= 1;
    z_k = U_k + bias(h_k, prev_k) (vanilla / gated / rnn exactly as deepspec_ref, the rnn state
    chained over all slots from s_0 = 0; for Gemma U is softcapped first). Confidence logit
    zc_k = proj([h_k ; W1[prev_k]]) (or proj(h_k) without Markov features).
  * Target distribution t_k = softmax(lm_head . G[p + k]) (the drafter's frozen lm_head, which
    equals the target's output embedding; no softcap: the target is a Llama); draft
    p_k = softmax(z_k).
  * Per valid slot, weight w_k = exp(-k / 4):
        CE_k  = -log p_k[label_k]
        L1_k  = sum_v |p_k,v - t_k,v|
        c*_k  = clamp(1 - L1_k / 2, 0, 1), DETACHED
        BCE_k = max(zc_k, 0) - zc_k c*_k + log(1 + exp(-|zc_k|))
        KL_k  = sum_v t_k,v (log t_k,v - log p_k,v)     (terms with t_k,v = 0 are 0)
  * Over all valid (anchor, slot) pairs: loss_ce = sum w CE / sum w, loss_l1 = sum w L1 / sum w,
    loss_conf = sum w BCE / sum w (0 without a confidence head), loss_kl = sum w KL / sum w, and
        loss = ce * loss_ce + l1 * loss_l1 + conf * loss_conf + kl * loss_kl
    (defaults 0.1, 0.9, 1.0, 0).
  * Trainable: every drafter tensor except embed_tokens.weight and lm_head.weight (Gemma's
    layers.{i}.layer_scalar included).

Entry points:
    anchor_candidates(n_prompt, N)                           -> [p, ...]
    trainable_names(cfg)                                     -> sorted tensor names
    target_rows(m, target_path, tokens, dtype)               -> (R, G) tensors
    losses(m, R, G, tokens, n_prompt, anchors, ce, l1, conf, kl) -> dict of 0-d tensors (+ "cstar")
    loss_and_grads(drafter_dir, target_path, tokens, n_prompt, anchors, ce, l1, conf, kl, dtype)
        -> ({"loss", "loss_ce", "loss_l1", "loss_conf", "loss_kl": float}, {name: numpy gradient})
"""

import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deepspec_ref as ds  # noqa: E402
import llama_ref  # noqa: E402

FROZEN = ("embed_tokens.weight", "lm_head.weight")
LOSS_KEYS = ("loss", "loss_ce", "loss_l1", "loss_conf", "loss_kl")


def anchor_candidates(n_prompt, N):
    """Every legal anchor p of a sequence of N tokens: mask[p] and mask[p+1] with p + 1 < N."""
    return [p for p in range(max(int(n_prompt), 0), int(N) - 1)]


def trainable_names(cfg):
    """Names of the trainable tensors of a drafter config (all but embed_tokens and lm_head)."""
    return sorted(n for n in ds.expected_tensors(cfg) if n not in FROZEN)


def slot_weight(k):
    return math.exp(-k / 4.0)


def target_rows(m, target_path, tokens, dtype=torch.float64):
    """(R (N, T*H), G (N, H)) of the frozen target over `tokens`, in `dtype`."""
    cfg = m.config
    t = llama_ref.load(target_path, dtype=dtype)
    ds.check_pairing(cfg, t.config.dim, t.config.vocab_size, t.config.n_layers)
    out = llama_ref.forward(t, tokens, taps=tuple(cfg.target_layer_ids))
    R = torch.cat([out.taps[i] for i in cfg.target_layer_ids], dim=1)
    return R.detach(), out.hidden.detach()


def _check_anchors(tokens, n_prompt, anchors):
    N = len(tokens)
    legal = set(anchor_candidates(n_prompt, N))
    if not anchors:
        raise ValueError("no anchors")
    for p in anchors:
        if int(p) not in legal:
            raise ValueError(f"anchor {p} is not legal (needs n_prompt {n_prompt} <= p < N - 1 = {N - 1})")


def valid_slots(N, n_prompt, p, B):
    """How many leading slots of the block at anchor p have a label (contiguous valid prefix)."""
    n = 0
    for k in range(B):
        q = p + 1 + k
        if q < N and q >= n_prompt:
            n += 1
        else:
            break
    return n


def conf_logit(m, h_k, prev):
    """zc_k = proj([h_k ; W1[prev]]) or proj(h_k): the confidence logit (a 0-d tensor)."""
    feat = h_k
    if m.config.conf_with_markov:
        feat = torch.cat((h_k, m.w("markov_head.markov_w1.weight")[prev]))
    return ds._linear(m, feat, "confidence_head.proj")[0]


def losses(m, R, G, tokens, n_prompt, anchors, ce=0.1, l1=0.9, conf=1.0, kl=0.0, cstar_fixed=None,
           target_softcap=0.0):
    """The five losses (0-d tensors, differentiable in m.weights) of one sequence, plus "cstar":
    {(anchor index, slot): c*} of every valid slot with a confidence head.

    c* is detached, so the gradient is that of the loss with c* held constant. cstar_fixed (a
    "cstar" dict of an earlier call) holds it constant for real, at those values: then finite
    differences of the loss approximate the same gradient autograd computes."""
    cfg = m.config
    tokens = [int(t) for t in tokens]
    N, B = len(tokens), cfg.block_size
    _check_anchors(tokens, n_prompt, anchors)
    fc_dtype = m.w("fc.weight").dtype
    R = R.to(fc_dtype)
    G = G.to(fc_dtype)
    # Context rows of every position at once (each row depends only on its own taps), sliced
    # to 0..p-1 per anchor below: the same K/V as projecting the p rows alone.
    c = ds.rms_norm(R @ m.w("fc.weight").T, m.w("hidden_norm.weight"), cfg.norm_eps)
    pos_all = torch.arange(N, dtype=torch.float64)
    kv = [ds._kv(m, i, c, pos_all) for i in range(cfg.n_layers)]
    lm_head = m.w("lm_head.weight")

    zero = torch.zeros((), dtype=fc_dtype)
    s_ce, s_l1, s_bce, s_kl, s_w = zero, zero, zero, zero, 0.0
    cstars = {}
    for ai, p in enumerate(anchors):
        p = int(p)
        ctx = ds.Context([k[:p] for k, _ in kv], [v[:p] for _, v in kv], pos_all[:p])
        h, U = ds.block_forward(m, ctx, tokens[p], s=p)
        n_valid = valid_slots(N, n_prompt, p, B)
        state = torch.zeros(cfg.markov_rank, dtype=h.dtype)
        # All B block rows went through the backbone (they attend to each other); the head
        # runs over the valid prefix only: later slots carry no loss, and the rnn state only
        # flows forward, so they cannot change it.
        for k in range(n_valid):
            prev = tokens[p] if k == 0 else tokens[p + k]  # teacher forcing: label_{k-1}
            bias, state = ds.markov_bias(m, h[k], prev, state)
            z = U[k] + bias
            logp = torch.log_softmax(z, dim=-1)
            pd = torch.exp(logp)
            tl = G[p + k] @ lm_head.T
            if target_softcap > 0:  # the target's own final logit softcap (Gemma)
                tl = target_softcap * torch.tanh(tl / target_softcap)
            logpt = torch.log_softmax(tl, dim=-1)
            pt = torch.exp(logpt)
            w = slot_weight(k)
            ce_k = -logp[tokens[p + 1 + k]]
            l1_k = torch.sum(torch.abs(pd - pt))
            s_ce = s_ce + w * ce_k
            s_l1 = s_l1 + w * l1_k
            s_kl = s_kl + w * torch.sum(torch.where(pt > 0, pt * (logpt - logp), zero))
            if cfg.conf:
                zc = conf_logit(m, h[k], prev)
                cstar = torch.clamp(1.0 - 0.5 * l1_k.detach(), 0.0, 1.0)
                cstars[(ai, k)] = float(cstar)
                if cstar_fixed is not None:
                    cstar = torch.tensor(cstar_fixed[(ai, k)], dtype=fc_dtype)
                bce = torch.clamp(zc, min=0.0) - zc * cstar + torch.log1p(torch.exp(-torch.abs(zc)))
                s_bce = s_bce + w * bce
            s_w += w
    loss_ce = s_ce / s_w
    loss_l1 = s_l1 / s_w
    loss_conf = s_bce / s_w
    loss_kl = s_kl / s_w
    loss = ce * loss_ce + l1 * loss_l1 + conf * loss_conf + kl * loss_kl
    return {"loss": loss, "loss_ce": loss_ce, "loss_l1": loss_l1, "loss_conf": loss_conf, "loss_kl": loss_kl,
            "cstar": cstars}


def trainable_model(m):
    """A copy of m whose trainable weights are fresh leaf tensors with requires_grad."""
    names = set(trainable_names(m.config))
    w = {n: (t.detach().clone().requires_grad_(True) if n in names else t.detach())
         for n, t in m.weights.items()}
    return ds.DeepSpecModel(m.config, w)


def loss_and_grads(drafter_dir, target_path, tokens, n_prompt, anchors, ce=0.1, l1=0.9, conf=1.0, kl=0.0,
                   dtype=torch.float64, target_softcap=0.0):
    """(loss values {loss, loss_ce, loss_l1, loss_conf, loss_kl}, {trainable name: gradient ndarray})."""
    m = trainable_model(ds.load(drafter_dir, dtype=dtype))
    R, G = target_rows(m, target_path, tokens, dtype=dtype)
    L = losses(m, R, G, tokens, n_prompt, anchors, ce=ce, l1=l1, conf=conf, kl=kl, target_softcap=target_softcap)
    names = trainable_names(m.config)
    params = [m.w(n) for n in names]
    grads = torch.autograd.grad(L["loss"], params, allow_unused=True)
    out = {}
    for n, p, g in zip(names, params, grads):
        out[n] = (torch.zeros_like(p) if g is None else g).detach().cpu().numpy()
    return {k: float(L[k].detach()) for k in LOSS_KEYS}, out
