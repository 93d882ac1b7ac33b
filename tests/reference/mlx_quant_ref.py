"""Independent numpy implementation of MLX affine quantization, written from the contract
(docs/formats/mlx-affine.md) alone: quantize (fp32, rint = round half to even, the edge
trick), pack (LSB first, little-endian uint32 words), dequantize, bf16/f16 rounding, and a minimal
safetensors reader. Vectorized over rows and groups; no code shared with the C implementation."""

import json
import os
import struct

import numpy as np

F = np.float32


def quantize(w, bits, group_size):
    """w: (rows, cols) float32 -> packed (rows, cols*bits/32) uint32, scales, biases (rows, G) float32."""
    w = np.asarray(w, dtype=F)
    rows, cols = w.shape
    assert cols % group_size == 0
    g = w.reshape(rows, cols // group_size, group_size)
    w_min = g.min(axis=2)
    w_max = g.max(axis=2)
    n_bins = F(2**bits - 1)
    scale = np.maximum((w_max - w_min) / n_bins, F(1e-7)).astype(F)
    use_min = np.abs(w_min) > np.abs(w_max)
    edge = np.where(use_min, w_min, w_max).astype(F)
    scale = np.where(use_min, scale, -scale).astype(F)
    with np.errstate(divide="ignore", invalid="ignore"):
        q0 = np.rint(edge / scale).astype(F)
        nz = q0 != 0
        scale = np.where(nz, edge / np.where(nz, q0, F(1)), scale).astype(F)
        bias = np.where(nz, edge, F(0)).astype(F)
        q = np.rint((g - bias[:, :, None]) / scale[:, :, None]).astype(F)
    q = np.nan_to_num(q, nan=0.0)
    q = np.clip(q, 0, n_bins).astype(np.uint32).reshape(rows, cols)
    return pack(q, bits), scale, bias


def pack(q, bits):
    """q: (rows, cols) uint32 values < 2^bits -> (rows, cols*bits/32) uint32 words."""
    per = 32 // bits
    rows, cols = q.shape
    q = q.reshape(rows, cols // per, per).astype(np.uint64)
    shifts = (np.arange(per, dtype=np.uint64) * bits)[None, None, :]
    return (q << shifts).sum(axis=2).astype(np.uint32)


def unpack(words, bits, cols):
    per = 32 // bits
    rows = words.shape[0]
    shifts = (np.arange(per, dtype=np.uint32) * bits)[None, None, :]
    q = (words[:, :, None] >> shifts) & np.uint32((1 << bits) - 1)
    return q.reshape(rows, -1)[:, :cols]


def dequantize(words, scales, biases, bits, group_size, cols):
    q = unpack(words, bits, cols).astype(F)
    rows = q.shape[0]
    g = q.reshape(rows, cols // group_size, group_size)
    return (scales.astype(F)[:, :, None] * g + biases.astype(F)[:, :, None]).reshape(rows, cols)


def to_bf16_bits(x):
    """float32 -> bf16 bit patterns (uint16), round to nearest even (NaN not expected)."""
    u = np.asarray(x, dtype=F).view(np.uint32).astype(np.uint64)
    u = u + 0x7FFF + ((u >> 16) & 1)
    return (u >> 16).astype(np.uint16)


def from_bf16_bits(h):
    return (np.asarray(h, dtype=np.uint32) << 16).view(F)


_DT = {"F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": ("<u2", 2), "U32": ("<u4", 4), "I32": ("<i4", 4)}


def read_safetensors(path):
    """{name: (dtype string, numpy array as stored; BF16 as uint16 bit patterns)}, metadata."""
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    hdr = json.loads(buf[8:8 + n])
    base = 8 + n
    out = {}
    meta = hdr.pop("__metadata__", {})
    for name, t in hdr.items():
        dt, size = _DT[t["dtype"]]
        b, e = t["data_offsets"]
        out[name] = (t["dtype"], np.frombuffer(buf[base + b:base + e], dtype=dt).reshape(t["shape"]))
    return out, meta


def read_dir(d):
    """All tensors of a directory (model.safetensors or shards through the index)."""
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        files = sorted(set(json.load(open(idx))["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out, meta = {}, {}
    for fn in files:
        t, m = read_safetensors(os.path.join(d, fn))
        out.update(t)
        meta.update(m)
    return out, meta


def as_f32(dtype, a):
    if dtype == "BF16":
        return from_bf16_bits(a)
    return a.astype(F)


def write_safetensors(path, tensors):
    """{name: (dtype string, numpy array as stored; BF16 as uint16 bit patterns)} -> one .safetensors file."""
    header, off, blobs = {}, 0, []
    for name in sorted(tensors):
        dt, a = tensors[name]
        b = np.ascontiguousarray(a, dtype=_DT[dt][0]).tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)
