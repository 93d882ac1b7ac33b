#!/usr/bin/python3
"""dspark serve is event-driven: idle connections hold no thread (issue 26, item 3).

On loopback only: 2,000 idle TCP connections (connected, nothing sent) spread over the source
addresses 127.0.0.2-127.0.0.250 (a few per address, under the per-client limit) plus 200
slow-header clients (half a request line, then nothing). While the server holds all of them
(its sockets from those addresses are counted: /proc/PID/fd and
/proc/net/tcp):
  - /health, a greedy /v1/completions and the same request streamed (the streamed text must equal
    the non-streamed one) from 127.0.0.1 answer, and so do 8 streamed + 8 non-streamed requests at
    once; each request gets a generous 10 s (a liveness bound for a loaded 2-core machine, not a
    speed measurement: a thread-per-connection server with its limit filled does not answer at all);
  - the server has few threads (/proc/PID/status Threads < 64: with a thread per connection it has
    over 2,200) and its RSS grows by less than 200 MB (VmRSS);
  - none of the held connections was closed by the server (the header timeout is set long).
Then they are closed: the server closes its ends, it still serves, and it exits 0
on SIGTERM. A second server is stopped (SIGTERM, drain timeout 1 s) while 4 requests wait for a
slow engine with their connections suspended: each is answered as cut off and the server exits 0. The test raises its own open-file limit (resource) and skips, saying why, only when the
hard limit is too low.

    test_serve_idle.py
"""
import http.client
import json
import os
import resource
import signal
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

N_IDLE, N_SLOW = 2000, 200
SOURCES = ["127.0.0.%d" % k for k in range(2, 251)]  # 249 addresses: at most 9 connections each
PER_CLIENT = 64
MAX_CONN = 2400
BOUND_S = 10  # per request (see the docstring)
PROMPT = {"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0}


def proc_status(pid):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            out[k] = v.strip()
    return int(out["Threads"]), int(out["VmRSS"].split()[0])  # threads, kB


def n_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def n_held_by_server(pid, port):
    """The server's open sockets on `port` whose peer is not 127.0.0.1 (nor the listening socket: the held connections'
    server ends: /proc/PID/fd socket inodes matched against /proc/net/tcp)."""
    inodes = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    held = set()  # (by inode: /proc/net/tcp read while other processes' sockets change may repeat a line)
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            col = line.split()
            local, remote, inode = col[1], col[2], col[9]
            if int(local.split(":")[1], 16) == port and remote.split(":")[0] not in ("0100007F", "00000000") and inode in inodes:
                held.add(inode)
    return len(held)


def wait_for(pred, timeout):
    """Poll pred() until it is true or `timeout` seconds pass; returns its last value."""
    t_end = time.time() + timeout
    while True:
        v = pred()
        if v or time.time() > t_end:
            return v
        time.sleep(0.05)


def get(port, path):
    """(status, body); (-1, the error) when the server resets, closes or does not answer in time."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=BOUND_S)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()
    except (OSError, http.client.HTTPException) as e:
        return -1, repr(e).encode()
    finally:
        c.close()


def complete(port, stream):
    """POST PROMPT to /v1/completions: (status, text) with the stream's deltas joined."""
    body = dict(PROMPT, stream=stream)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=BOUND_S)
    try:
        c.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        raw = r.read().decode()
    except (OSError, http.client.HTTPException) as e:
        return -1, repr(e)
    finally:
        c.close()
    if r.status != 200:
        return r.status, raw
    if not stream:
        return 200, json.loads(raw)["choices"][0]["text"]
    events = [e[6:] for e in raw.split("\n\n") if e.startswith("data: ")]
    if not events or events[-1] != "[DONE]":
        return -1, "stream without [DONE]: %r" % raw[-200:]
    text = "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1] if json.loads(e)["choices"])
    return 200, text


def main():
    need = N_IDLE + N_SLOW + 300
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < need:
        print("SKIP: the hard open-file limit (%d) is below the %d this test needs (raise ulimit -Hn)" % (hard, need))
        return 0
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # (the server inherits it)
    chk = common.Checker("serve_idle")
    log = os.path.join(common.tmp_dir(), "serve_idle_%d.log" % os.getpid())
    srv, port = common.start_server(["-m", common.stories_model(), "--schedule", "none", "--max-connections", str(MAX_CONN),
                                     "--max-per-client", str(PER_CLIENT), "--header-timeout", "600"], log)

    def on_alarm(*_):
        srv.kill()
        common.fail("timed out (240 s): " + open(log).read()[-2000:])

    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(240)
    try:
        held_and_after(srv, port, chk)
    finally:
        signal.alarm(0)
        if srv.poll() is None:
            srv.kill()
    log = os.path.join(common.tmp_dir(), "serve_idle_stop_%d.log" % os.getpid())
    srv, port = common.start_server(["-m", common.stories_model(), "--schedule", "none", "--step-delay-ms", "100",
                                     "--max-concurrency", "2", "--drain-timeout", "1"], log)
    signal.alarm(240)
    try:
        stop_while_suspended(srv, port, chk)
    finally:
        signal.alarm(0)
        if srv.poll() is None:
            srv.kill()
    chk.finish()


def metric(port, name):
    st, body = get(port, "/metrics")
    for line in body.decode(errors="replace").splitlines() if st == 200 else []:
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def stop_while_suspended(srv, port, chk):
    """SIGTERM with requests waiting for a slow engine (their connections suspended: 2 running, 2
    queued, streamed and not) and 50 idle connections: once the drain timeout runs out they are
    answered as cut off (503 / an error event and [DONE]) and the server exits 0."""
    idle = []
    for k in range(50):
        s = socket.socket()
        s.bind((SOURCES[k], 0))
        s.settimeout(BOUND_S)
        s.connect(("127.0.0.1", port))
        idle.append(s)
    results = []

    def one(stream):
        body = {"prompt": "Once upon a time", "max_tokens": 200, "stream": stream}
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            c.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
            r = c.getresponse()
            raw = r.read().decode()
            results.append((stream, r.status, raw))
        except (OSError, http.client.HTTPException) as e:
            results.append((stream, -1, repr(e)))
        finally:
            c.close()

    ts = [threading.Thread(target=one, args=(k % 2 == 0,)) for k in range(4)]
    for t in ts:
        t.start()
    started = wait_for(lambda: (metric(port, "dspark_active_requests") or 0) + (metric(port, "dspark_queue_depth") or 0) >= 4, 30)
    chk.equal("4 requests in the server before SIGTERM", bool(started), True)
    srv.send_signal(signal.SIGTERM)
    for t in ts:
        t.join(60)
    chk.equal("exit status after SIGTERM with suspended connections", srv.wait(60), 0)
    for stream, st, raw in sorted(results):
        if stream:
            ok = st == 200 and "shutting down" in raw and raw.endswith("data: [DONE]\n\n")
        else:
            ok = st == 503 and "shutting down" in raw
        chk.equal("a %s request cut off by the shutdown (%d %r)" % ("streamed" if stream else "non-streamed", st, raw[-120:]),
                  ok, True)
    chk.equal("requests answered", len(results), 4)
    for s in idle:
        s.close()


def held_and_after(srv, port, chk):
    held = []
    try:
        st, _ = get(port, "/health")
        chk.equal("/health before", st, 200)
        st, want = complete(port, False)
        chk.equal("a completion before", st, 200)
        threads0, rss0 = proc_status(srv.pid)
        fds0 = n_fds(srv.pid)
        for k in range(N_IDLE + N_SLOW):
            s = socket.socket()
            s.bind((SOURCES[k % len(SOURCES)], 0))
            s.settimeout(BOUND_S)
            s.connect(("127.0.0.1", port))
            if k >= N_IDLE:
                s.sendall(b"POST /v1/compl")  # a slow header: half a request line, then nothing
            held.append(s)
        counts = []  # (a read may also miss lines: the largest count seen)
        wait_for(lambda: counts.append(n_held_by_server(srv.pid, port)) or counts[-1] >= N_IDLE + N_SLOW, 30)
        chk.equal("connections the server holds (accepted, open)", max(counts), N_IDLE + N_SLOW)

        t0 = time.time()
        st, body = get(port, "/health")
        chk.equal("/health with the connections held", (st, body), (200, b'{"status":"ok"}'))
        st, text = complete(port, False)
        chk.equal("a completion with the connections held", (st, text), (200, want))
        st, text = complete(port, True)
        chk.equal("a streamed completion with the connections held: the same text", (st, text), (200, want))
        results = []

        def one(stream):
            results.append(complete(port, stream))

        ts = [threading.Thread(target=one, args=(k % 2 == 0,)) for k in range(16)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(4 * BOUND_S)
        chk.equal("16 requests at once (8 streamed) with the connections held", results, [(200, want)] * 16)
        print("requests while %d connections are held: %.1f s" % (N_IDLE + N_SLOW, time.time() - t0))

        threads, rss = proc_status(srv.pid)
        print("server: %d -> %d threads, VmRSS %d -> %d kB, %d -> %d open files" % (threads0, threads, rss0, rss, fds0, n_fds(srv.pid)))
        chk.equal("server threads with %d connections held < 64 (got %d)" % (N_IDLE + N_SLOW, threads), threads < 64, True)
        chk.equal("server RSS growth < 200 MB (%d kB)" % (rss - rss0), rss - rss0 < 200 * 1024, True)
        closed = 0
        for s in held:
            s.setblocking(False)
            try:
                closed += s.recv(1) == b""
            except BlockingIOError:
                pass
            except OSError:
                closed += 1
        chk.equal("held connections the server closed", closed, 0)
    finally:
        for s in held:
            s.close()
    # (120 s: once, in CI with the other tests beside it, 1280 of the 2200 were still held after 30 s;
    # alone the release takes well under a second. The time is printed so a slow release shows.)
    t0 = time.time()
    wait_for(lambda: n_held_by_server(srv.pid, port) == 0, 120)
    print("closed connections released by the server in %.1f s" % (time.time() - t0))
    chk.equal("connections the server still holds after they were closed", n_held_by_server(srv.pid, port), 0)
    st, _ = get(port, "/health")
    chk.equal("/health afterwards", st, 200)
    chk.equal("a completion afterwards", complete(port, False), (200, want))
    chk.equal("a streamed completion afterwards", complete(port, True), (200, want))
    srv.send_signal(signal.SIGTERM)
    chk.equal("exit status after SIGTERM", srv.wait(60), 0)


if __name__ == "__main__":
    sys.exit(main())
