"""Which rule verifies a sampled request's drafts (dspark serve): a request with a seed keeps the
coupled rule (its text is the seed's, whatever the drafter), one with neither a seed nor "verify"
takes the residual rule (nothing to reproduce; min(1, p/q) accepts more), a request's own "verify"
wins, and `--verify RULE` applies the operator's rule to every request that does not say.
Checked through /metrics' dspark_requests_sampled_total{verify=...}. Run by test_serve_verify.sh."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import BIN, MODEL, TMP, Server, check, FAILS  # noqa: E402

COUPLED = 'dspark_requests_sampled_total{verify="coupled"}'
RESIDUAL = 'dspark_requests_sampled_total{verify="residual"}'


def complete(server, **kw):
    body = dict({"prompt": "Once upon a time", "max_tokens": 8}, **kw)
    st, b = server.post("/v1/completions", body)
    check(st == 200, "completion status %d: %s" % (st, b))
    return b["choices"][0]["text"]


def counts(server):
    m = server.metrics()
    return m.get(COUPLED), m.get(RESIDUAL)


def main():
    drafter = os.path.join(TMP, "drafter")
    subprocess.run([BIN, "init-drafter", "-m", MODEL, "-o", drafter, "--seed", "1"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    spec = ["-d", drafter, "--schedule", "fixed", "--draft-max", "3"]

    s = Server(*spec)
    check(counts(s) == (0, 0), "fresh server: %s" % (counts(s),))
    complete(s, temperature=1.0)                       # no seed: residual
    check(counts(s) == (0, 1), "unseeded request: %s, want (0, 1)" % (counts(s),))
    a = complete(s, temperature=1.0, seed=11)          # seed: coupled
    check(counts(s) == (1, 1), "seeded request: %s, want (1, 1)" % (counts(s),))
    complete(s, temperature=1.0, verify="coupled")     # its own rule wins
    complete(s, temperature=1.0, seed=11, verify="residual")
    check(counts(s) == (2, 2), "requests naming a rule: %s, want (2, 2)" % (counts(s),))
    complete(s, temperature=0)                         # greedy: not a sampled request
    check(counts(s) == (2, 2), "greedy request counted: %s" % (counts(s),))
    s.stop()

    # The seeded text is the seed's own: the same from a plain server (no drafter at all).
    p = Server()
    check(complete(p, temperature=1.0, seed=11) == a, "seeded text differs between speculative and plain servers")
    p.stop()

    # The operator's --verify covers unseeded requests too.
    for rule, want in (("coupled", (2, 0)), ("residual", (0, 2))):
        o = Server(*spec, "--verify", rule)
        complete(o, temperature=1.0)
        complete(o, temperature=1.0, seed=3)
        check(counts(o) == want, "--verify %s: %s, want %s" % (rule, counts(o), want))
        o.stop()
    if FAILS:
        sys.exit(1)
    print("serve verify rules: ok")


if __name__ == "__main__":
    main()
