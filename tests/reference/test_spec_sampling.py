#!/usr/bin/python3
"""Speculative sampling is lossless: an exact chi-square test of the engine's outcome distribution.

`ds_spec_sample MODEL --prompt-ids IDS --spec KIND [--drafter DIR] --temp T ... --seeds N --gen G`
runs the engine (ds_engine_add / ds_engine_step) from a fixed prompt with N fixed seeds and prints
"count t1 .. tG" per distinct outcome of the first G generated tokens (-1 where the sequence ended
at EOS before). The engine uses the last prompt token as the first round's anchor, so every one of
these tokens comes out of speculative verification (acceptance, residual resampling, bonus token).

Whatever the drafter proposes, a lossless engine samples exactly from the target's distribution:

    P(t1 .. tG) = prod_i p(t_i | prompt, t_1 .. t_{i-1})

where p is the *processed distribution* of the target's next-token logits, written here from its
definition (not from our C code): z = logits / T -> top-k (the k largest z, ties to the lower id)
-> softmax -> top-p (the smallest prefix in (prob desc, id asc) order whose cumulative mass reaches
top_p) and min-p (prob >= min_p * max prob), both on the post-top-k softmax, a token must pass both
-> renormalize. EOS (id 2) ends the sequence and is not included (engine.c `commit`): an EOS at
step i makes the outcome (t_1 .. t_{i-1}, -1, .., -1). The logits come from the independent
PyTorch reference (llama_ref.py, float64), batched over every context with positive probability.

The test: no observed outcome may have probability zero (an impossible outcome fails at once), and
Pearson's chi-square over cells (every outcome with expected count >= 5 on its own, the rest pooled
into one cell, merged into the smallest cell if the pool's expectation is < 5), df = cells - 1,
must have a p-value >= 1e-6 (upper regularized incomplete gamma, computed here). The same test runs
on the marginal of t1. Seeds are fixed, so a correct engine passes deterministically.

Configurations (N = 20000 seeds each):
    a  dspark, random 2-layer vanilla-head drafter (q far from p: the residual path runs), T = 1
    b  the same drafter, T = 0.7, top-k 20
    c  gated-head bigram drafter, T = 1, top-p 0.9
    d  ngram (deterministic proposals, one-hot q) on a repetitive prompt, T = 1
    e  config a through the batched path (--batch 8)
    f  no speculation, T = 1 (control)
    g  vanilla bigram drafter, 3 tokens (2 drafts in the first round: chained acceptance, residual
       at slot 1, bonus at slot 2), T = 1, top-k 8, min-p 0.05
    h  vanilla bigram drafter, T = 1 (about half the drafts accepted: the most sensitive to a wrong
       acceptance rule or residual)
    i  a random HF Llama target with vocabulary 32 (EOS a few percent likely at each step, and drafted
       by its bigram drafter), T = 1: the EOS semantics
    j  ngram on the repetitive prompt, 3 tokens (two deterministic drafts), T = 1, top-k 10
    t  a random Gemma 4 E-series target (make_hf_models.py gemma4e: per-layer embeddings, KV
       sharing, sliding + full layers, softcap; reference hf_ref.py) drafted by a fresh
       `dspark init-drafter` drafter (Gemma4DSparkModel), T = 1
    u  the same target, its bigram drafter (init-drafter's, with the bigram table written in),
       3 tokens, T = 1, top-k 8
    v  a random Qwen3-MoE target (make_hf_models.py qwen3_moe: 8 experts, top 2, layer 1 dense;
       reference hf_ref.py) drafted by its bigram drafter (init-drafter's, bigram table written in),
       3 tokens, T = 1, top-k 8: every verified row routes to its own experts
    w  the same target and drafter, T = 1, batch 8 (the eight sequences' rows share one expert
       pass: a row's routing and outputs must not depend on the others)
    x  a quantized GGUF target written by llama.cpp (gguf-fixtures llama-tiny Q4_K_M: Q4_K, Q5_K and
       Q6_K tensors on integer dot products; its exact distribution from dspark's own forward pass,
       which test_gguf_fixtures.py checks against llama.cpp) drafted by its bigram drafter, 3 tokens,
       T = 1, top-k 8
    y  the same, coupled rule, T = 1, batch 8
    l  a grammar (GBNF: words of 1-3 letters, each after a space, then "."), vanilla bigram drafter,
       3 tokens, T = 1: the expected distribution is the processed distribution of the masked logits
       (-inf where the text so far plus the token's bytes is no prefix of the language, written here
       as a Python regex; EOS allowed exactly when the text is a complete sentence). The drafter's
       slot k and the target's row k are masked with the state after drafts 0..k-1
    p  the same, coupled rule, batch 8
    z  the same grammar, ngram on the repetitive prompt (its proposals cut at the first disallowed
       token), 3 tokens, T = 1
Both acceptance rules (include/dspark.h ds_verify_rule) are tested: a-j use the residual rule
(min(1, p/q) acceptance, residual resampling, draws in order from one stream), as do t-x; k-q and y the coupled rule
(the token at position t is the target's own draw from p_t with noise keyed by (seed, t); a draft
is accepted iff the drafter, drawing with the same noise from q_t, proposed that token):
    k  coupled, dspark random drafter, T = 1
    m  coupled, vanilla bigram, 3 tokens, T = 1, top-k 8, min-p 0.05
    n  coupled, vanilla bigram, T = 1, batch 8
    o  coupled, the random HF target (EOS likely), its bigram drafter, T = 1
    q  coupled, no speculation, T = 1 (control)
    r  coupled, vanilla bigram, 3 tokens, T = 1, top-k 12, logit bias and presence / frequency penalties
    s  residual, the same
Under the coupled rule the outcome of a seed does not depend on the drafter at all, so k, n and q
(same prompt, parameters and seeds) must also give identical counts, outcome for outcome.
(The bigram drafters are described at DRAFTERS.) With --gen 2 the first round drafts one token
(the engine caps drafts at max_new - 1), so t2 is a bonus token or a plain step; only g and j
verify a second draft slot.

    test_spec_sampling.py [--only a,c] [--seeds N]     (default: every configuration, 20000 seeds)
"""

import json
import math
import os
import re
import shutil
import struct
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import llama_ref  # noqa: E402
import make_deepspec  # noqa: E402
import make_hf_llama  # noqa: E402
import make_hf_models  # noqa: E402
import hf_ref  # noqa: E402

EOS = 2
N_SEEDS = 20000
P_FAIL = 1e-6
# "Tom saw a": a spread first token (entropy 2.8 nats; "Once upon a time" puts 0.97 on ",", which
# leaves a chi-square almost nothing to test, and top-p 0.9 keeps a single token there).
STORY_PROMPT = [1, 274, 287, 394, 261]
# "She wanted to": for top-p 0.9, whose boundary on "Tom saw a" is within 2e-4 of a cumulative mass.
WANT_PROMPT = [1, 338, 391, 266, 267]
REPEAT_TEXT = "the cat and the cat and the cat and the"
# stories260K practically never ends a story (p(EOS) < 1e-4 after "The end."), so the EOS semantics
# are tested on a random Hugging Face Llama (make_hf_llama.py; eos_token_id 2) with a vocabulary of
# 32: EOS gets a few percent at each step.
HF_TARGET = dict(seed=11, dim=64, layers=3, heads=4, kv_heads=2, ffn=96, vocab=32)
HF_PROMPT = [1, 7, 19, 4, 25]
# A random Gemma 4 E-series target (6 layers: s s f s s f, layers 3-5 share KV; vocab 300).
G4E_TARGET = dict(seed=44, layers=6)
G4E_PROMPT = [1, 17, 42, 99, 5, 250, 31]
# A random Qwen3-MoE target (4 layers, layer 1 dense through mlp_only_layers; vocab 300).
MOE_TARGET = dict(seed=45, layers=4)
MOE_PROMPT = [1, 23, 77, 140, 9, 260, 48]
# A quantized GGUF target written by llama.cpp's llama-quantize (../shared/models/gguf-fixtures:
# llama-tiny Q4_K_M, a mix of Q4_K, Q5_K, Q6_K and Q3_K-free K-quant tensors; vocab 512). Its exact
# distribution comes from dspark's own forward pass (ds_ref_dump --last-of), which
# test_gguf_fixtures.py checks against llama.cpp: what is tested here is the speculative sampler on a
# quantized target, not the forward pass.
Q4K_TARGET = "llama-tiny/Q4_K_M.gguf"
Q4K_PROMPT = [1, 403, 407, 261, 378, 369]

# Margins under which float32 (C) and float64 (reference) may legitimately decide a filter boundary
# differently (the C logits match the reference within 1e-4): a context whose top-k / top-p / min-p
# boundary is that close is "fragile" and a zero-probability outcome under it is not blamed on the
# engine.
FRAGILE_LOGIT = 1e-3
FRAGILE_MASS = 1e-3

# name -> (make_deepspec options (embed_tokens / lm_head copied from the target), bigram?)
#   random: a random drafter; its q is far from p (about 3% of drafts accepted), so nearly every round
#           takes the residual path.
#   *_bigram: the Markov head holds the target's own bigram table (rank = vocab: markov_w1 = I,
#           markov_w2[v, prev] = target logits of [BOS, prev]) and the final norm is zero, so U = 0
#           and q_k = processed(bias(prev_k)): close to p but not equal (about half the drafts
#           accepted at T = 1 on "Tom saw a"), and the walk drafts plausible chains, so acceptance,
#           the residual and later slots all carry weight. The gated head keeps its random gate:
#           u = sigmoid(gate_proj([0; e_prev])) * e_prev scales each row of the table by a random
#           factor in (0, 1).
DRAFTERS = {
    "random": (dict(style="qwen3", layers=2, markov_head="vanilla", markov_rank=16, conf=True,
                    taps=[1, 3], seed=5), False),
    "gated_bigram": (dict(style="qwen3", layers=2, markov_head="gated", markov_rank=512, conf=True,
                          taps=[0, 2], seed=6), True),
    "vanilla_bigram": (dict(style="qwen3", layers=2, markov_head="vanilla", markov_rank=512, conf=True,
                            taps=[1, 3], seed=7), True),
    # for the random HF target below (vocab 32, 3 layers: taps <= 1)
    "hf_bigram": (dict(style="qwen3", layers=2, markov_head="vanilla", markov_rank=HF_TARGET["vocab"], conf=True,
                       taps=[0, 1], seed=8), True),
    # for the Gemma 4 E-series target: `dspark init-drafter` options (its default taps) instead
    "g4e_init": (["--layers", "2", "--block", "4", "--markov-rank", "16", "--seed", "9"], False),
    "g4e_bigram": (["--layers", "2", "--block", "4", "--markov-rank", "300", "--seed", "10"], True),
    # for the Qwen3-MoE target (the drafter stays dense)
    "moe_bigram": (["--layers", "2", "--block", "4", "--markov-rank", "300", "--seed", "13"], True),
    # for the quantized GGUF target
    "q4k_bigram": (["--layers", "2", "--block", "4", "--markov-rank", "512", "--seed", "14"], True),
}

# OpenAI's logit bias and penalties (r, s): the first token's favourite (370) banned, another one
# (268) favoured, and strong penalties on repeating a generated token, so p and q both change with
# the history, a draft slot's including the drafts before it.
PENALIZED = dict(bias={370: -100.0, 268: 1.5}, presence=1.0, frequency=1.5, top_k=12)  # (top-k: few contexts)

CONFIGS = [
    dict(key="a", name="dspark random, T=1", spec="dspark", drafter="random", temp=1.0),
    dict(key="b", name="dspark random, T=0.7 top-k 20", spec="dspark", drafter="random", temp=0.7, top_k=20),
    dict(key="c", name="dspark gated bigram, T=1 top-p 0.9", spec="dspark", drafter="gated_bigram", temp=1.0,
         top_p=0.9, prompt="want"),
    dict(key="d", name="ngram, repetitive prompt, T=1", spec="ngram", prompt="repeat", temp=1.0),
    dict(key="e", name="dspark random, T=1, batch 8", spec="dspark", drafter="random", temp=1.0, batch=8),
    dict(key="f", name="no speculation, T=1 (control)", spec="none", temp=1.0),
    dict(key="g", name="dspark vanilla bigram, 3 tokens, T=1 top-k 8 min-p 0.05", spec="dspark",
         drafter="vanilla_bigram", temp=1.0, top_k=8, min_p=0.05, gen=3),
    dict(key="h", name="dspark vanilla bigram, T=1", spec="dspark", drafter="vanilla_bigram", temp=1.0),
    dict(key="i", name="random HF target (EOS likely), dspark bigram, T=1", target="hf", prompt="hf",
         spec="dspark", drafter="hf_bigram", temp=1.0),
    dict(key="j", name="ngram, repetitive prompt, 3 tokens, T=1 top-k 10", spec="ngram", prompt="repeat",
         temp=1.0, top_k=10, gen=3),
    dict(key="t", name="Gemma 4 E-series target, fresh init-drafter, T=1", target="g4e", prompt="g4e",
         spec="dspark", drafter="g4e_init", temp=1.0, stops=(2, 3)),
    dict(key="u", name="Gemma 4 E-series target, bigram drafter, 3 tokens, T=1 top-k 8", target="g4e", prompt="g4e",
         spec="dspark", drafter="g4e_bigram", temp=1.0, top_k=8, gen=3, stops=(2, 3)),
    dict(key="v", name="Qwen3-MoE target, bigram drafter, 3 tokens, T=1 top-k 8", target="moe", prompt="moe",
         spec="dspark", drafter="moe_bigram", temp=1.0, top_k=8, gen=3, stops=(2, 3)),
    dict(key="w", name="Qwen3-MoE target, bigram drafter, T=1, batch 8", target="moe", prompt="moe",
         spec="dspark", drafter="moe_bigram", temp=1.0, batch=8, stops=(2, 3)),
    dict(key="x", name="quantized GGUF target (Q4_K_M), bigram drafter, 3 tokens, T=1 top-k 8", target="q4k",
         prompt="q4k", spec="dspark", drafter="q4k_bigram", temp=1.0, top_k=8, gen=3),
    dict(key="y", name="coupled, quantized GGUF target (Q4_K_M), bigram drafter, T=1, batch 8", target="q4k",
         prompt="q4k", spec="dspark", drafter="q4k_bigram", temp=1.0, batch=8, verify="coupled"),
    dict(key="k", name="coupled, dspark random, T=1", spec="dspark", drafter="random", temp=1.0, verify="coupled"),
    dict(key="m", name="coupled, dspark vanilla bigram, 3 tokens, T=1 top-k 8 min-p 0.05", spec="dspark",
         drafter="vanilla_bigram", temp=1.0, top_k=8, min_p=0.05, gen=3, verify="coupled"),
    dict(key="n", name="coupled, dspark vanilla bigram, T=1, batch 8", spec="dspark", drafter="vanilla_bigram",
         temp=1.0, batch=8, verify="coupled"),
    dict(key="o", name="coupled, random HF target (EOS likely), dspark bigram, T=1", target="hf", prompt="hf",
         spec="dspark", drafter="hf_bigram", temp=1.0, verify="coupled"),
    dict(key="q", name="coupled, no speculation, T=1 (control)", spec="none", temp=1.0, verify="coupled"),
    dict(key="r", name="coupled, vanilla bigram, 3 tokens, T=1, logit bias + penalties", spec="dspark",
         drafter="vanilla_bigram", temp=1.0, gen=3, verify="coupled", **PENALIZED),
    dict(key="s", name="residual, vanilla bigram, 3 tokens, T=1, logit bias + penalties", spec="dspark",
         drafter="vanilla_bigram", temp=1.0, gen=3, **PENALIZED),
]
# Token trees (--tree N: side branches at the least sure drafted slots, each a deterministic first
# token, the drafter's best other one, then --tree-depth slots of its walk): the residual rule tries
# a row's children in order (the drafted chain's with min(1, p/q), the branches' first tokens as
# deterministic candidates on what is left), the coupled rule descends to the child that drew the
# target's own token.
CONFIGS += [
    dict(key="ta", name="tree 3 x 1, residual, vanilla bigram, 4 tokens, T=1 top-k 8", spec="dspark",
         drafter="vanilla_bigram", temp=1.0, top_k=8, gen=4, tree=3, tree_depth=1),
    dict(key="tb", name="tree 2 x 1, residual, dspark random (branches tried after most rejections), 3 tokens, T=1 "
         "top-k 10", spec="dspark", drafter="random", temp=1.0, top_k=10, gen=3, tree=2, tree_depth=1),
    dict(key="tc", name="tree 2, coupled, vanilla bigram, T=1, batch 8", spec="dspark", drafter="vanilla_bigram",
         temp=1.0, batch=8, tree=2, verify="coupled"),
    dict(key="td", name="tree 2 x 2, residual, vanilla bigram, 3 tokens, T=1, batch 8, logit bias + penalties",
         spec="dspark", drafter="vanilla_bigram", temp=1.0, gen=3, batch=8, tree=2, tree_depth=2, **PENALIZED),
]
# The grammar of configurations l, p, z and its language, written independently as regexes.
GRAMMAR = 'root ::= ( " " [a-z]{1,3} )+ "."'
GRAMMAR_PREFIX = re.compile(r"(?: [a-z]{1,3})*(?: [a-z]{0,3})?|(?: [a-z]{1,3})+\.")
GRAMMAR_FULL = re.compile(r"(?: [a-z]{1,3})+\.")
CONFIGS += [
    dict(key="l", name="grammar, dspark vanilla bigram, 3 tokens, T=1", spec="dspark", drafter="vanilla_bigram",
         temp=1.0, gen=3, grammar=GRAMMAR),
    dict(key="p", name="coupled, grammar, dspark vanilla bigram, 3 tokens, T=1, batch 8", spec="dspark",
         drafter="vanilla_bigram", temp=1.0, gen=3, grammar=GRAMMAR, verify="coupled", batch=8),
    dict(key="z", name="grammar, ngram, repetitive prompt, 3 tokens, T=1", spec="ngram", prompt="repeat",
         temp=1.0, gen=3, grammar=GRAMMAR),
]


def grammar_allowed(token_bytes, ctx, V, stops):
    """(V,) bool: the tokens GRAMMAR allows after the generated tokens ctx (from the regexes)."""
    text = b"".join(token_bytes[t] for t in ctx)
    allow = np.zeros(V, dtype=bool)
    for t in range(V):
        b = token_bytes[t] if t < len(token_bytes) else b""
        if t in stops:
            allow[t] = GRAMMAR_FULL.fullmatch(text.decode("latin-1")) is not None
        elif b:
            allow[t] = GRAMMAR_PREFIX.fullmatch((text + b).decode("latin-1")) is not None
    if not allow.any():
        for t in stops:
            allow[t] = True
    return allow


# Coupled configurations whose outcomes must be identical, seed for seed (so count for count).
COUPLED_SAME = [("k", "q"), ("n", "q"), ("tc", "q")]


# ---------------------------------------------------------------------------------------------
# Statistics (no scipy)

def gamma_q(a, x):
    """Upper regularized incomplete gamma Q(a, x) = Gamma(a, x) / Gamma(a), for a > 0, x >= 0.

    Series for P when x < a + 1, Lentz's continued fraction for Q otherwise (Numerical Recipes'
    gser / gcf), so tiny tail probabilities keep their relative precision."""
    if x <= 0:
        return 1.0
    lg = a * math.log(x) - x - math.lgamma(a)
    if x < a + 1:
        term = s = 1.0 / a
        ap = a
        for _ in range(100000):
            ap += 1
            term *= x / ap
            s += term
            if abs(term) < abs(s) * 1e-16:
                break
        return max(0.0, 1.0 - s * math.exp(lg))
    tiny = 1e-300
    b = x + 1 - a
    c = 1 / tiny
    d = 1 / b
    h = d
    for i in range(1, 100000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        delta = d * c
        h *= delta
        if abs(delta - 1) < 1e-16:
            break
    return math.exp(lg) * h


def chi2_sf(stat, df):
    return 1.0 if df <= 0 else gamma_q(df / 2.0, stat / 2.0)


def selfcheck_stats():
    """chi2_sf against closed forms (df 2: exp(-x/2); df 1: erfc(sqrt(x/2))) and a table value."""
    for x in (0.1, 1.0, 5.0, 30.0, 80.0):
        for got, want in ((chi2_sf(x, 2), math.exp(-x / 2)), (chi2_sf(x, 1), math.erfc(math.sqrt(x / 2)))):
            if abs(got - want) > 1e-12 + 1e-9 * want:
                common.fail(f"test bug: chi2_sf({x}) = {got}, expected {want}")
    if abs(chi2_sf(18.307, 10) - 0.05) > 1e-4:  # the classic table: chi2(10) 95% point 18.307
        common.fail(f"test bug: chi2_sf(18.307, 10) = {chi2_sf(18.307, 10)}, expected 0.05")


def chi_square(counts, probs, n):
    """Pearson's chi-square with pooling. counts/probs: dicts over outcomes (probs sums to 1).
    Returns (statistic, df, p-value, number of cells)."""
    big = [o for o in probs if probs[o] * n >= 5]
    small = [o for o in probs if probs[o] * n < 5]
    cells = [[counts.get(o, 0), probs[o] * n] for o in big]
    pool_obs = sum(counts.get(o, 0) for o in small) + sum(c for o, c in counts.items() if o not in probs)
    pool_exp = sum(probs[o] for o in small) * n
    if pool_exp >= 5 or not cells:
        cells.append([pool_obs, pool_exp])
    elif pool_obs or pool_exp > 0:
        j = min(range(len(cells)), key=lambda i: cells[i][1])
        cells[j][0] += pool_obs
        cells[j][1] += pool_exp
    stat = sum((o - e) ** 2 / e for o, e in cells if e > 0)
    df = len(cells) - 1
    return stat, df, chi2_sf(stat, df), len(cells)


# ---------------------------------------------------------------------------------------------
# The processed distribution, written from its definition

def processed(logits, temp, top_k=0, top_p=1.0, min_p=0.0, presence=0.0, frequency=0.0, bias=None, hist=()):
    """Processed distribution of one row of float64 logits after the generated tokens `hist`.
    Returns (probs (V,), fragile reason or None). Parameters are rounded to float32 first, as the
    engine receives them. First OpenAI's logit bias and penalties: z_i += bias_i - frequency *
    count_i - presence * [count_i > 0], counting the generated tokens so far."""
    temp, top_p, min_p, presence, frequency = (float(np.float32(v)) for v in (temp, top_p, min_p, presence, frequency))
    logits = np.array(logits, dtype=np.float64)
    V = logits.shape[0]
    for t, b in (bias or {}).items():
        logits[t] += float(np.float32(b))
    for t in set(hist):
        if t >= 0:
            logits[t] -= frequency * hist.count(t) + presence
    ids = np.arange(V)
    z = logits / temp
    order = np.lexsort((ids, -z))  # z descending, then id ascending
    fragile = None
    if 0 < top_k < V:
        if z[order[top_k - 1]] - z[order[top_k]] < FRAGILE_LOGIT / temp:
            fragile = f"top-k boundary gap {z[order[top_k - 1]] - z[order[top_k]]:.2e}"
        kept = order[:top_k]
    else:
        kept = order
    e = np.exp(z[kept] - z[kept].max())
    sm = np.zeros(V)
    sm[kept] = e / e.sum()
    keep = np.zeros(V, dtype=bool)
    keep[kept] = True
    if top_p < 1.0:
        o = kept[np.lexsort((kept, -sm[kept]))]  # prob descending, then id ascending
        cum = np.cumsum(sm[o])
        reach = np.nonzero(cum >= top_p)[0]
        cut = int(reach[0]) + 1 if len(reach) else len(o)
        near = [abs(cum[j] - top_p) for j in (cut - 2, cut - 1) if 0 <= j < len(cum)]
        if near and min(near) < FRAGILE_MASS:
            fragile = f"top-p cumulative mass within {min(near):.2e} of {top_p}"
        nucleus = np.zeros(V, dtype=bool)
        nucleus[o[:cut]] = True
        keep &= nucleus
    if min_p > 0:
        thr = min_p * sm.max()
        if np.any(np.abs(sm[kept] - thr) < FRAGILE_MASS * sm.max()):
            fragile = "min-p threshold within reach of a probability"
        keep &= sm >= thr
    p = np.where(keep, sm, 0.0)
    return p / p.sum(), fragile


# ---------------------------------------------------------------------------------------------
# Batched reference forward (the reference's own building blocks, rows of equal length)

def batched_last_logits(model, seqs):
    """Logits of the last position of every sequence in seqs (B, n) (a LongTensor): the reference
    Llama forward of llama_ref.py with a batch dimension; for a Hugging Face model of hf_ref.py
    (Gemma 4 E-series), its forward per sequence."""
    if isinstance(model, EngineModel):
        return torch.tensor(model.last_logits([[int(t) for t in row] for row in seqs]))
    if isinstance(model, hf_ref.HFModel):
        return torch.stack([hf_ref.forward(model, [int(t) for t in row]).logits[-1] for row in seqs])
    cfg = model.config
    B, n = seqs.shape
    hd = cfg.head_dim
    x = model.w("token_embd.weight")[seqs]  # (B, n, dim)
    cos, sin = llama_ref.rope_tables(n, hd, cfg.rope_theta, x.dtype)
    cos_b, sin_b = cos.repeat(B, 1), sin.repeat(B, 1)
    group = cfg.n_heads // cfg.n_kv_heads
    kv_of_head = torch.arange(cfg.n_heads) // group
    mask = torch.ones(n, n, dtype=torch.bool).triu(1)
    for layer in range(cfg.n_layers):
        p = f"blk.{layer}."
        xn = llama_ref.rms_norm(x, model.w(p + "attn_norm.weight"), cfg.norm_eps).reshape(B * n, -1)
        q = llama_ref.apply_rope((xn @ model.w(p + "attn_q.weight").T).reshape(B * n, cfg.n_heads, hd),
                                 cos_b, sin_b, cfg.rope_layout).reshape(B, n, cfg.n_heads, hd)
        k = llama_ref.apply_rope((xn @ model.w(p + "attn_k.weight").T).reshape(B * n, cfg.n_kv_heads, hd),
                                 cos_b, sin_b, cfg.rope_layout).reshape(B, n, cfg.n_kv_heads, hd)
        v = (xn @ model.w(p + "attn_v.weight").T).reshape(B, n, cfg.n_kv_heads, hd)
        k, v = k[:, :, kv_of_head], v[:, :, kv_of_head]
        s = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(hd)
        s = s.masked_fill(mask[None, None], float("-inf"))
        att = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, dim=-1), v).reshape(B * n, cfg.n_heads * hd)
        h = x + (att @ model.w(p + "attn_output.weight").T).reshape(B, n, -1)
        hn = llama_ref.rms_norm(h, model.w(p + "ffn_norm.weight"), cfg.norm_eps)
        x = h + llama_ref.feed_forward(model, layer, hn)
    hidden = llama_ref.rms_norm(x[:, -1], model.w("output_norm.weight"), cfg.norm_eps)
    return hidden @ model.weights.get("output.weight", model.w("token_embd.weight")).T


class EngineModel:
    """A target whose logits come from dspark's own forward pass (ds_ref_dump --last-of): a quantized
    GGUF file, which no Python reference here reads."""

    def __init__(self, path):
        self.path = path
        out = common.run([common.tool("ds_ref_dump"), path, "--tokenize", "x"])  # loads: fails early
        del out
        self.vocab = self.last_logits([[1]]).shape[1]

    def last_logits(self, seqs):
        tag = os.path.join(common.tmp_dir(), f"engine_model_{os.getpid()}")
        with open(tag + ".txt", "w") as f:
            for s in seqs:
                f.write(common.ids_arg(s) + "\n")
        common.run([common.tool("ds_ref_dump"), self.path, "--last-of", tag + ".txt", "--out", tag + ".bin"])
        with open(tag + ".bin", "rb") as f:
            buf = f.read()
        n, vocab = struct.unpack("<2i", buf[:8])
        if n != len(seqs) or len(buf) != 8 + 4 * n * vocab:
            common.fail(f"ds_ref_dump --last-of wrote {n} rows of {vocab} for {len(seqs)} sequences")
        os.remove(tag + ".txt")
        os.remove(tag + ".bin")
        return np.frombuffer(buf, dtype="<f4", offset=8).reshape(n, vocab).astype(np.float64)


def selfcheck_batched(model, prompt):
    V = model.config.vocab_size
    seqs = [prompt + [t % V] for t in (0, 5, 311, 7)]
    got = batched_last_logits(model, torch.tensor(seqs))
    for i, s in enumerate(seqs):
        want = llama_ref.forward(model, s).logits[-1]
        d = float((got[i] - want).abs().max())
        if d > 1e-9:
            common.fail(f"test bug: batched reference forward differs from llama_ref.forward by {d:.2e}")


def overwrite_f32(directory, values):
    """Overwrite F32 tensors of a single-file safetensors drafter in place ({name: array})."""
    path = os.path.join(directory, "model.safetensors")
    with open(path, "r+b") as f:
        (hlen,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(hlen))
        for name, arr in values.items():
            meta = header[name]
            arr = np.ascontiguousarray(arr, dtype="<f4")
            if meta["dtype"] != "F32" or list(meta["shape"]) != list(arr.shape):
                common.fail(f"test bug: {path}: {name} is {meta['dtype']} {meta['shape']}, writing {arr.shape}")
            f.seek(8 + hlen + meta["data_offsets"][0])
            f.write(arr.tobytes())


def drafter_hidden(directory):
    with open(os.path.join(directory, "config.json"), encoding="utf-8") as f:
        return int(json.load(f)["hidden_size"])


def make_drafter(model, model_path, name, out=None):
    """Write drafter `name` of DRAFTERS for the target (model = its llama_ref model) to `out`
    (default DSPARK_TMP/spec_sampling_<name>); returns the directory."""
    opts, bigram = DRAFTERS[name]
    out = out or os.path.join(common.tmp_dir(), f"spec_sampling_{name}")
    if isinstance(opts, list):  # `dspark init-drafter` options
        shutil.rmtree(out, ignore_errors=True)
        common.run([common.tool("dspark"), "init-drafter", "-m", model_path, "-o", out, *opts])
    else:
        make_deepspec.make_deepspec(out, embed_from=model_path, **opts)
    if bigram:
        hf = isinstance(model, (hf_ref.HFModel, EngineModel))  # init-drafter options
        if isinstance(model, EngineModel):
            V, H = model.vocab, None
        else:
            V = model.c["vocab_size"] if hf else model.config.vocab_size
            H = model.c["hidden_size"] if hf else model.config.dim
        if hf and opts[opts.index("--markov-rank") + 1] != str(V):
            common.fail(f"test bug: drafter {name}: markov rank != vocabulary {V}")
        if not hf and opts["markov_rank"] != V:
            common.fail(f"test bug: drafter {name}: markov_rank {opts['markov_rank']} != vocabulary {V}")
        table = batched_last_logits(model, torch.tensor([[1, v] for v in range(V)])).numpy()  # [prev, v]
        if H is None:  # the drafter's own hidden size (init-drafter takes the target's)
            H = drafter_hidden(out)
        overwrite_f32(out, {"markov_head.markov_w1.weight": np.eye(V),
                            "markov_head.markov_w2.weight": table.T,
                            "norm.weight": np.zeros(H)})
    return out


class Reference:
    """Last-position logits of prompt + ctx, cached across configurations."""

    def __init__(self, model):
        self.model = model
        self.cache = {}

    def logits(self, prompt, ctxs):
        todo = [c for c in ctxs if (tuple(prompt), c) not in self.cache]
        if isinstance(self.model, EngineModel):
            rows = self.model.last_logits([list(prompt) + list(c) for c in todo]) if todo else []
            for c, row in zip(todo, rows):
                self.cache[(tuple(prompt), c)] = row
            return [self.cache[(tuple(prompt), c)] for c in ctxs]
        for i in range(0, len(todo), 1024):
            chunk = todo[i:i + 1024]
            out = batched_last_logits(self.model, torch.tensor([list(prompt) + list(c) for c in chunk]))
            for c, row in zip(chunk, out.numpy()):
                self.cache[(tuple(prompt), c)] = row
        return [self.cache[(tuple(prompt), c)] for c in ctxs]


def exact_distribution(ref, prompt, gen, sp, stops=(EOS,), allowed=None):
    """{outcome tuple (length gen, -1 after EOS): probability} and {context: fragile reason}.
    `stops`: the ids that end a sequence (EOS; the Gemma 4 E-series target's generation_config.json
    adds id 3)."""
    probs, fragile = {}, {}
    level = {(): 1.0}  # contexts (generated tokens so far) with their probability
    for depth in range(gen):
        ctxs = list(level)
        nxt = {}
        for ctx, row in zip(ctxs, ref.logits(prompt, ctxs)):
            if allowed is not None:  # the grammar's mask: -inf before everything else
                row = np.where(allowed(ctx), np.asarray(row, dtype=np.float64), -np.inf)
            p, why = processed(row, **sp, hist=ctx)
            if why:
                fragile[ctx] = why
            for t in np.nonzero(p > 0)[0]:
                t = int(t)
                pr = level[ctx] * p[t]
                if t in stops:
                    probs[ctx + (-1,) * (gen - depth)] = probs.get(ctx + (-1,) * (gen - depth), 0.0) + pr
                elif depth + 1 == gen:
                    probs[ctx + (t,)] = pr
                else:
                    nxt[ctx + (t,)] = pr
        level = nxt
    return probs, fragile


# ---------------------------------------------------------------------------------------------
# Running the engine

def run_engine(model_path, prompt, cfg, drafter_dir, n_seeds):
    args = [common.tool("ds_spec_sample"), model_path, "--prompt-ids", common.ids_arg(prompt),
            "--spec", cfg["spec"], "--temp", repr(cfg["temp"]), "--seeds", str(n_seeds),
            "--gen", str(cfg.get("gen", 2)), "--verify", cfg.get("verify", "residual")]
    if drafter_dir:
        args += ["--drafter", drafter_dir]
    for opt, key in (("--top-k", "top_k"), ("--top-p", "top_p"), ("--min-p", "min_p"),
                     ("--batch", "batch"), ("--draft-max", "draft_max"), ("--seed0", "seed0"),
                     ("--presence", "presence"), ("--frequency", "frequency"), ("--tree", "tree"),
                     ("--tree-depth", "tree_depth")):
        if key in cfg:
            args += [opt, str(cfg[key])]
    if cfg.get("bias"):
        args += ["--bias", ",".join("%d:%r" % kv for kv in cfg["bias"].items())]
    if cfg.get("grammar"):
        args += ["--grammar", cfg["grammar"]]
    counts = {}
    for line in common.run(args, timeout=900).splitlines():
        f = line.split()
        if not f:
            continue
        if len(f) != 1 + cfg.get("gen", 2):
            common.fail(f"ds_spec_sample printed an unexpected line {line!r}")
        counts[tuple(int(x) for x in f[1:])] = int(f[0])
    if sum(counts.values()) != n_seeds:
        common.fail(f"ds_spec_sample counted {sum(counts.values())} outcomes for {n_seeds} seeds")
    return counts


def marginal(d, n=1):
    out = {}
    for o, v in d.items():
        out[o[:n]] = out.get(o[:n], 0) + v
    return out


def check_config(chk, ref, model_path, cfg, prompt, drafter_dir, n_seeds):
    gen = cfg.get("gen", 2)
    sp = dict(temp=cfg["temp"], top_k=cfg.get("top_k", 0), top_p=cfg.get("top_p", 1.0), min_p=cfg.get("min_p", 0.0),
              presence=cfg.get("presence", 0.0), frequency=cfg.get("frequency", 0.0), bias=cfg.get("bias"))
    label = f"({cfg['key']}) {cfg['name']}"
    t0 = time.time()
    counts = run_engine(model_path, prompt, cfg, drafter_dir, n_seeds)
    t_engine = time.time() - t0
    allowed = None
    if cfg.get("grammar"):
        import spm_tokenizer
        tok = spm_tokenizer.SPMTokenizer.from_gguf(model_path)
        tb = [tok.token_bytes(t) for t in range(len(tok.pieces))]
        V = len(tb)
        allowed = lambda ctx: grammar_allowed(tb, ctx, V, cfg.get("stops", (EOS,)))  # noqa: E731
    probs, fragile = exact_distribution(ref, prompt, gen, sp, cfg.get("stops", (EOS,)), allowed)
    if () in fragile:
        common.fail(f"test bug: {label}: the first token's distribution is fragile ({fragile[()]}); "
                    f"pick other sampling parameters")
    total = sum(probs.values())
    if abs(total - 1) > 1e-9:
        common.fail(f"test bug: {label}: the exact distribution sums to {total}")

    # Impossible outcomes: probability exactly zero under the exact distribution.
    impossible = [(o, c) for o, c in counts.items() if o not in probs]
    blamed = [(o, c) for o, c in impossible
              if not any(o[:i] in fragile for i in range(gen))]
    for o, c in sorted(impossible, key=lambda oc: -oc[1])[:10]:
        why = next((fragile[o[:i]] for i in range(gen) if o[:i] in fragile), None)
        print(f"   {label}: outcome {o} seen {c} times has probability 0"
              + (f" (context fragile: {why}; not blamed)" if why else ""), file=sys.stderr)
    chk.equal(f"{label}: outcomes with zero probability under the target (distinct outcomes, seeds)",
              (len(blamed), sum(c for _, c in blamed)), (0, 0))

    stat, df, pval, ncells = chi_square(counts, probs, n_seeds)
    stat1, df1, pval1, _ = chi_square(marginal(counts), marginal(probs), n_seeds)
    top = max(probs, key=probs.get)
    print(f"   {label}: {n_seeds} seeds in {t_engine:.1f} s; {len(counts)} distinct outcomes of "
          f"{len(probs)} possible; top {top} p={probs[top]:.4f} seen {counts.get(top, 0) / n_seeds:.4f}")
    print(f"   {label}: joint chi2 = {stat:.2f}, df = {df}, p = {pval:.3g};  "
          f"t1 marginal chi2 = {stat1:.2f}, df = {df1}, p = {pval1:.3g}"
          + (f";  {len(fragile)} fragile contexts" if fragile else ""), flush=True)
    eos = [sum(v for o, v in d.items() if o[i] == -1 and (i == 0 or o[i - 1] != -1)) for d in (probs, counts)
           for i in range(gen)]
    if sum(eos[:gen]) >= 1e-3:
        print(f"   {label}: EOS at step 1..{gen}: probability {[round(x, 4) for x in eos[:gen]]}, "
              f"seen {[round(x / n_seeds, 4) for x in eos[gen:]]}")
    chk.equal(f"{label}: joint chi-square p-value >= {P_FAIL} (chi2 {stat:.2f}, df {df}, p {pval:.3g})",
              pval >= P_FAIL, True)
    chk.equal(f"{label}: t1 chi-square p-value >= {P_FAIL} (chi2 {stat1:.2f}, df {df1}, p {pval1:.3g})",
              pval1 >= P_FAIL, True)
    return counts


def parse_argv(argv):
    only, n_seeds = None, N_SEEDS
    i = 0
    while i < len(argv):
        if argv[i] == "--only" and i + 1 < len(argv):
            only = set(argv[i + 1].split(","))
        elif argv[i] == "--seeds" and i + 1 < len(argv):
            n_seeds = int(argv[i + 1])
        else:
            common.fail(f"usage: test_spec_sampling.py [--only a,b,..] [--seeds N] (got {argv[i]!r})")
        i += 2
    return only, n_seeds


def main():
    only, n_seeds = parse_argv(sys.argv[1:])
    t_start = time.time()
    selfcheck_stats()
    stories = common.stories_model()
    targets = {"stories": (stories, llama_ref.load_gguf(stories))}
    hf_dir = make_hf_llama.make_hf_llama(os.path.join(common.tmp_dir(), "spec_sampling_hf_target"), **HF_TARGET)
    targets["hf"] = (hf_dir, llama_ref.load_hf(hf_dir))
    if not only or only & {"t", "u"}:
        g4e_dir = make_hf_models.make_hf_model(os.path.join(common.tmp_dir(), "spec_sampling_g4e_target"), "gemma4e",
                                               **G4E_TARGET)
        targets["g4e"] = (g4e_dir, hf_ref.load(g4e_dir))
    if not only or only & {"v", "w"}:
        moe_dir = make_hf_models.make_hf_model(os.path.join(common.tmp_dir(), "spec_sampling_moe_target"), "qwen3_moe",
                                               **MOE_TARGET)
        targets["moe"] = (moe_dir, hf_ref.load(moe_dir))
    if not only or only & {"x", "y"}:
        q4k = os.path.join(common.shared_dir(), "models", "gguf-fixtures", Q4K_TARGET)
        targets["q4k"] = (q4k, EngineModel(q4k))
    selfcheck_batched(targets["stories"][1], STORY_PROMPT)
    selfcheck_batched(targets["hf"][1], HF_PROMPT)
    refs = {name: Reference(model) for name, (_, model) in targets.items()}
    prompts = {"story": STORY_PROMPT, "want": WANT_PROMPT, "repeat": common.tokenize_c(stories, REPEAT_TEXT),
               "hf": HF_PROMPT, "g4e": G4E_PROMPT, "moe": MOE_PROMPT, "q4k": Q4K_PROMPT}
    drafters = {}
    chk = common.Checker("spec_sampling")
    results = {}
    for cfg in CONFIGS:
        if only and cfg["key"] not in only:
            continue
        path, model = targets[cfg.get("target", "stories")]
        d = cfg.get("drafter")
        if d and d not in drafters:
            drafters[d] = make_drafter(model, path, d)
        results[cfg["key"]] = check_config(chk, refs[cfg.get("target", "stories")], path, cfg,
                                           prompts[cfg.get("prompt", "story")], drafters.get(d), n_seeds)
    if "a" in results and "e" in results:  # informational: per-sequence random streams
        diff = sum(abs(results["a"].get(o, 0) - results["e"].get(o, 0)) for o in set(results["a"]) | set(results["e"]))
        print(f"   batch 8 vs batch 1 (same seeds): {diff // 2} of {n_seeds} outcomes differ")
    for x, y in COUPLED_SAME:
        if x in results and y in results:
            chk.equal(f"coupled rule: ({x}) and ({y}) give the same outcome counts (the drafter changes nothing)",
                      results[x], results[y])
    print(f"   total {time.time() - t_start:.1f} s")
    chk.finish()


if __name__ == "__main__":
    main()
