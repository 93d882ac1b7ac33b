"""What the dspark serve tests share: starting servers on free loopback ports (--port 0; the port
is read from stderr), talking HTTP to them, recording failed checks, and killing every server on
exit whatever happens. Used by test_serve_client.py and test_serve_load.py."""
import atexit
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

BIN = os.path.join(os.environ["DSPARK_BIN"], "dspark")
SHARED = os.environ["DSPARK_SHARED"]
MODEL = os.path.join(SHARED, "models/stories260K/stories260K.gguf")
TMP = tempfile.mkdtemp(prefix="serve.", dir=os.environ.get("DSPARK_TMP", "/tmp"))
SERVERS = []
FAILS = []


def check(cond, msg):
    if not cond:
        FAILS.append(msg)
        print("FAIL:", msg, flush=True)
    return cond


class Server:
    def __init__(self, *args, env=None):
        self.log = os.path.join(TMP, "server%d.log" % len(SERVERS))
        self.err = open(self.log, "w")
        cmd = [BIN, "serve", "-m", MODEL, "--port", "0", "-t", "1", *args]
        # Under the ASan build a small quarantine keeps RSS about the server, not about freed memory
        # held back for use-after-free checks (the option means nothing to other builds).
        env = dict(os.environ, **(env or {}), ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") + ":quarantine_size_mb=16")
        self.p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.err, env=env)
        SERVERS.append(self)
        deadline = time.time() + 120
        while True:
            m = re.search(r"on http://127\.0\.0\.1:(\d+) ", open(self.log).read())
            if m:
                self.port = int(m.group(1))
                return
            if self.p.poll() is not None or time.time() > deadline:
                raise RuntimeError("server did not start: " + open(self.log).read())
            time.sleep(0.05)

    def conn(self, timeout=60, source="127.0.0.1"):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout, source_address=(source, 0))

    def get(self, path, source="127.0.0.1", timeout=30):
        """(status, body) of a GET from `source` (any loopback address)."""
        c = self.conn(timeout, source)
        try:
            c.request("GET", path)
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def rss_kb(self):
        for line in open("/proc/%d/status" % self.p.pid):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def request(self, method, path, body=None, raw=None):
        c = self.conn()
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        c.request(method, path, body=data, headers={"Content-Type": "application/json"} if data is not None else {})
        r = c.getresponse()
        b = r.read()
        c.close()
        return r.status, b

    def post(self, path, body=None, raw=None):
        st, b = self.request("POST", path, body, raw)
        try:
            return st, json.loads(b)
        except ValueError:
            return st, {"unparsable": b.decode("utf-8", "replace")}

    def stream(self, path, body):
        """Returns (events as parsed JSON, saw [DONE])."""
        c = self.conn()
        c.request("POST", path, body=json.dumps(dict(body, stream=True)).encode(), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        check(r.status == 200 and r.getheader("Content-Type", "").startswith("text/event-stream"), "stream status/type %d %s" % (r.status, r.getheader("Content-Type")))
        events, done = [], False
        for line in r:
            line = line.decode().rstrip("\n")
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                continue
            check(not done, "an event after [DONE]")
            events.append(json.loads(line[6:]))
        c.close()
        return events, done

    def metrics(self):
        st, b = self.request("GET", "/metrics")
        check(st == 200, "/metrics status %d" % st)
        out = {}
        for line in b.decode().splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out

    def stop(self, sig=signal.SIGTERM, timeout=30):
        self.p.send_signal(sig)
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            return None


def cleanup():
    for s in SERVERS:
        if s.p.poll() is None:
            s.p.kill()
            s.p.wait()
    shutil.rmtree(TMP, ignore_errors=True)


atexit.register(cleanup)
