#!/usr/bin/python3
"""Greedy speculative decoding is lossless: `dspark generate --temp 0` gives exactly the tokens of
plain decoding (`--spec none`) with every drafter, strategy and verification setting.

For every prompt (five stories prompts, BOS alone, and a ~450-token prompt whose prefill runs in
chunks), `dspark generate -m MODEL -p PROMPT -n 48 --temp 0 --json --spec none` gives T, and each of
these must give exactly T:
  - `--spec dspark` with drafters from `dspark init-drafter` (default; --markov-rank 0 (DFlash);
    --markov-head gated; --markov-head rnn; --no-confidence; --layers 2 --block 4; --dtype bf16),
    from make_deepspec.py (qwen3 vanilla / gated / rnn, gemma4 vanilla, bf16, 3 shards), and a
    "bigram" drafter whose Markov head holds the target's own bigram table (test_spec_sampling.py's
    DRAFTERS), which drafts plausible chains so that drafts really get accepted;
    each with --draft-max 1, 3 and the default, and --conf-threshold 0.3 and 0.6;
  - `--spec ngram` with --draft-max 1/4/7 x --ngram 1/2/3 on two repetitive prompts (and the
    default on every prompt); there rounds, tau and acceptance_by_position must also equal a
    simulation of prompt lookup (written here from its definition) over the committed tokens.

The JSON speculation fields are checked on every run: "spec" names the strategy; "rounds" >= 1;
"tau" is the mean of (accepted + 1) per round (engine.c), so tau * rounds == generated tokens when
no EOS cut a round short; "acceptance_by_position" is a list of rates in [0, 1], no longer than the
verified draft length, empty without drafts, all zero exactly when nothing was accepted; "draft_ms"
and "verify_ms" are >= 0 (draft_ms 0 without speculation). Static truncation: init-drafter's
confidence head starts at c = 0.5, so --conf-threshold 0.6 verifies no draft (plain decoding) and
0.3 changes nothing. ngram on the repetitive prompt must have tau > 1.

Bad pairings through the CLI: a drafter made for another target shape (an HF Llama with hidden size
96) used with stories260K -> exit 1 and a message naming the hidden size; a drafter made for another
target of the same shape loads with a warning (and stays lossless); `init-drafter` into an existing
directory fails and leaves it untouched; `init-drafter --taps 4` (the target's last layer) fails
naming the layer and creates nothing.
"""

import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import llama_ref  # noqa: E402
import make_deepspec  # noqa: E402
import make_hf_llama  # noqa: E402
import test_spec_sampling  # noqa: E402  (its bigram drafter)

N_NEW = 48
PROMPTS = [
    "Once upon a time",
    "Tom saw a",
    "She wanted to",
    "One day, Lily went to the",
    "The little dog was very",
    "",  # BOS alone: the first anchor is BOS, the drafter starts from an empty context
    "Once upon a time, there was a little girl named Lily. " * 30,  # > 256 tokens: chunked prefill
]
REPEAT = "the cat and the cat and the cat and the"
# Repetitive with different continuations of "the": the ngram length changes the proposals.
REPEAT2 = "the dog ran to the park and the cat ran to the tree and the dog ran to the"

# (name, `dspark init-drafter` options)
INIT_DRAFTERS = [
    ("init_default", ["--seed", "1"]),
    ("init_dflash", ["--seed", "2", "--markov-rank", "0"]),
    ("init_gated", ["--seed", "3", "--markov-head", "gated"]),
    ("init_rnn", ["--seed", "4", "--markov-head", "rnn"]),
    ("init_noconf", ["--seed", "5", "--no-confidence"]),
    ("init_l2_b4", ["--seed", "6", "--layers", "2", "--block", "4"]),
    ("init_bf16", ["--seed", "7", "--dtype", "bf16"]),
]
# (name, make_deepspec options; embed_tokens / lm_head copied from the target)
MADE_DRAFTERS = [
    ("mk_qwen3_vanilla", dict(style="qwen3", markov_head="vanilla", seed=21)),
    ("mk_qwen3_gated", dict(style="qwen3", markov_head="gated", taps=[0, 2], seed=22)),
    ("mk_qwen3_rnn", dict(style="qwen3", markov_head="rnn", conf_with_markov=False, layers=3, seed=23)),
    ("mk_gemma4_vanilla", dict(style="gemma4", markov_head="vanilla", layer_scalar=0.75, seed=24)),
    ("mk_qwen3_bf16", dict(style="qwen3", markov_head="vanilla", dtype="bf16", block=5, seed=25)),
    ("mk_qwen3_sharded", dict(style="qwen3", markov_head="gated", shards=3, taps=[-1, 1, 2, 3], seed=26)),
]
# Verification settings for dspark: (options, draft_max or None for the default)
SETTINGS = [
    ([], None),
    (["--draft-max", "1"], 1),
    (["--draft-max", "3"], 3),
    (["--conf-threshold", "0.3"], None),
    (["--conf-threshold", "0.6"], None),
    (["--draft-max", "3", "--conf-threshold", "0.6"], 3),
    (["--tree", "3"], None),  # token trees: side branches verified with the chain in one forward
    (["--draft-max", "4", "--tree", "4", "--tree-depth", "3"], 4),
]
NGRAM_SETTINGS = [(["--draft-max", str(k), "--ngram", str(n)], k, n) for k in (1, 4, 7) for n in (1, 2, 3)]


def ngram_propose(hist, n_max, k):
    """Prompt lookup, from its definition: the tokens that followed the latest earlier occurrence
    (starting before the key itself) of the last n tokens, n = n_max down to 1; at most k."""
    for n in range(min(n_max, len(hist) - 1), 0, -1):
        key = hist[-n:]
        for j in range(len(hist) - n - 1, -1, -1):
            if hist[j:j + n] == key:
                return hist[j + n:j + n + k]
    return []


def ngram_expected_stats(prompt_ids, tokens, k_max, n_max):
    """rounds, tau and acceptance_by_position of greedy ngram decoding that commits `tokens`."""
    i, rounds, accepted = 0, 0, 0
    tried, acc = [0] * 64, [0] * 64
    while i < len(tokens):
        k = min(k_max, len(tokens) - i - 1)  # the engine drafts at most max_new - generated - 1
        d = ngram_propose(list(prompt_ids) + list(tokens[:i]), n_max, k) if k > 0 else []
        a = 0
        while a < len(d) and d[a] == tokens[i + a]:
            a += 1
        for j in range(min(len(d), a + 1)):
            tried[j] += 1
            acc[j] += j < a
        rounds += 1
        accepted += a
        i += a + 1
    n_pos = next((j for j in range(64) if not tried[j]), 64)
    return rounds, (accepted + rounds) / rounds, [acc[j] / tried[j] for j in range(n_pos)]


def generate(model_path, prompt, extra):
    return common.generate_json(model_path, prompt, N_NEW, extra)


def check_json(chk, label, out, kind, k_max):
    """The speculation fields of one run. k_max: the most drafts one round can verify."""
    keys = ("spec", "rounds", "tau", "acceptance_by_position", "draft_ms", "verify_ms")
    missing = [k for k in keys if k not in out]
    if not chk.equal(f"{label}: JSON speculation fields present", missing, []):
        return
    chk.equal(f"{label}: spec", out["spec"], kind)
    gen, rounds, tau, acc = out["generated_tokens"], out["rounds"], out["tau"], out["acceptance_by_position"]
    num = (int, float)
    if not chk.equal(f"{label}: rounds / tau / draft_ms / verify_ms are numbers, acceptance a list",
                     (isinstance(rounds, int), isinstance(tau, num), isinstance(out["draft_ms"], num),
                      isinstance(out["verify_ms"], num), isinstance(acc, list)), (True,) * 5):
        return
    chk.equal(f"{label}: 1 <= rounds <= generated ({rounds}, {gen})", 1 <= rounds <= gen, True)
    if gen == N_NEW:  # no EOS: every round committed accepted + 1 tokens
        chk.close(f"{label}: tau * rounds == generated_tokens (tau {tau}, rounds {rounds})", tau * rounds, gen, 1e-6)
    else:
        chk.equal(f"{label}: tau * rounds >= generated_tokens", tau * rounds >= gen - 1e-6, True)
    chk.equal(f"{label}: acceptance_by_position values in [0, 1] ({acc})",
              all(isinstance(a, num) and 0 <= a <= 1 for a in acc), True)
    chk.equal(f"{label}: len(acceptance_by_position) <= {k_max} ({acc})", len(acc) <= k_max, True)
    if acc and gen == N_NEW:  # (token trees: acceptance by position counts the drafted chain's slots;
        # a round whose path took a branch is in branch_accepted)
        chk.equal(f"{label}: acceptance_by_position[0] > 0 or a branch accepted exactly when a draft was accepted "
                  f"(tau {tau}, {acc}, branches {out.get('branch_accepted')})",
                  acc[0] > 0 or out.get("branch_accepted", 0) > 0, rounds < gen)
    if rounds == gen:
        chk.equal(f"{label}: nothing accepted, so every rate is 0 ({acc})", all(a == 0 for a in acc), True)
    chk.equal(f"{label}: draft_ms >= 0 and verify_ms >= 0", out["draft_ms"] >= 0 and out["verify_ms"] >= 0, True)
    if kind == "none":
        chk.equal(f"{label}: no speculation: rounds == generated, no acceptance, draft_ms 0",
                  (rounds, acc, out["draft_ms"]), (gen, [], 0))


def block_of(directory):
    with open(os.path.join(directory, "config.json")) as f:
        return int(json.load(f)["block_size"])


def run_cli(args):
    p = subprocess.run(args, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def snapshot(directory):
    out = {}
    for root, _, files in os.walk(directory):
        for fn in files:
            path = os.path.join(root, fn)
            st = os.stat(path)
            with open(path, "rb") as f:
                out[os.path.relpath(path, directory)] = (f.read(), st.st_mtime_ns)
    return out


def check_bad_pairings(chk, model_path, work):
    dspark = common.tool("dspark")
    # A drafter made for a target of another shape (hidden 96 instead of 64).
    other = make_hf_llama.make_hf_llama(os.path.join(work, "hf_dim96"), seed=3, dim=96, layers=5, heads=4,
                                        kv_heads=2, ffn=96, vocab=512)
    d96 = os.path.join(work, "drafter_dim96")
    rc, _, err = run_cli([dspark, "init-drafter", "-m", other, "-o", d96, "--seed", "1"])
    if not chk.equal(f"init-drafter from an HF target with hidden 96: exit status (stderr {err.strip()!r})", rc, 0):
        return
    rc, out, err = run_cli([dspark, "generate", "-m", model_path, "-p", "Tom saw a", "-n", "4", "-d", d96])
    chk.equal(f"hidden-96 drafter with stories260K: exit status 1 (stderr {err.strip()!r})", rc, 1)
    chk.equal(f"hidden-96 drafter: one stderr line naming the hidden size ({err.strip()!r})",
              len(err.strip().splitlines()) == 1 and "hidden" in err.lower() and "96" in err and "64" in err, True)
    chk.equal("hidden-96 drafter: nothing on stdout", out, "")

    # A drafter made for another target of the same shape: a warning, and still lossless.
    same = make_hf_llama.make_hf_llama(os.path.join(work, "hf_same_shape"), seed=4, dim=64, layers=5, heads=8,
                                       kv_heads=4, ffn=172, vocab=512)
    dsame = os.path.join(work, "drafter_same_shape")
    rc, _, err = run_cli([dspark, "init-drafter", "-m", same, "-o", dsame, "--seed", "2"])
    if chk.equal(f"init-drafter from a same-shape HF target: exit status (stderr {err.strip()!r})", rc, 0):
        rc, out, err = run_cli([dspark, "generate", "-m", model_path, "-p", "Tom saw a", "-n", "8", "--temp", "0",
                                "-d", dsame])
        chk.equal(f"same-shape foreign drafter: exit status 0 (stderr {err.strip()!r})", rc, 0)
        chk.equal(f"same-shape foreign drafter: a warning about the target ({err.strip()!r})",
                  "warning" in err.lower() and "target" in err.lower(), True)

    # init-drafter into an existing directory: fails, leaves it untouched.
    existing = os.path.join(work, "existing")
    os.makedirs(existing)
    with open(os.path.join(existing, "config.json"), "w") as f:
        f.write('{"keep": true}\n')
    with open(os.path.join(existing, "notes.txt"), "w") as f:
        f.write("do not touch\n")
    before = snapshot(existing)
    rc, _, err = run_cli([dspark, "init-drafter", "-m", model_path, "-o", existing])
    chk.equal(f"init-drafter into an existing directory: exit status 1 (stderr {err.strip()!r})", rc, 1)
    chk.equal(f"init-drafter into an existing directory: message names it ({err.strip()!r})",
              existing in err and "exist" in err.lower(), True)
    chk.equal("init-drafter into an existing directory: contents untouched", snapshot(existing) == before, True)
    chk.equal("init-drafter into an existing directory: no stray files next to it",
              sorted(f for f in os.listdir(work) if f.startswith("existing")), ["existing"])

    # --taps 4: the target's last layer.
    t4 = os.path.join(work, "taps4")
    rc, _, err = run_cli([dspark, "init-drafter", "-m", model_path, "-o", t4, "--taps", "4"])
    chk.equal(f"init-drafter --taps 4: exit status 1 (stderr {err.strip()!r})", rc, 1)
    chk.equal(f"init-drafter --taps 4: message names layer 4 ({err.strip()!r})",
              "layer" in err.lower() and "4" in err, True)
    chk.equal("init-drafter --taps 4: nothing created", os.path.exists(t4), False)


def main():
    t_start = time.time()
    model_path = common.stories_model()
    work = os.path.join(common.tmp_dir(), "spec_greedy")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    chk = common.Checker("spec_greedy")
    dspark = common.tool("dspark")

    # Drafters.
    drafters = []  # (name, dir, block, has_confidence_at_0.5)
    for name, opts in INIT_DRAFTERS:
        d = os.path.join(work, name)
        common.run([dspark, "init-drafter", "-m", model_path, "-o", d, *opts])
        drafters.append((name, d, block_of(d), "--no-confidence" not in opts))
    for name, opts in MADE_DRAFTERS:
        d = make_deepspec.make_deepspec(os.path.join(work, name), embed_from=model_path, **opts)
        drafters.append((name, d, block_of(d), False))
    d = test_spec_sampling.make_drafter(llama_ref.load_gguf(model_path), model_path, "vanilla_bigram",
                                        os.path.join(work, "bigram"))
    drafters.append(("bigram", d, block_of(d), False))

    # Plain decoding per prompt.
    baseline = {}
    for p in PROMPTS + [REPEAT, REPEAT2]:
        out = generate(model_path, p, ["--spec", "none"])
        chk.equal(f"{p[:30]!r} --spec none: generated_tokens", out.get("generated_tokens"), N_NEW)
        check_json(chk, f"{p[:30]!r} --spec none", out, "none", 0)
        baseline[p] = out["tokens"]

    n_runs, accepted_any = 0, {}
    for name, d, block, conf_half in drafters:
        runs = {}
        for opts, k in SETTINGS:
            k_max = min(k or block, block)
            for p in PROMPTS:
                label = f"{name} {' '.join(opts) or '(default)'} {p[:30]!r}"
                out = generate(model_path, p, ["-d", d, *opts])
                n_runs += 1
                runs[(tuple(opts), p)] = out
                chk.equal(f"{label}: tokens equal plain decoding", out.get("tokens"), baseline[p])
                check_json(chk, label, out, "dspark", k_max)
                if out.get("rounds", N_NEW) < N_NEW:
                    accepted_any[name] = accepted_any.get(name, 0) + 1
        if conf_half:  # init-drafter: confidence head 0, c = 0.5 in every slot
            for p in PROMPTS:
                plain = runs[(("--conf-threshold", "0.6"), p)]
                chk.equal(f"{name} --conf-threshold 0.6 {p[:30]!r}: c = 0.5 < 0.6 truncates every block",
                          (plain.get("rounds"), plain.get("acceptance_by_position")), (N_NEW, []))
                low, default = runs[(("--conf-threshold", "0.3"), p)], runs[((), p)]
                chk.equal(f"{name} --conf-threshold 0.3 {p[:30]!r}: c = 0.5 >= 0.3 truncates nothing",
                          (low.get("rounds"), low.get("acceptance_by_position")),
                          (default.get("rounds"), default.get("acceptance_by_position")))
    # The bigram drafter must actually get drafts accepted (else this test checks only rejections).
    chk.equal(f"the bigram drafter has drafts accepted on most prompts (runs with an accepted draft: "
              f"{accepted_any.get('bigram', 0)} of {len(SETTINGS) * len(PROMPTS)})",
              accepted_any.get("bigram", 0) >= len(PROMPTS), True)

    # ngram: tokens equal plain decoding, and rounds / tau / acceptance equal a simulation of prompt
    # lookup over the committed tokens.
    for rp in (REPEAT, REPEAT2):
        for opts, k, n in NGRAM_SETTINGS + [([], 7, 3)]:
            label = f"ngram {' '.join(opts) or '(default)'} {rp!r}"
            out = generate(model_path, rp, ["--spec", "ngram", *opts])
            n_runs += 1
            if not chk.equal(f"{label}: tokens equal plain decoding", out.get("tokens"), baseline[rp]):
                continue
            check_json(chk, label, out, "ngram", k)
            chk.equal(f"{label}: tau > 1 on a repetitive prompt (tau {out.get('tau')})", (out.get("tau") or 0) > 1, True)
            rounds, tau, acc = ngram_expected_stats(out["prompt_ids"], baseline[rp], k, n)
            chk.equal(f"{label}: rounds equal the prompt-lookup simulation", out.get("rounds"), rounds)
            chk.close(f"{label}: tau equals the simulation", out.get("tau"), tau, 1e-12)
            chk.close(f"{label}: acceptance_by_position equals the simulation",
                      out.get("acceptance_by_position"), acc, 1e-12)
            print(f"   {label}: rounds {out.get('rounds')}, tau {out.get('tau'):.3f}, "
                  f"acceptance {[round(a, 2) for a in out.get('acceptance_by_position', [])]}")
    for p in PROMPTS:
        out = generate(model_path, p, ["--spec", "ngram"])
        n_runs += 1
        chk.equal(f"ngram (default) {p[:30]!r}: tokens equal plain decoding", out.get("tokens"), baseline[p])
        check_json(chk, f"ngram (default) {p[:30]!r}", out, "ngram", 7)

    check_bad_pairings(chk, model_path, work)
    print(f"   {n_runs} speculative runs over {len(drafters)} drafters; runs with an accepted draft per drafter: "
          f"{accepted_any}")
    print(f"   total {time.time() - t_start:.1f} s")
    chk.finish()


if __name__ == "__main__":
    main()
