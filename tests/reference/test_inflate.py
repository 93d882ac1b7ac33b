"""`dspark inflate`: stories260K and a drafter grown to hidden 256, FFN 512, 8 layers (small, so the
test is fast; the construction does not depend on the size) must compute what the small pair
computes.

1. Construction, checked in numpy against the GGUF itself (our own reader, Q/K un-permuted here
   independently): the real blocks are the source tensors (norms x sqrt(h/H), eps x h/H, the real
   layer l at config.json's layer_map[l]); the embedding's padded columns, o_proj/down_proj rows
   past h, down_proj columns past f and whole o_proj/down_proj of added layers are exactly 0; every
   other padded weight is random (no zeros a kernel could skip).
2. The C engine on the inflated f32 target: logits within 2e-4 of the GGUF's over every held-out
   prompt (observed ~1e-5: only the order of float sums changes), taps at the mapped layers equal
   to the GGUF's taps with padded dimensions exactly 0, and greedy text equal to stories260K's on
   docs/prompts/stories-heldout.txt; speculative greedy decoding with the inflated drafter is
   token-identical to plain decoding.
3. The drafter (random DeepSpec drafters with vanilla, gated and rnn Markov heads and confidence
   heads): given the inflated target's taps, the inflated drafter's draft tokens equal the small
   drafter's (given the small target's taps), logits within 1e-3, confidences within 1e-4.
4. bf16: the matrices are rounded, so the exact comparison is the same construction at the
   original size in bf16 (hidden 64, FFN 172, 5 layers) against the inflated one in bf16: identical
   greedy tokens on the held-out prompts, logits within 2e-3.
"""

import json
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import gguf_py  # noqa: E402
import make_deepspec  # noqa: E402
import mlx_quant_ref as st_ref  # noqa: E402
from test_drafter_parity import run_draft_dump  # noqa: E402

H, F, LAYERS = 256, 512, 8
N_GEN = 48
TOL_LOGITS, TOL_LOGITS_BF16 = 2e-4, 2e-3
os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # shared machines: do not spin


def prompts():
    path = os.path.join(common.REPO, "docs", "prompts", "stories-heldout.txt")
    return [ln.strip() for ln in open(path) if ln.strip()]


def inflate(drafter, out, hidden=H, ffn=F, layers=LAYERS, dtype="f32", seed=1):
    common.run([common.tool("dspark"), "inflate", "-m", common.stories_model(), "-d", drafter, "-o", out,
                "--hidden", str(hidden), "--ffn", str(ffn), "--layers", str(layers), "--dtype", dtype,
                "--seed", str(seed)])
    return out


def greedy(model, ids, n, drafter=None):
    args = [common.tool("ds_greedy"), model, "--prompt-ids", common.ids_arg(ids), "-n", str(n)]
    if drafter:
        args += ["--drafter", drafter]
    lines = common.run(args).splitlines()
    return [int(x) for x in lines[0].split(",")] if lines and lines[0].strip() else []


def check_construction(chk, out):
    gf = gguf_py.GGUFFile(common.stories_model())
    h = int(gf.get("llama.embedding_length"))
    f = int(gf.get("llama.feed_forward_length"))
    L = int(gf.get("llama.block_count"))
    nh, nkv = int(gf.get("llama.attention.head_count")), int(gf.get("llama.attention.head_count_kv"))
    eps = float(gf.get("llama.attention.layer_norm_rms_epsilon"))
    cfg = json.load(open(os.path.join(out, "target", "config.json")))
    chk.equal("config shape", (cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"],
                               cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]),
              (H, F, LAYERS, nh, nkv, h // nh))
    chk.close("rms_norm_eps x h/H", cfg["rms_norm_eps"], eps * h / H, 1e-12)
    lmap = cfg["inflated_from"]["layer_map"]
    chk.equal("layer map", lmap, [l * LAYERS // L for l in range(L)])
    t, _ = st_ref.read_dir(os.path.join(out, "target"))
    T = {k: st_ref.as_f32(*v) for k, v in t.items()}
    s = np.sqrt(h / H)

    def unperm(w, heads):
        r, c = w.shape
        return w.reshape(heads, r // heads // 2, 2, c).swapaxes(1, 2).reshape(r, c)

    def random_part(what, a):
        # Random padding: essentially no exact zeros (a kernel that skipped zeros would be caught by
        # the cost, not the output, so the bytes must be real).
        chk.equal(f"{what}: random (nonzero) padding", bool(a.size == 0 or np.mean(a != 0) > 0.99), True)

    emb = T["model.embed_tokens.weight"]
    chk.close("embed real", emb[:, :h], gf.tensor("token_embd.weight"), 1e-7)
    chk.equal("embed padding is 0", bool(np.all(emb[:, h:] == 0)), True)
    head = T["lm_head.weight"]
    src_head = gf.tensor("output.weight") if "output.weight" in gf.tensors else gf.tensor("token_embd.weight")
    chk.close("lm_head real", head[:, :h], src_head, 1e-7)
    random_part("lm_head", head[:, h:])
    chk.close("final norm x sqrt(h/H)", T["model.norm.weight"][:h], gf.tensor("output_norm.weight") * s, 1e-6)
    for p in range(LAYERS):
        pre = f"model.layers.{p}."
        wo, dn = T[pre + "self_attn.o_proj.weight"], T[pre + "mlp.down_proj.weight"]
        q, g = T[pre + "self_attn.q_proj.weight"], T[pre + "mlp.gate_proj.weight"]
        if p not in lmap:
            chk.equal(f"layer {p} (added): o_proj and down_proj are 0", bool(np.all(wo == 0) and np.all(dn == 0)), True)
            random_part(f"layer {p} q_proj", q)
            random_part(f"layer {p} gate_proj", g)
            continue
        l = lmap.index(p)
        blk = f"blk.{l}."
        chk.close(f"layer {p} q real", q[:, :h], unperm(gf.tensor(blk + "attn_q.weight"), nh), 1e-7)
        chk.close(f"layer {p} k real", T[pre + "self_attn.k_proj.weight"][:, :h],
                  unperm(gf.tensor(blk + "attn_k.weight"), nkv), 1e-7)
        chk.close(f"layer {p} v real", T[pre + "self_attn.v_proj.weight"][:, :h], gf.tensor(blk + "attn_v.weight"), 1e-7)
        random_part(f"layer {p} q padding", q[:, h:])
        chk.close(f"layer {p} o real", wo[:h], gf.tensor(blk + "attn_output.weight"), 1e-7)
        chk.equal(f"layer {p} o rows past h are 0", bool(np.all(wo[h:] == 0)), True)
        chk.close(f"layer {p} gate real", g[:f, :h], gf.tensor(blk + "ffn_gate.weight"), 1e-7)
        random_part(f"layer {p} gate added neurons", g[f:])
        chk.close(f"layer {p} down real", dn[:h, :f], gf.tensor(blk + "ffn_down.weight"), 1e-7)
        chk.equal(f"layer {p} down: rows past h and columns past f are 0",
                  bool(np.all(dn[h:] == 0) and np.all(dn[:, f:] == 0)), True)
        chk.close(f"layer {p} attn norm x sqrt(h/H)", T[pre + "input_layernorm.weight"][:h],
                  gf.tensor(blk + "attn_norm.weight") * s, 1e-6)
        chk.close(f"layer {p} ffn norm x sqrt(h/H)", T[pre + "post_attention_layernorm.weight"][:h],
                  gf.tensor(blk + "ffn_norm.weight") * s, 1e-6)
    return h, lmap


def check_forward(chk, out, h, lmap, drafter_taps):
    model = common.stories_model()
    big = os.path.join(out, "target")
    big_taps = [t if t < 0 else lmap[t] for t in drafter_taps]
    worst = 0.0
    for i, text in enumerate(prompts()):
        ids = common.tokenize_c(model, text)
        chk.equal(f"prompt {i}: the carried tokenizer", common.tokenize_c(big, text), ids)
        a = common.ref_dump(model, ids, taps=drafter_taps, tag="infl_small")
        b = common.ref_dump(big, ids, taps=big_taps, tag="infl_big")
        chk.close(f"prompt {i}: logits", b["logits"], a["logits"], TOL_LOGITS)
        worst = max(worst, float(np.abs(b["logits"] - a["logits"]).max()))
        chk.close(f"prompt {i}: taps (real dims)", b["taps"][:, :, :h], a["taps"], TOL_LOGITS)
        chk.equal(f"prompt {i}: taps' padded dims are exactly 0", bool(np.all(b["taps"][:, :, h:] == 0)), True)
        want = greedy(model, ids, N_GEN)
        chk.equal(f"prompt {i}: greedy tokens", greedy(big, ids, N_GEN), want)
        chk.equal(f"prompt {i}: speculative greedy = plain", greedy(big, ids, N_GEN, os.path.join(out, "drafter")), want)
    print(f"f32: max |logit difference| over the held-out prompts {worst:.2e}")


def check_drafter(chk, tmp, name, over):
    model = common.stories_model()
    # A large eps, so that a wrong eps or q/k compensation moves the outputs well past the tolerances.
    small = make_deepspec.make_deepspec(os.path.join(tmp, "d_" + name), embed_from=model, norm_eps=0.05, **over)
    out = inflate(small, os.path.join(tmp, "inf_" + name))
    cfg = json.load(open(os.path.join(out, "target", "config.json")))
    lmap = cfg["inflated_from"]["layer_map"]
    dcfg = json.load(open(os.path.join(out, "drafter", "config.json")))
    taps = list(over["taps"])
    chk.equal(f"{name}: taps follow the layer map", dcfg["target_layer_ids"], [t if t < 0 else lmap[t] for t in taps])
    ids = common.tokenize_c(model, prompts()[0])[:12]
    a = common.ref_dump(model, ids, taps=taps, tag="infl_dt_small")
    b = common.ref_dump(os.path.join(out, "target"), ids, taps=dcfg["target_layer_ids"], tag="infl_dt_big")
    chunks, anchors = (5, 3, 4), (ids[5], ids[8], 17)
    rows_a = a["taps"].reshape(a["n"], -1)
    rows_b = b["taps"].reshape(b["n"], -1)
    da = run_draft_dump(model, small, rows_a, chunks, anchors, "infl_small_" + name)
    db = run_draft_dump(os.path.join(out, "target"), os.path.join(out, "drafter"), rows_b, chunks, anchors,
                        "infl_big_" + name)
    for k in range(len(chunks)):
        chk.equal(f"{name}: draft {k} tokens", [int(x) for x in db["drafts"][k]["tokens"]], [int(x) for x in da["drafts"][k]["tokens"]])
        chk.close(f"{name}: draft {k} logits", db["drafts"][k]["logits"], da["drafts"][k]["logits"], 1e-3)
        chk.close(f"{name}: draft {k} confidences", db["drafts"][k]["conf"], da["drafts"][k]["conf"], 1e-4)


def check_bf16(chk, tmp, drafter):
    same = inflate(drafter, os.path.join(tmp, "bf16_orig"), hidden=64, ffn=172, layers=5, dtype="bf16")
    big = inflate(drafter, os.path.join(tmp, "bf16_big"), dtype="bf16")
    for i, text in enumerate(prompts()):
        ids = common.tokenize_c(common.stories_model(), text)
        a = common.ref_dump(os.path.join(same, "target"), ids, tag="infl_bf_small")
        b = common.ref_dump(os.path.join(big, "target"), ids, tag="infl_bf_big")
        chk.close(f"bf16 prompt {i}: logits", b["logits"], a["logits"], TOL_LOGITS_BF16)
        chk.equal(f"bf16 prompt {i}: greedy tokens", greedy(os.path.join(big, "target"), ids, N_GEN),
                  greedy(os.path.join(same, "target"), ids, N_GEN))


def main():
    chk = common.Checker("inflate")
    tmp = os.path.join(common.tmp_dir(), "inflate.%d" % os.getpid())
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        base = dict(layers=2, heads=4, kv_heads=2, head_dim=16, ffn=96, block=7, markov_rank=16, mask_token=3,
                    num_target_layers=5)
        drafter = make_deepspec.make_deepspec(os.path.join(tmp, "d_main"), embed_from=common.stories_model(),
                                              markov_head="vanilla", conf=True, conf_with_markov=True, taps=(1, 3),
                                              seed=201, **base)
        out = inflate(drafter, os.path.join(tmp, "main"))
        h, lmap = check_construction(chk, out)
        check_forward(chk, out, h, lmap, (1, 3))
        check_drafter(chk, tmp, "vanilla", dict(base, markov_head="vanilla", conf=True, conf_with_markov=True,
                                                taps=(-1, 1, 3), seed=202))
        check_drafter(chk, tmp, "gated", dict(base, markov_head="gated", conf=True, conf_with_markov=True,
                                              taps=(0, 2), seed=203))
        check_drafter(chk, tmp, "rnn", dict(base, markov_head="rnn", conf=True, conf_with_markov=False,
                                            taps=(1, 2, 3), seed=204))
        check_bf16(chk, tmp, drafter)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    chk.finish()


if __name__ == "__main__":
    main()
