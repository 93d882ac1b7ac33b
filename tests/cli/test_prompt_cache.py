"""The prompt cache (dspark serve --cache-mb, dspark chat): outputs identical with the cache on and
off (greedy and seeded, plain and speculative), the reuse reported where clients read it
(usage.prompt_tokens_details.cached_tokens, /metrics), whole chunks of 256 tokens only,
`cache_prompt: false` opting out, LRU eviction keeping the cache under --cache-mb, dspark chat
reusing the conversation across turns, and the same with KV caches of halves (DSPARK_KV_F16=1: an
entry then takes half the KV bytes). Run by test_prompt_cache.sh."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import BIN, MODEL, TMP, Server, check, FAILS  # noqa: E402

STORY = ("Once upon a time there was a little girl named Lily who loved to play in the park with her friends and "
         "her dog. She liked to run and jump and climb the big tree. One day she saw a bird in the tree and wanted "
         "to help it fly. Her mom said to be careful. ")


def prompt_ids(server, text):
    st, b = server.post("/tokenize", {"content": text, "add_special": True})
    check(st == 200, "tokenize %d" % st)
    return b["tokens"]


def complete(server, prompt, **kw):
    body = dict({"prompt": prompt, "max_tokens": 24, "temperature": 0}, **kw)
    st, b = server.post("/v1/completions", body)
    check(st == 200, "completion status %d: %s" % (st, b))
    return b["choices"][0]["text"], b["usage"]


def run_requests(server):
    """The same request sequence on any server: texts and cached_tokens of each."""
    shared = STORY * 3  # ~300 tokens: one whole chunk of 256 in common
    reqs = [
        dict(prompt=shared + "The bird said"),
        dict(prompt=shared + "Then Lily ran home and", temperature=1.0, seed=7),
        dict(prompt=shared + "The bird said", cache_prompt=False),
        dict(prompt=shared + "The dog barked at", temperature=0.8, top_p=0.9, seed=3, n=2),
        dict(prompt="A short prompt about a cat"),
    ]
    out = []
    for r in reqs:
        st, b = server.post("/v1/completions", dict({"max_tokens": 24, "temperature": 0}, **r))
        check(st == 200, "completion status %d: %s" % (st, b))
        out.append(([c["text"] for c in b["choices"]], b["usage"]["prompt_tokens_details"]["cached_tokens"]))
    return out


def main():
    drafter = os.path.join(TMP, "drafter")
    subprocess.run([BIN, "init-drafter", "-m", MODEL, "-o", drafter, "--seed", "1"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    entry_bytes = {}  # of the one entry, per server options
    for extra in ([], ["-d", drafter, "--schedule", "fixed", "--draft-max", "4"], ["--spec", "ngram"]):
        on = Server("--cache-mb", "64", *extra)
        off = Server("--cache-mb", "0", *extra)
        a, b = run_requests(on), run_requests(off)
        name = " ".join(extra) or "plain"
        check([t for t, _ in a] == [t for t, _ in b], "%s: outputs differ with the cache on and off:\n%s\n%s" % (name, a, b))
        check([c for _, c in a] == [0, 256, 0, 256, 0], "%s: cached_tokens with the cache %s" % (name, [c for _, c in a]))
        check([c for _, c in b] == [0, 0, 0, 0, 0], "%s: cached_tokens without the cache %s" % (name, [c for _, c in b]))
        m = on.metrics()
        entry_bytes[" ".join(extra)] = m.get("dspark_prefix_cache_bytes")
        # queried: every choice's prompt but the opted-out one; hits: 256 per cached choice (n = 2: both)
        n_prompt = [len(prompt_ids(on, r)) for r in (STORY * 3 + "The bird said", STORY * 3 + "Then Lily ran home and",
                                                     STORY * 3 + "The dog barked at", "A short prompt about a cat")]
        want_q = n_prompt[0] + n_prompt[1] + 2 * n_prompt[2] + n_prompt[3]
        check(m.get("dspark_prefix_cache_queries_total") == want_q, "%s: prefix_cache_queries_total %s, want %d" % (name, m.get("dspark_prefix_cache_queries_total"), want_q))
        check(m.get("dspark_prefix_cache_hits_total") == 3 * 256, "%s: prefix_cache_hits_total %s" % (name, m.get("dspark_prefix_cache_hits_total")))
        check(0 < m.get("dspark_prefix_cache_bytes", 0) <= 64 << 20, "%s: prefix_cache_bytes %s" % (name, m.get("dspark_prefix_cache_bytes")))
        check(m.get("dspark_prefix_cache_entries") == 1, "%s: one entry (one shared chunk), got %s" % (name, m.get("dspark_prefix_cache_entries")))
        check(m.get("dspark_requests_constrained_total") == 0, "%s: no constrained requests yet" % name)
        complete(on, "A dog", max_tokens=4, grammar='root ::= [a-z ]+')
        check(on.metrics().get("dspark_requests_constrained_total") == 1, "%s: one constrained request" % name)
        moff = off.metrics()
        check(moff.get("dspark_prefix_cache_queries_total") == 0, "%s: queries counted with the cache off" % name)
        on.stop()
        off.stop()

    # LRU under --cache-mb: one 256-row entry of stories260K takes 256 x (4 + 4 x 320) bytes
    # (0.33 MB: 5 layers x K and V x 32 floats per row, plus the ids), so 1 MiB holds three.
    # P0..P3, then P3 (hit), P0 (evicted by P3: miss; evicts P1, the least recently used), P2 (hit).
    P = [("Story %d. " % i) + STORY * 3 for i in range(4)]
    s = Server("--cache-mb", "1")
    got = []
    for i in (0, 1, 2, 3, 3, 0, 2):
        got.append(complete(s, P[i], max_tokens=2)[1]["prompt_tokens_details"]["cached_tokens"])
        m = s.metrics()
        check(m["dspark_prefix_cache_bytes"] <= m["dspark_prefix_cache_capacity_bytes"], "cache over its capacity: %s" % m)
        if len(got) == 1:
            check(m["dspark_prefix_cache_bytes"] == 256 * (4 + 4 * 320), "entry size %s" % m["dspark_prefix_cache_bytes"])
    check(got == [0, 0, 0, 0, 256, 0, 256], "--cache-mb 1: cached_tokens %s" % got)
    check(s.metrics()["dspark_prefix_cache_entries"] == 3, "three entries fit in 1 MiB")
    s.stop()

    # KV caches of halves: outputs still identical with the cache on and off (plain and speculative),
    # and an entry holds 2 bytes per K and V value (320 values per row), the rest as before.
    half = {"DSPARK_KV_F16": "1"}
    for extra in ([], ["-d", drafter, "--schedule", "fixed", "--draft-max", "4"]):
        on = Server("--cache-mb", "64", *extra, env=half)
        off = Server("--cache-mb", "0", *extra, env=half)
        a, b = run_requests(on), run_requests(off)
        name = "kv f16 " + (" ".join(extra) or "plain")
        check([t for t, _ in a] == [t for t, _ in b], "%s: outputs differ with the cache on and off:\n%s\n%s" % (name, a, b))
        check([c for _, c in a] == [0, 256, 0, 256, 0], "%s: cached_tokens with the cache %s" % (name, [c for _, c in a]))
        got, f32 = on.metrics()["dspark_prefix_cache_bytes"], entry_bytes[" ".join(extra)]
        check(got == f32 - 256 * 2 * 320, "%s: entry of %s bytes (with a float cache %s)" % (name, got, f32))
        on.stop()
        off.stop()

    # Soak: many distinct prompts keep it under --cache-mb.
    s = Server("--cache-mb", "1")
    for i in range(16):
        complete(s, ("Tale %d. " % i) + STORY * 3, max_tokens=2)
        m = s.metrics()
        check(m["dspark_prefix_cache_bytes"] <= 1 << 20 and m["dspark_prefix_cache_entries"] <= 3, "soak: %s" % m)
    s.stop()

    # dspark chat: later turns reuse the conversation; the replies are the same with the cache off.
    turns = STORY + "\n" + STORY + "What happened next?\nTell me more.\n"
    res = {}
    for mb in ("1024", "0"):
        p = subprocess.run([BIN, "chat", "-m", MODEL, "-n", "60", "--stats", "--cache-mb", mb, "-t", "1"], input=turns.encode(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        check(p.returncode == 0, "chat exit %d: %s" % (p.returncode, p.stderr.decode()))
        res[mb] = (p.stdout, [l for l in p.stderr.decode().splitlines() if "cached" in l])
    check(res["1024"][0] == res["0"][0], "chat replies differ with the cache on and off")
    check(len(res["1024"][1]) == 3 and "(256 cached)" in res["1024"][1][2], "chat turn 3 reuses a chunk: %s" % res["1024"][1])
    check(all("(0 cached)" in l for l in res["0"][1]), "chat with --cache-mb 0 reused: %s" % res["0"][1])

    if FAILS:
        print("%d check(s) failed" % len(FAILS))
        sys.exit(1)
    print("ok")


main()
