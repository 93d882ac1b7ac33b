"""dspark serve under hostile load, on loopback only (driven by tests/cli/test_serve_load.sh).

  A. Idle connections (a request line that never ends) cannot make the server unreachable:
     - more idle connections from one address than the per-client limit, and more than the total
       limit: /health from another loopback address is answered at once, the ones over the
       per-client limit are closed at once, and the rest when the header timeout runs out;
     - the total limit filled from several addresses: /health waits at most the header timeout.
  B. A bounded soak (DSPARK_SOAK_SECONDS, default 60): many clients sending a mix of streamed,
     non-streamed and chat completions, streams abandoned mid-way, and malformed requests. Every
     well-formed request succeeds (complete answer, [DONE] and usage for streams), the server's
     RSS stays bounded, and /metrics agrees with what was sent.
Every server is killed on exit, whatever happens; each client loop is bounded in time.
"""
import http.client
import json
import os
import random
import signal
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import FAILS, Server, check  # noqa: E402

SOAK_S = float(os.environ.get("DSPARK_SOAK_SECONDS", "60"))


def idle_conns(port, n, source):
    """n connections from `source` that send half a request line and then nothing."""
    out = []
    for _ in range(n):
        s = socket.socket()
        s.bind((source, 0))
        s.settimeout(5)
        try:
            s.connect(("127.0.0.1", port))
            s.sendall(b"GET /heal")
        except OSError:
            pass  # refused or reset at once: also not held
        out.append(s)
    return out


def closed_by_server(s):
    """Whether the server has closed (or reset) this connection."""
    s.setblocking(False)
    try:
        return s.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def health_time(srv, source, timeout=30):
    t0 = time.time()
    try:
        st, _ = srv.get("/health", source=source, timeout=timeout)
    except OSError:
        st = None
    return st, time.time() - t0


# ---------------------------------------------------------------------------------------------
# A. Idle connections.
A = Server("--schedule", "none", "--max-connections", "64", "--max-per-client", "16", "--header-timeout", "3")
held = idle_conns(A.port, 80, "127.0.0.1")  # more than the per-client (16) and the total (64) limits
st, dt = health_time(A, "127.0.0.2")
check(st == 200 and dt < 2, "/health from another address behind 80 idle connections: %s in %.1f s" % (st, dt))
time.sleep(0.5)
n_closed = sum(closed_by_server(s) for s in held)
check(n_closed >= 80 - 16, "connections over the per-client limit not closed at once: %d of 80 closed" % n_closed)
time.sleep(3 + 2)
n_closed = sum(closed_by_server(s) for s in held)
check(n_closed == 80, "idle connections still open after the header timeout: %d of 80 closed" % n_closed)
for s in held:
    s.close()
st, dt = health_time(A, "127.0.0.1")
check(st == 200 and dt < 2, "/health from the idle client's own address afterwards: %s in %.1f s" % (st, dt))
# The total limit filled from 4 addresses (16 each): the next client waits for the header timeout
# at most (the connection is refused or queued by the kernel until a slot frees).
held = [s for k in range(4) for s in idle_conns(A.port, 16, "127.0.0.%d" % (3 + k))]
time.sleep(0.3)
st, dt = health_time(A, "127.0.0.9", timeout=15)
if st != 200:  # refused at once: retry until the idle ones time out
    t_end = time.time() + 10
    while st != 200 and time.time() < t_end:
        time.sleep(0.2)
        st, _ = health_time(A, "127.0.0.9", timeout=10)
    dt = 10 - (t_end - time.time())
check(st == 200 and dt < 3 + 4, "/health with the total limit filled: %s after %.1f s (header timeout 3 s)" % (st, dt))
for s in held:
    s.close()
check(A.metrics().get('dspark_http_responses_total{code="5xx"}', 0) == 0, "5xx answers in part A")
A.p.send_signal(signal.SIGTERM)
check(A.p.wait(30) == 0, "server A exit status after SIGTERM")

# The reproducer against the defaults (256 connections, 64 per client): 300 idle
# connections from one address; /health from another is answered at once.
D = Server("--schedule", "none")
held = idle_conns(D.port, 300, "127.0.0.1")
st, dt = health_time(D, "127.0.0.2")
check(st == 200 and dt < 2, "defaults: /health behind 300 idle connections: %s in %.1f s" % (st, dt))
for s in held:
    s.close()
D.p.send_signal(signal.SIGTERM)
check(D.p.wait(30) == 0, "server D exit status after SIGTERM")

# ---------------------------------------------------------------------------------------------
# B. The soak.
MAX_BODY = 4096
B = Server("--schedule", "none", "--max-concurrency", "8", "--queue", "256", "--max-body", str(MAX_BODY))
PROMPTS = ["Once upon a time", "The cat", "Lily and Ben went to the park", "One day, a little bird"]
N_PROMPT, PROBE_COMPLETION = {}, 0
for p in PROMPTS:  # prompt lengths in tokens, from the server itself
    c = http.client.HTTPConnection("127.0.0.1", B.port, timeout=60)
    c.request("POST", "/v1/completions", body=json.dumps({"prompt": p, "max_tokens": 1}).encode(),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    usage = json.loads(r.read())["usage"]
    N_PROMPT[p] = usage["prompt_tokens"]
    PROBE_COMPLETION += usage["completion_tokens"]
    c.close()

lock = threading.Lock()
tally = {"ok": 0, "fail": 0, "cancel": 0, "bad400": 0, "bad413": 0, "e404": 0, "e405": 0, "garbage": 0,
         "gets": 0, "prompt_known": 0, "prompt_cancel": 0, "completion_known": 0}
fail_msgs = []


def add(**kw):
    with lock:
        for k, v in kw.items():
            tally[k] += v


def fail(msg):
    with lock:
        tally["fail"] += 1
        if len(fail_msgs) < 10:
            fail_msgs.append(msg)


def post(path, body, timeout=120):
    c = http.client.HTTPConnection("127.0.0.1", B.port, timeout=timeout)
    try:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        c.request("POST", path, body=data, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def well_formed(rng):
    chat = rng.random() < 0.3
    stream = rng.random() < 0.5
    p = rng.choice(PROMPTS)
    body = {"max_tokens": rng.randint(1, 24), "stream": stream}
    if rng.random() < 0.5:
        body.update(temperature=0.8, seed=rng.randint(0, 1 << 30), top_k=rng.choice([0, 20]))
    else:
        body["temperature"] = 0
    if rng.random() < 0.2:
        body["stop"] = [rng.choice(["\n", ".", " the"])]
    if stream:
        body["stream_options"] = {"include_usage": True}
    if chat:
        body["messages"] = [{"role": "user", "content": p}]
        path = "/v1/chat/completions"
    else:
        body["prompt"] = p
        path = "/v1/completions"
    st, b = post(path, body)
    if st != 200:
        return fail("%s %s: status %d %r" % (path, body, st, b[:200]))
    if stream:
        lines = [ln for ln in b.decode().split("\n") if ln.startswith("data: ")]
        if not lines or lines[-1] != "data: [DONE]":
            return fail("stream without [DONE]: %r" % b[-200:])
        ev = [json.loads(ln[6:]) for ln in lines[:-1]]
        if any("error" in e for e in ev) or "usage" not in ev[-1]:
            return fail("stream error or no usage: %r" % b[-300:])
        usage = ev[-1]["usage"]
    else:
        o = json.loads(b)
        if "choices" not in o:
            return fail("no choices: %r" % b[:200])
        usage = o["usage"]
    if not chat and usage["prompt_tokens"] != N_PROMPT[p]:
        return fail("prompt tokens %d, expected %d" % (usage["prompt_tokens"], N_PROMPT[p]))
    add(ok=1, prompt_known=usage["prompt_tokens"], completion_known=usage["completion_tokens"])


def cancelled(rng):
    """A stream abandoned after its first event."""
    p = rng.choice(PROMPTS)
    b = json.dumps({"prompt": p, "max_tokens": 200, "stream": True})
    s = socket.create_connection(("127.0.0.1", B.port), timeout=120)
    try:
        s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   "Content-Length: %d\r\n\r\n%s" % (len(b), b)).encode())
        buf = b""
        while b"data: " not in buf:
            d = s.recv(4096)
            if not d:
                return fail("cancelled stream: closed before the first event: %r" % buf[:200])
            buf += d
        if not buf.startswith(b"HTTP/1.1 200"):
            return fail("cancelled stream: %r" % buf[:100])
    finally:
        s.close()
    add(cancel=1, prompt_cancel=N_PROMPT[p])


def malformed(rng):
    k = rng.randrange(6)
    if k == 0:
        st, _ = post("/v1/completions", rng.choice([b"{bad", b"", b"[1,2]", b'{"prompt": 5}', b'{"prompt": "x", "max_tokens": -1}',
                                                    b'{"messages": "hi"}']))
        return add(bad400=1) if st == 400 else fail("malformed body: status %d" % st)
    if k == 1:
        st, _ = post("/v1/completions", b'{"prompt": "' + b"a" * (MAX_BODY + 10) + b'"}')
        return add(bad413=1) if st == 413 else fail("oversized body: status %d" % st)
    if k == 2:
        st, _ = B.get("/v1/nope")
        return add(e404=1) if st == 404 else fail("unknown endpoint: status %d" % st)
    if k == 3:
        st, _ = B.get("/v1/completions")
        return add(e405=1) if st == 405 else fail("GET on a POST endpoint: status %d" % st)
    # Not HTTP at all, or headers cut off: libmicrohttpd answers (or closes) on its own.
    s = socket.create_connection(("127.0.0.1", B.port), timeout=30)
    try:
        s.sendall(b"\x00\xff garbage\r\n\r\n" if k == 4 else b"POST /v1/completions HTTP/1.1\r\nContent-Le")
        if k == 4:
            s.recv(4096)
    except OSError:
        pass
    finally:
        s.close()
    add(garbage=1)


def client(i, t_end):
    rng = random.Random(1000 + i)
    while time.time() < t_end:
        r = rng.random()
        try:
            if r < 0.70:
                well_formed(rng)
            elif r < 0.80:
                cancelled(rng)
            else:
                malformed(rng)
        except Exception as e:  # noqa: BLE001 (a well-formed request must never fail this way)
            fail("client %d: %r" % (i, e))


rss = []
t0 = time.time()
t_end = t0 + SOAK_S
threads = [threading.Thread(target=client, args=(i, t_end)) for i in range(12)]
for t in threads:
    t.start()
while time.time() < t_end:
    rss.append((time.time() - t0, B.rss_kb()))
    B.metrics()  # scraped under load too
    add(gets=1)
    time.sleep(1)
for t in threads:
    t.join(300)
check(not any(t.is_alive() for t in threads), "soak clients did not finish")

# Cancelled streams leave the engine at its next round: wait for it to be idle.
deadline = time.time() + 60
while True:
    m = B.metrics()
    add(gets=1)
    if (m["dspark_queue_depth"] == 0 and m["dspark_active_requests"] == 0) or time.time() > deadline:
        break
    time.sleep(0.2)
m = B.metrics()  # (this scrape counts itself only after rendering)
T = tally
print("soak: %.0f s, %d ok, %d cancelled, %d malformed/404/405/413, %d garbage, %d failed; RSS %d -> %d kB" % (
    SOAK_S, T["ok"], T["cancel"], T["bad400"] + T["bad413"] + T["e404"] + T["e405"], T["garbage"], T["fail"],
    rss[0][1] if rss else 0, rss[-1][1] if rss else 0), flush=True)
check(T["fail"] == 0, "%d well-formed requests failed: %s" % (T["fail"], fail_msgs))
check(T["ok"] >= 12 and T["cancel"] >= 1 and T["bad400"] >= 1, "soak too small to mean anything: %s" % T)
accepted = T["ok"] + T["cancel"] + len(PROMPTS)  # (the prompt-length probes too)
check(m["dspark_requests_total"] == accepted, "requests_total %g, sent %d" % (m["dspark_requests_total"], accepted))
check(m["dspark_requests_invalid_total"] == T["bad400"] + T["bad413"],
      "requests_bad %g, sent %d" % (m["dspark_requests_invalid_total"], T["bad400"] + T["bad413"]))
check(m["dspark_requests_rejected_total"] == 0, "503s with a queue larger than the clients")
fin = {r: m['dspark_requests_finished_total{reason="%s"}' % r] for r in ("stop", "length", "cancelled", "error")}
check(sum(fin.values()) == accepted and fin["error"] == 0, "finished %s, accepted %d" % (fin, accepted))
check(fin["cancelled"] <= T["cancel"], "more cancelled (%g) than abandoned (%d)" % (fin["cancelled"], T["cancel"]))
# Prompt tokens count when a request is admitted (an abandoned one may be dropped while queued).
known = T["prompt_known"] + sum(N_PROMPT.values())
check(known <= m["dspark_prompt_tokens_total"] <= known + T["prompt_cancel"],
      "prompt tokens %g, sent %d + %d abandoned" % (m["dspark_prompt_tokens_total"], known, T["prompt_cancel"]))
known = T["completion_known"] + PROBE_COMPLETION
check(known <= m["dspark_completion_tokens_total"] <= known + 200 * T["cancel"],
      "completion tokens %g, answered %d" % (m["dspark_completion_tokens_total"], known))
codes = {c: m.get('dspark_http_responses_total{code="%s"}' % c, 0) for c in ("2xx", "4xx", "5xx")}
want2 = accepted + T["gets"]  # every earlier scrape (the last counts itself after rendering)
want4 = T["bad400"] + T["bad413"] + T["e404"] + T["e405"]
check(codes == {"2xx": want2, "4xx": want4, "5xx": 0}, "responses by class %s, expected 2xx %d 4xx %d" % (codes, want2, want4))
# RSS: after the first quarter (arenas, caches, the thread stacks warmed up) it stays flat.
if check(len(rss) >= 8, "too few RSS samples"):
    warm = max(v for t, v in rss[: len(rss) // 4])
    late = max(v for t, v in rss[3 * len(rss) // 4:])
    check(late <= warm * 1.25 + 16 * 1024, "RSS grew from %d kB to %d kB" % (warm, late))
st, _ = B.get("/health")
check(st == 200, "/health after the soak: %d" % st)
B.p.send_signal(signal.SIGTERM)
check(B.p.wait(60) == 0, "server B exit status after SIGTERM")

print("serve_load: %d failures" % len(FAILS) if FAILS else "serve_load: all checks passed")
sys.exit(1 if FAILS else 0)
