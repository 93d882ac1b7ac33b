#!/usr/bin/python3
"""Damaged GGUF files get one clear line, never a crash or a silent wrong answer.

Each case patches a copy of a fixture llama.cpp wrote (../shared/models/gguf-fixtures): the header
is parsed here (independently of dspark, from the GGUF layout: magic, version, counts, metadata,
tensor infos) to find the byte to change. `dspark generate` on the copy must exit with status 1 and
print exactly one line on stderr that names the file and the problem (and the tensor, where one is
at fault):
  - a file cut short inside a tensor's data (the last tensor of the file);
  - a K-quant tensor whose row length is not a whole number of 256-element super-blocks;
  - a tensor whose row count is raised so its blocks run past the end of the file;
  - a tensor of a type id ggml has never had, and one of a real ggml type dspark does not run
    (IQ2_XXS: named);
  - no general.architecture key, and an architecture dspark does not know.
"""

import os
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

FIXTURES = os.path.join(common.shared_dir(), "models", "gguf-fixtures")
SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


class Header:
    """Positions inside a GGUF header: key -> (key offset, value offset), tensor -> field offsets."""

    def __init__(self, buf):
        self.buf = buf
        p = 4 + 4
        n_tensors, n_kv = struct.unpack_from("<QQ", buf, p)
        p += 16
        self.keys = {}
        for _ in range(n_kv):
            key_at = p
            key, p = self._str(p)
            vtype = struct.unpack_from("<I", buf, p)[0]
            p += 4
            self.keys[key] = (key_at, p, vtype)
            p = self._skip(vtype, p)
        self.tensors = {}
        for _ in range(n_tensors):
            name, p = self._str(p)
            n_dims = struct.unpack_from("<I", buf, p)[0]
            ne_at = p + 4
            ne = list(struct.unpack_from(f"<{n_dims}Q", buf, ne_at))
            type_at = ne_at + 8 * n_dims
            t, off = struct.unpack_from("<IQ", buf, type_at)
            self.tensors[name] = {"ne": ne, "ne_at": ne_at, "type": t, "type_at": type_at, "offset": off}
            p = type_at + 12
        align = 32
        if "general.alignment" in self.keys:
            align = struct.unpack_from("<I", buf, self.keys["general.alignment"][1])[0]
        self.data_start = (p + align - 1) // align * align

    def _str(self, p):
        n = struct.unpack_from("<Q", self.buf, p)[0]
        return self.buf[p + 8: p + 8 + n].decode("utf-8"), p + 8 + n

    def _skip(self, vtype, p):
        if vtype in SCALAR:
            return p + SCALAR[vtype]
        if vtype == 8:
            return self._str(p)[1]
        if vtype == 9:
            et, n = struct.unpack_from("<IQ", self.buf, p)
            p += 12
            for _ in range(n):
                p = self._skip(et, p)
            return p
        raise ValueError(f"unknown metadata type {vtype}")


def patched(src, name, edit):
    """A copy of fixture `src` with edit(bytearray, Header) applied, in the test's scratch dir."""
    with open(os.path.join(FIXTURES, src), "rb") as f:
        buf = bytearray(f.read())
    out = os.path.join(common.tmp_dir(), f"bad_{name}_{os.getpid()}.gguf")
    buf = edit(buf, Header(bytes(buf))) or buf
    with open(out, "wb") as f:
        f.write(buf)
    return out


def expect_error(chk, label, path, *needles):
    p = subprocess.run([common.tool("dspark"), "generate", "-m", path, "-p", "Once", "-n", "2"],
                       capture_output=True, text=True, timeout=120)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    ok = chk.equal(f"{label}: exit status", p.returncode, 1)
    ok &= chk.equal(f"{label}: one line on stderr", len(lines), 1)
    msg = lines[0] if lines else ""
    for needle in (path, *needles):
        ok &= chk.equal(f"{label}: the message names {needle!r} ({msg!r})", needle in msg, True)
    os.remove(path)
    return ok


def main():
    chk = common.Checker("gguf_bad")

    def cut_last(buf, h):
        last = max(h.tensors.values(), key=lambda t: t["offset"])
        name = next(k for k, v in h.tensors.items() if v is last)
        cut_last.name = name
        return buf[: h.data_start + last["offset"] + 10]

    path = patched("llama-tiny/Q4_K_M.gguf", "cut", cut_last)
    expect_error(chk, "truncated tensor", path, cut_last.name)

    def ne0_255(buf, h):
        t = h.tensors["blk.0.attn_q.weight"]
        struct.pack_into("<Q", buf, t["ne_at"], 255)

    expect_error(chk, "row length not whole super-blocks", patched("llama-tiny/Q4_K_M.gguf", "ne0", ne0_255),
                 "blk.0.attn_q.weight", "256")

    def rows_past_end(buf, h):
        t = h.tensors["blk.0.attn_q.weight"]
        struct.pack_into("<Q", buf, t["ne_at"] + 8, t["ne"][1] * 1000)

    expect_error(chk, "blocks past the end", patched("llama-tiny/Q4_K_M.gguf", "rows", rows_past_end),
                 "blk.0.attn_q.weight")

    def type_99(buf, h):
        struct.pack_into("<I", buf, h.tensors["blk.1.ffn_up.weight"]["type_at"], 99)

    expect_error(chk, "unknown type id", patched("llama-tiny/Q4_K_M.gguf", "t99", type_99),
                 "blk.1.ffn_up.weight", "99")

    def type_iq2(buf, h):
        struct.pack_into("<I", buf, h.tensors["blk.1.ffn_up.weight"]["type_at"], 16)

    expect_error(chk, "unsupported ggml type", patched("llama-tiny/Q4_K_M.gguf", "iq2", type_iq2),
                 "blk.1.ffn_up.weight", "IQ2_XXS")

    def no_arch(buf, h):
        key_at = h.keys["general.architecture"][0]
        buf[key_at + 8: key_at + 8 + len("general.architecture")] = b"general.architecturX"

    expect_error(chk, "no architecture key", patched("llama-tiny/Q8_0.gguf", "noarch", no_arch),
                 "general.architecture")

    def odd_arch(buf, h):
        val_at = h.keys["general.architecture"][1]
        buf[val_at + 8: val_at + 8 + 5] = b"llamX"

    expect_error(chk, "unknown architecture", patched("llama-tiny/Q8_0.gguf", "oddarch", odd_arch), "llamX")
    chk.finish()


if __name__ == "__main__":
    main()
