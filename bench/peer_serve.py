#!/usr/bin/python3
"""Speculative decoding next to llama.cpp's, through each engine's own OpenAI-compatible server
(scripts/bench_peer.sh runs it; it can also run alone):

    bench/peer_serve.py --engine dspark|llama.cpp --label NAME --port P --prompts FILE
                        [--conc R] [--max-tokens N] [--temp T] [--seed S] [--repeat K] -- SERVER_COMMAND...

It starts SERVER_COMMAND (which must listen on 127.0.0.1:P), waits for /health, sends every prompt
of FILE to /v1/completions (R at a time, max_tokens N, the given temperature; with T > 0 each
prompt i gets seed S + i), stops the server, and prints one JSON line: tokens generated, wall
seconds from the first request to the last answer, tokens per second, and each prompt's text (so
that runs can be compared for identity). The same client, prompts and counting for both engines;
prefill is inside the wall time of both. Progress on stderr."""

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request


def post(port, path, body, timeout=600):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def wait_health(port, proc, timeout=300):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            sys.exit("peer_serve: the server exited (%d) before answering /health" % proc.returncode)
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=5) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.5)
    sys.exit("peer_serve: no /health answer in %d s" % timeout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", required=True)
    ap.add_argument("--label", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--conc", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--temp", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--log", default=os.devnull)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    prompts = [ln.rstrip("\n") for ln in open(a.prompts, encoding="utf-8") if ln.strip()]
    log = open(a.log, "ab")
    proc = subprocess.Popen(cmd, stdout=log, stderr=log, start_new_session=True)
    try:
        wait_health(a.port, proc)
        # one short warm-up request (page faults of the mapped weights, the server's first-request work)
        post(a.port, "/v1/completions", {"prompt": prompts[0], "max_tokens": 4, "temperature": 0})
        texts, tokens = [None] * len(prompts), [0] * len(prompts)
        nxt, lock = [0], threading.Lock()

        def worker():
            while True:
                with lock:
                    i = nxt[0]
                    nxt[0] += 1
                if i >= len(prompts):
                    return
                body = {"prompt": prompts[i], "max_tokens": a.max_tokens, "temperature": a.temp}
                if a.temp > 0:
                    body["seed"] = a.seed + i
                r = post(a.port, "/v1/completions", body)
                texts[i] = r["choices"][0]["text"]
                tokens[i] = r["usage"]["completion_tokens"]

        t0 = time.time()
        ths = [threading.Thread(target=worker) for _ in range(a.conc)]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        wall = time.time() - t0
        if any(t is None for t in texts):
            sys.exit("peer_serve: a request failed")
        n = sum(tokens)
        print(json.dumps({"bench": "peer_spec", "engine": a.engine, "label": a.label, "conc": a.conc,
                          "temp": a.temp, "repeat": a.repeat, "prompts": len(prompts), "tokens": n,
                          "wall_s": wall, "tok_per_s": n / wall, "texts": texts}), flush=True)
        print("peer_serve: %s %s: %d tokens in %.1f s (%.2f tok/s)" % (a.engine, a.label, n, wall, n / wall),
              file=sys.stderr)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)
        except Exception:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


if __name__ == "__main__":
    main()
