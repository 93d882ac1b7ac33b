#!/usr/bin/python3
"""Training throughput: our C trainer (bench_train) against a float32 PyTorch implementation of the
same training step, in the same run, on the same threads.

The PyTorch step is batched the way DeepSpec's trainer batches (not the float64 per-anchor
reference of tests/reference/train_ref.py): per step, `batch` sequences, each through the frozen
target (float32, no grad) for its tap rows and final hidden states; the context projection of
every position at once; ALL anchor blocks of ALL sequences as one batch of (S, A, B) rows through
every layer, attention over [context rows before the anchor (a mask) ; the block's own rows];
the teacher-forced Markov head (vanilla), the confidence head, CE + L1 + BCE with per-slot
weights exp(-k/4) over the valid slots; autograd backward; global-norm clip 1.0; torch AdamW
(betas 0.9/0.999, eps 1e-8, no weight decay). Same drafter shape as bench_train (a fresh
`dspark init-drafter --layers L`), same data file, same anchors per sequence (64) and batch (8).

    bench/bench_train_torch.py BUILD_DIR [--threads 1,2] [--steps 4] [--c-steps 20] [--layers 5] [--repeats 2]

(--steps: timed PyTorch steps after one untimed warm-up step; --c-steps: bench_train's steps, whose
time includes loading the target and writing the fresh drafter, so it needs more steps to amortize
them: C's rate is, if anything, understated.)

JSON lines: one per (implementation, threads, repeat), C and PyTorch interleaved, then a summary
per thread count with the medians and the ratio C / PyTorch (anchor blocks per second).
"""

import json
import math
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "reference"))
import deepspec_ref as ds  # noqa: E402
import llama_ref  # noqa: E402

BATCH, ANCHORS = 8, 64


def read_data(path):
    """DSPKDATA v1 (src/train/data.h): [(ids ndarray, n_prompt)]."""
    b = open(path, "rb").read()
    assert b[:8] == b"DSPKDATA", path
    n_seq = struct.unpack_from("<Q", b, 24)[0]
    off, out = 32, []
    for _ in range(n_seq):
        n, npr = struct.unpack_from("<II", b, off)
        out.append((np.frombuffer(b, dtype="<u4", count=n, offset=off + 8).astype(np.int64), npr))
        off += 8 + 4 * n
    return out


def rope(x, pos, inv):
    """x (..., heads, d) rotated at pos (...) (halves pairing), float32."""
    ang = pos.to(torch.float64)[..., None] * inv  # (..., d/2)
    cos, sin = torch.cos(ang).to(x.dtype)[..., None, :], torch.sin(ang).to(x.dtype)[..., None, :]
    h = x.shape[-1] // 2
    a, b = x[..., :h], x[..., h:]
    return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)


def rms(x, w, eps):
    return x * torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + eps) * w


class TorchTrainer:
    def __init__(self, drafter_dir, target_path):
        m = ds.load(drafter_dir, dtype=torch.float32)
        self.cfg = cfg = m.config
        assert cfg.style == ds.QWEN3 and cfg.markov_type in ("vanilla", "none"), "bench: Qwen3, vanilla or DFlash"
        self.frozen = {n: t for n, t in m.weights.items() if n in ("embed_tokens.weight", "lm_head.weight")}
        self.p = {n: torch.nn.Parameter(t.clone()) for n, t in m.weights.items() if n not in self.frozen}
        self.opt = torch.optim.AdamW(list(self.p.values()), lr=3e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0)
        self.target = llama_ref.load(target_path, dtype=torch.float32)
        self.inv = ds.inv_freq(cfg)

    def w(self, n):
        return self.p[n] if n in self.p else self.frozen[n]

    def lin(self, x, name):
        y = x @ self.w(name + ".weight").T
        b = self.p.get(name + ".bias")
        return y if b is None else y + b

    def kv(self, i, xn, pos):
        c = self.cfg
        pre = f"layers.{i}.self_attn."
        k = self.lin(xn, pre + "k_proj").unflatten(-1, (c.n_kv_heads, c.head_dim))
        k = rope(rms(k, self.w(pre + "k_norm.weight"), c.norm_eps), pos, self.inv)
        v = self.lin(xn, pre + "v_proj").unflatten(-1, (c.n_kv_heads, c.head_dim))
        return k, v

    def step(self, seqs, rng):
        c = self.cfg
        B, H, T = c.block_size, c.hidden, c.n_taps
        S = len(seqs)
        N = max(len(t) for t, _ in seqs)
        R = torch.zeros(S, N, T * H)
        G = torch.zeros(S, N, H)
        tok = torch.zeros(S, N + B + 1, dtype=torch.long)
        lens = torch.zeros(S, dtype=torch.long)
        anchors = torch.zeros(S, ANCHORS, dtype=torch.long)
        amask = torch.zeros(S, ANCHORS, dtype=torch.bool)
        with torch.no_grad():
            for s, (t, npr) in enumerate(seqs):
                out = llama_ref.forward(self.target, t.tolist(), taps=tuple(c.target_layer_ids))
                n = len(t)
                R[s, :n] = torch.cat([out.taps[i] for i in c.target_layer_ids], dim=1)
                G[s, :n] = out.hidden
                tok[s, :n] = torch.as_tensor(t)
                lens[s] = n
                cand = np.arange(npr, n - 1)
                pick = np.sort(rng.choice(cand, size=min(ANCHORS, len(cand)), replace=False))
                anchors[s, :len(pick)] = torch.as_tensor(pick)
                amask[s, :len(pick)] = True
        pos_ctx = torch.arange(N)
        ctx = rms(R @ self.w("fc.weight").T, self.w("hidden_norm.weight"), c.norm_eps)  # (S, N, H)
        kpos = torch.arange(B)
        bpos = anchors[:, :, None] + kpos  # (S, A, B) positions of the block rows
        ids = torch.full((S, ANCHORS, B), c.mask_token_id, dtype=torch.long)
        ids[:, :, 0] = torch.gather(tok, 1, anchors)
        x = self.frozen["embed_tokens.weight"][ids] * c.embed_scale  # (S, A, B, H)
        # context row j is visible to the block at anchor p iff j < p
        vis = pos_ctx[None, None, :] < anchors[:, :, None]  # (S, A, N)
        rep = c.n_heads // c.n_kv_heads
        for i in range(c.n_layers):
            pre = f"layers.{i}."
            kc, vc = self.kv(i, ctx, pos_ctx[None].expand(S, N))  # (S, N, nkv, d)
            xn = rms(x, self.w(pre + "input_layernorm.weight"), c.norm_eps)
            q = self.lin(xn, pre + "self_attn.q_proj").unflatten(-1, (c.n_heads, c.head_dim))
            q = rope(rms(q, self.w(pre + "self_attn.q_norm.weight"), c.norm_eps), bpos, self.inv)
            kb, vb = self.kv(i, xn, bpos)  # (S, A, B, nkv, d)
            kc, vc = kc.repeat_interleave(rep, 2), vc.repeat_interleave(rep, 2)
            kb, vb = kb.repeat_interleave(rep, 3), vb.repeat_interleave(rep, 3)
            sc = torch.einsum("sabhd,snhd->sahbn", q, kc) * c.attn_scale
            sc = sc.masked_fill(~vis[:, :, None, None, :], float("-inf"))
            sb = torch.einsum("sabhd,sakhd->sahbk", q, kb) * c.attn_scale
            pr = torch.softmax(torch.cat((sc, sb), dim=-1), dim=-1)
            o = torch.einsum("sahbn,snhd->sabhd", pr[..., :N], vc) + torch.einsum("sahbk,sakhd->sabhd", pr[..., N:], vb)
            x = x + self.lin(o.flatten(-2), pre + "self_attn.o_proj")
            xn = rms(x, self.w(pre + "post_attention_layernorm.weight"), c.norm_eps)
            g = self.lin(xn, pre + "mlp.gate_proj")
            x = x + self.lin(torch.nn.functional.silu(g) * self.lin(xn, pre + "mlp.up_proj"), pre + "mlp.down_proj")
        h = rms(x, self.w("norm.weight"), c.norm_eps)
        lm = self.frozen["lm_head.weight"]
        z = h @ lm.T  # (S, A, B, V)
        prev = torch.gather(tok, 1, (anchors[:, :, None] + kpos).flatten(1)).view(S, ANCHORS, B)
        feat = h
        if c.markov_rank:
            e = self.w("markov_head.markov_w1.weight")[prev]
            z = z + e @ self.w("markov_head.markov_w2.weight").T
            if c.conf_with_markov:
                feat = torch.cat((h, e), dim=-1)
        label = torch.gather(tok, 1, (anchors[:, :, None] + kpos + 1).flatten(1)).view(S, ANCHORS, B)
        valid = ((anchors[:, :, None] + kpos + 1) < lens[:, None, None]) & amask[:, :, None]
        wk = torch.exp(-kpos.float() / 4.0)[None, None, :] * valid
        logp = torch.log_softmax(z, dim=-1)
        with torch.no_grad():
            gi = (anchors[:, :, None] + kpos).clamp(max=N - 1)
            pt = torch.softmax(torch.gather(G, 1, gi.flatten(1)[..., None].expand(-1, -1, H)) @ lm.T, dim=-1)
            pt = pt.view(S, ANCHORS, B, -1)
        ce = -torch.gather(logp, -1, label[..., None])[..., 0]
        l1 = torch.sum(torch.abs(torch.exp(logp) - pt), dim=-1)
        W = wk.sum()
        loss = 0.1 * (wk * ce).sum() / W + 0.9 * (wk * l1).sum() / W
        if c.conf:
            zc = self.lin(feat, "confidence_head.proj")[..., 0]
            cs = torch.clamp(1 - 0.5 * l1.detach(), 0, 1)
            bce = torch.clamp(zc, min=0) - zc * cs + torch.log1p(torch.exp(-torch.abs(zc)))
            loss = loss + (wk * bce).sum() / W
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(self.p.values()), 1.0)
        self.opt.step()
        return float(loss), int(amask.sum())


def torch_blocks_per_s(trainer, data, threads, steps, seed):
    torch.set_num_threads(threads)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(data))
    trainer.step([data[i] for i in order[:BATCH]], rng)  # warm-up (allocator, first-touch)
    blocks, t0 = 0, time.perf_counter()
    for s in range(steps):
        idx = order[(s * BATCH) % len(order):][:BATCH]
        _, nb = trainer.step([data[i] for i in idx], rng)
        blocks += nb
    return blocks / (time.perf_counter() - t0), blocks


def c_blocks_per_s(build, model, data_path, threads, steps, layers):
    out = subprocess.run([os.path.join(build, "bin", "bench_train"), model, data_path, "--threads", str(threads),
                          "--steps", str(steps), "--layers", str(layers)], check=True, capture_output=True, text=True)
    j = json.loads(out.stdout.strip().splitlines()[-1])
    return j["blocks_per_s"], j["blocks"]


def main():
    a = sys.argv[1:]
    if not a:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    build = a[0]
    opt = {"--threads": "1,2", "--steps": "4", "--c-steps": "20", "--layers": "5", "--repeats": "2"}
    for i in range(1, len(a) - 1, 2):
        opt[a[i]] = a[i + 1]
    threads = [int(t) for t in opt["--threads"].split(",")]
    steps, layers, repeats = int(opt["--steps"]), int(opt["--layers"]), int(opt["--repeats"])
    c_steps = int(opt["--c-steps"])
    model = os.environ.get("DSPARK_MODEL", os.path.join(HERE, "..", "..", "shared", "models", "stories260K",
                                                        "stories260K.gguf"))
    tmp = tempfile.mkdtemp(prefix="bench_train_torch.")
    dspark = os.path.join(build, "bin", "dspark")
    data_path, drafter = os.path.join(tmp, "data.bin"), os.path.join(tmp, "drafter")
    subprocess.run([dspark, "datagen", "-m", model, "--prompts", os.path.join(HERE, "..", "docs", "prompts",
                    "stories-train.txt"), "-n", "200", "--max-tokens", "200", "--seed", "1", "-o", data_path],
                   check=True, capture_output=True)
    subprocess.run([dspark, "init-drafter", "-m", model, "-o", drafter, "--layers", str(layers), "--seed", "1"],
                   check=True, capture_output=True)
    data = read_data(data_path)
    rows = []
    for t in threads:
        for r in range(repeats):
            for impl in ("c", "torch"):
                if impl == "c":
                    bps, nb = c_blocks_per_s(build, model, data_path, t, c_steps, layers)
                else:
                    bps, nb = torch_blocks_per_s(TorchTrainer(drafter, model), data, t, steps, seed=r)
                row = {"bench": "train_vs_torch", "impl": impl, "threads": t, "repeat": r, "drafter_layers": layers,
                       "steps": c_steps if impl == "c" else steps, "batch": BATCH, "anchors": ANCHORS, "blocks": nb,
                       "blocks_per_s": round(bps, 1)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    for t in threads:
        cv = [x["blocks_per_s"] for x in rows if x["threads"] == t and x["impl"] == "c"]
        tv = [x["blocks_per_s"] for x in rows if x["threads"] == t and x["impl"] == "torch"]
        print(json.dumps({"bench": "train_vs_torch_summary", "threads": t, "c_median": statistics.median(cv),
                          "c_min": min(cv), "c_max": max(cv), "torch_median": statistics.median(tv),
                          "torch_min": min(tv), "torch_max": max(tv),
                          "c_over_torch": round(statistics.median(cv) / statistics.median(tv), 3),
                          "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
