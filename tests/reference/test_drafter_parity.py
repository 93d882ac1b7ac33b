#!/usr/bin/python3
"""Our C DeepSpec drafter equals the independent reference (deepspec_ref.py) on random tiny drafters
paired with the stories260K target (hidden 64, vocab 512, 5 layers; embed_tokens / lm_head copied
from it), and rejects broken drafters cleanly.

Matrix: Qwen3 style with no Markov head (DFlash, with and without a confidence head), vanilla
(confidence with Markov input), gated, rnn (confidence without Markov input), attention_bias, bf16
weights, 3 shards, MHA geometry, block 4; Gemma 4 style with vanilla and rnn heads, layer_scalar
0.75, softcap 30 and 5, bf16 + shards.

For each drafter: random float32 tap rows, several chunks of context and one greedy draft per
chunk through `ds_draft_dump` (contract below); every slot's Markov-corrected logits must match
within 1e-4, confidences within 1e-5 (NaN exactly where there is no confidence head), tokens
exactly. The reference walk follows the C tokens (teacher forcing), so a near-tie (top-2 gap under
the logits tolerance) that the two resolve differently is reported, not failed, and does not
cascade into later slots.

    ds_draft_dump TARGET DRAFTER_DIR --taps-in FILE --chunks 5,3 --anchors 17,42 --out FILE
FILE (--taps-in): raw little-endian float32 rows of T*H floats, sum(chunks) rows. For each i:
append the next chunks[i] rows to the draft context (positions continue from the context length,
starting at 0), then draft one block with anchor anchors[i] at position s = context length.
Output: int32 n_drafts, block, vocab; per draft int32 tokens[block], float32 logits[block][vocab],
float32 conf[block].

Broken drafters (exit status 1, one stderr line containing a telling word, case-insensitive; a
tensor problem must name the tensor): markov_head_type "lstm", a missing / extra / wrongly shaped
tensor, hidden_size or vocab_size different from the target's, num_target_layers != 5,
target_layer_ids containing 4 (the target's last layer) or 7, mask_token_id 512,
enable_moe_block true, Gemma attention_k_eq_v false, hidden_size_per_layer_input != 0, invalid JSON.
"""

import os
import struct
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import deepspec_ref as ds  # noqa: E402
import make_deepspec  # noqa: E402

TOL_LOGITS = 1e-4
TOL_CONF = 1e-5

BASE = dict(layers=2, heads=4, kv_heads=2, ffn=96, block=7, markov_rank=16, mask_token=3, taps=(1, 3))
CASES = [  # (name, make_deepspec overrides, chunks)
    ("qwen3_dflash", dict(markov_head="none", conf=False, seed=101), (5, 3, 1, 7)),
    ("qwen3_dflash_conf", dict(markov_head="none", conf=True, taps=(-1, 0, 3), seed=102), (4, 2)),
    ("qwen3_vanilla", dict(markov_head="vanilla", conf=True, conf_with_markov=True, seed=103), (5, 3, 1, 7)),
    ("qwen3_gated", dict(markov_head="gated", conf=True, conf_with_markov=True, taps=(0, 2), seed=104), (6, 1, 2)),
    ("qwen3_rnn", dict(markov_head="rnn", conf=True, conf_with_markov=False, layers=3, seed=105), (5, 3, 1)),
    ("qwen3_attention_bias", dict(markov_head="vanilla", attention_bias=True, seed=106), (3, 4, 1)),
    ("qwen3_bf16", dict(markov_head="vanilla", dtype="bf16", seed=107), (5, 3, 1, 7)),
    ("qwen3_sharded", dict(markov_head="gated", shards=3, taps=(-1, 1, 2, 3), seed=108), (2, 9)),
    ("qwen3_mha_block4", dict(markov_head="rnn", heads=8, kv_heads=8, head_dim=8, block=4, seed=109), (40, 1, 2)),
    ("gemma4_vanilla", dict(style="gemma4", markov_head="vanilla", conf=True, conf_with_markov=True,
                            layer_scalar=0.75, softcap=30.0, seed=110), (5, 3, 1, 7)),
    ("gemma4_rnn", dict(style="gemma4", markov_head="rnn", conf=True, conf_with_markov=False, kv_heads=1,
                        layer_scalar=0.75, softcap=5.0, dtype="bf16", shards=2, seed=111), (6, 2, 11)),
]


def run_draft_dump(target, drafter, rows, chunks, anchors, tag):
    tmp = common.tmp_dir()
    taps_in = os.path.join(tmp, f"draft_{tag}_{os.getpid()}.taps")
    out = os.path.join(tmp, f"draft_{tag}_{os.getpid()}.bin")
    np.ascontiguousarray(rows, dtype="<f4").tofile(taps_in)
    try:
        common.run([common.tool("ds_draft_dump"), target, drafter, "--taps-in", taps_in,
                    "--chunks", common.ids_arg(chunks), "--anchors", common.ids_arg(anchors), "--out", out])
        return read_draft_dump(out)
    finally:
        for p in (taps_in, out):
            if os.path.exists(p):
                os.remove(p)


def read_draft_dump(path):
    with open(path, "rb") as f:
        buf = f.read()
    if len(buf) < 12:
        common.fail(f"{path}: {len(buf)} bytes, shorter than the 12-byte header")
    n, block, vocab = struct.unpack("<3i", buf[:12])
    per = 4 * (block + block * vocab + block)
    if n < 0 or block < 0 or vocab < 0 or len(buf) != 12 + n * per:
        common.fail(f"{path}: {len(buf)} bytes, header (n={n}, block={block}, vocab={vocab}) implies {12 + n * per}")
    drafts, off = [], 12
    for _ in range(n):
        tokens = np.frombuffer(buf, dtype="<i4", count=block, offset=off)
        off += 4 * block
        logits = np.frombuffer(buf, dtype="<f4", count=block * vocab, offset=off).reshape(block, vocab)
        off += 4 * block * vocab
        conf = np.frombuffer(buf, dtype="<f4", count=block, offset=off)
        off += 4 * block
        drafts.append({"tokens": [int(t) for t in tokens], "logits": logits, "conf": conf})
    return {"n": n, "block": block, "vocab": vocab, "drafts": drafts}


def compare_case(chk, target, name, over, chunks):
    d = make_deepspec.make_deepspec(os.path.join(common.tmp_dir(), f"drafter_{name}"),
                                    embed_from=target, **{**BASE, **over})
    m = ds.load(d)
    cfg = m.config
    rng = np.random.default_rng(cfg.markov_rank * 1000 + sum(chunks) + len(name))
    n_rows = sum(chunks)
    rows = rng.standard_normal((n_rows, cfg.n_taps * cfg.hidden)).astype(np.float32)
    anchors = [int(a) for a in rng.integers(0, cfg.vocab, len(chunks))]
    anchors[0] = cfg.mask_token_id if len(anchors) > 2 else anchors[0]  # the mask id as an anchor
    if len(anchors) > 1:
        anchors[-1] = cfg.vocab - 1
    dump = run_draft_dump(target, d, rows, chunks, anchors, name)
    B, V = cfg.block_size, cfg.vocab
    if not chk.equal(f"{name}: header (n, block, vocab)", (dump["n"], dump["block"], dump["vocab"]), (len(chunks), B, V)):
        return
    ctx, used = ds.empty_context(m), 0
    for i, (n, anchor) in enumerate(zip(chunks, anchors)):
        ctx = ds.append_context(m, ctx, rows[used:used + n])
        used += n
        got = dump["drafts"][i]
        label = f"{name} draft {i} (context {used}, anchor {anchor})"
        if not all(0 <= t < V for t in got["tokens"]):
            chk.equal(f"{label}: tokens in range", got["tokens"], "ids in [0, vocab)")
            continue
        ref = ds.draft(m, ctx, anchor, forced=got["tokens"])
        chk.close(f"{label}: logits", got["logits"], ref.logits.numpy(), TOL_LOGITS)
        rl = ref.logits.numpy()
        for k, (t_c, t_r) in enumerate(zip(got["tokens"], ref.tokens)):
            if t_c != t_r and rl[k, t_r] - rl[k, t_c] < TOL_LOGITS:
                print(f"note [{name}] {label} slot {k}: near-tie, C chose {t_c}, reference {t_r} "
                      f"(gap {rl[k, t_r] - rl[k, t_c]:.2e})")
            else:
                chk.equal(f"{label}: slot {k} token", t_c, t_r)
        nan_c, nan_r = np.isnan(got["conf"]), np.isnan(ref.conf.numpy())
        if chk.equal(f"{label}: NaN confidence slots", list(nan_c), list(nan_r)) and not nan_r.all():
            chk.close(f"{label}: confidences", got["conf"][~nan_r], ref.conf.numpy()[~nan_r], TOL_CONF)
        chk.equal(f"{label}: confidence head present", bool(nan_r.all()), not cfg.conf)


BROKEN_BASE = dict(BASE, markov_head="vanilla", conf=True, seed=120)
BROKEN = [  # (label, overrides, embed from target?, words (any, case-insensitive))
    ("markov_head_type lstm", dict(config_overrides={"markov_head_type": "lstm"}), True, ("markov",)),
    ("missing tensor", dict(drop_tensors=["layers.1.self_attn.k_norm.weight"]), True,
     ("layers.1.self_attn.k_norm.weight",)),
    ("missing Markov W2", dict(drop_tensors=["markov_head.markov_w2.weight"]), True, ("markov_head.markov_w2.weight",)),
    ("extra tensor", dict(extra_tensors={"layers.0.self_attn.v_proj.bias": (32,)}), True,
     ("layers.0.self_attn.v_proj.bias",)),
    ("extra layer", dict(extra_tensors={"layers.2.input_layernorm.weight": (64,)}), True,
     ("layers.2.input_layernorm.weight",)),
    ("wrong shape", dict(shape_overrides={"layers.0.mlp.up_proj.weight": (97, 64)}), True,
     ("layers.0.mlp.up_proj.weight",)),
    ("confidence head without Markov width", dict(shape_overrides={"confidence_head.proj.weight": (1, 64)}), True,
     ("confidence_head.proj.weight",)),
    ("hidden 32", dict(hidden=32, vocab=512, head_dim=8), False, ("hidden",)),
    ("vocab 500", dict(hidden=64, vocab=500), False, ("vocab",)),
    ("num_target_layers 6", dict(num_target_layers=6), True, ("layer",)),
    ("target_layer_ids with 4", dict(taps=(1, 4)), True, ("layer",)),
    ("target_layer_ids with 7", dict(taps=(1, 7)), True, ("layer",)),
    ("mask_token_id 512", dict(mask_token=512), True, ("mask",)),
    ("enable_moe_block", dict(config_overrides={"enable_moe_block": True}), True, ("moe",)),
    ("gemma attention_k_eq_v false", dict(style="gemma4", config_overrides={"attention_k_eq_v": False}), True,
     ("k_eq_v", "v_proj")),
    ("gemma hidden_size_per_layer_input", dict(style="gemma4", config_overrides={"hidden_size_per_layer_input": 256}),
     True, ("per_layer",)),
    ("invalid JSON", dict(), True, ("json", "config", "parse")),
]


def check_broken(chk, target):
    tool = common.tool("ds_draft_dump")
    for i, (label, over, embed, words) in enumerate(BROKEN):
        d = make_deepspec.make_deepspec(os.path.join(common.tmp_dir(), f"drafter_bad_{i}"),
                                        embed_from=target if embed else None, **{**BROKEN_BASE, **over})
        if label == "invalid JSON":
            with open(os.path.join(d, "config.json")) as f:
                text = f.read()
            with open(os.path.join(d, "config.json"), "w") as f:
                f.write(text[: len(text) // 2])
        hidden = over.get("hidden", 64)
        taps_in = os.path.join(common.tmp_dir(), f"draft_bad_{os.getpid()}.taps")
        out = os.path.join(common.tmp_dir(), f"draft_bad_{os.getpid()}.bin")
        n_taps = len(over.get("taps", BROKEN_BASE["taps"]))
        np.zeros((3, n_taps * hidden), dtype="<f4").tofile(taps_in)
        try:
            p = subprocess.run([tool, target, d, "--taps-in", taps_in, "--chunks", "3", "--anchors", "5",
                                "--out", out], capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            chk.equal(f"broken drafter ({label}): finishes", "timeout", "exit 1")
            continue
        finally:
            os.remove(taps_in)
        if os.path.exists(out):
            os.remove(out)
        err = p.stderr.strip()
        lines = [ln for ln in err.splitlines() if ln.strip()]
        chk.equal(f"broken drafter ({label}): exit status (stderr: {err!r})", p.returncode, 1)
        chk.equal(f"broken drafter ({label}): one stderr line", len(lines), 1)
        chk.equal(f"broken drafter ({label}): stderr {err!r} names one of {words}",
                  any(w.lower() in err.lower() for w in words), True)


def main():
    chk = common.Checker("drafter_parity")
    target = common.stories_model()
    common.tool("ds_draft_dump")
    for name, over, chunks in CASES:
        compare_case(chk, target, name, over, chunks)
    check_broken(chk, target)
    chk.finish()


if __name__ == "__main__":
    main()
