"""An independent numpy dequantizer for ggml's block types (GGUF tensor types 2, 3, 6, 7, 8, 10-14, 20, 23).

Written from ggml's block layouts (ggml-common.h) and dequantization formulas (ggml-quants.c
dequantize_row_*), in float32 with ggml's operation order (each product / sum rounded to float32,
no fused multiply-add), so the result is bit-exact with ggml's reference dequantization.

    dequantize(type_id, raw_bytes) -> float32 array (n_blocks * block_elems)
    BLOCK[type_id] = (elements per block, bytes per block)
"""

import numpy as np

QK_K = 256
F32 = np.float32

BLOCK = {2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 20: (32, 18),
         10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 23: (256, 136)}
NAMES = {2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 20: "IQ4_NL",
         10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 23: "IQ4_XS"}
KVALUES_IQ4NL = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.int32)


def _f16(a):
    """Little-endian f16 bit patterns (uint16) -> float32 (exact)."""
    return np.asarray(a, dtype="<u2").view("<f2").astype(F32)


def _blocks(raw, dtype):
    return np.frombuffer(bytes(raw), dtype=dtype)


def _nibbles32(qs):
    """(nb, 16) bytes -> (nb, 32) ints: the low nibbles are elements 0..15, the high ones 16..31."""
    qs = qs.astype(np.int32)
    return np.concatenate([qs & 15, qs >> 4], axis=1)


def _fifth_bits(qh):
    """(nb, 4) bytes -> (nb, 32): bit j of the little-endian u32 for element j."""
    u = (qh[:, 0].astype(np.uint32) | qh[:, 1].astype(np.uint32) << 8 | qh[:, 2].astype(np.uint32) << 16
         | qh[:, 3].astype(np.uint32) << 24)
    return ((u[:, None] >> np.arange(32, dtype=np.uint32)) & 1).astype(np.int32)


def q4_0(raw):
    b = _blocks(raw, np.dtype([("d", "<u2"), ("qs", "u1", 16)]))
    return ((_nibbles32(b["qs"]) - 8).astype(F32) * _f16(b["d"])[:, None]).reshape(-1)


def q4_1(raw):
    b = _blocks(raw, np.dtype([("d", "<u2"), ("m", "<u2"), ("qs", "u1", 16)]))
    return (_nibbles32(b["qs"]).astype(F32) * _f16(b["d"])[:, None] + _f16(b["m"])[:, None]).reshape(-1)


def q5_0(raw):
    b = _blocks(raw, np.dtype([("d", "<u2"), ("qh", "u1", 4), ("qs", "u1", 16)]))
    q = _nibbles32(b["qs"]) | (_fifth_bits(b["qh"]) << 4)
    return ((q - 16).astype(F32) * _f16(b["d"])[:, None]).reshape(-1)


def q5_1(raw):
    b = _blocks(raw, np.dtype([("d", "<u2"), ("m", "<u2"), ("qh", "u1", 4), ("qs", "u1", 16)]))
    q = _nibbles32(b["qs"]) | (_fifth_bits(b["qh"]) << 4)
    return (q.astype(F32) * _f16(b["d"])[:, None] + _f16(b["m"])[:, None]).reshape(-1)


def q8_0(raw):
    b = _blocks(raw, np.dtype([("d", "<u2"), ("qs", "i1", 32)]))
    return (b["qs"].astype(F32) * _f16(b["d"])[:, None]).reshape(-1)


def iq4_nl(raw):
    b = _blocks(raw, np.dtype([("d", "<u2"), ("qs", "u1", 16)]))
    return (_f16(b["d"])[:, None] * KVALUES_IQ4NL[_nibbles32(b["qs"])].astype(F32)).reshape(-1)


def _two_bit_planes(qs):
    """(nb, 64) bytes of 2-bit quants -> (nb, 256): per half h, plane j (bits 2j..2j+1) of bytes 32h..32h+31
    are elements 128h + 32j .. 128h + 32j + 31."""
    nb = qs.shape[0]
    q = qs.reshape(nb, 2, 1, 32).astype(np.int32)
    return ((q >> (2 * np.arange(4)).reshape(1, 1, 4, 1)) & 3).reshape(nb, 256)


def q2_k(raw):
    b = _blocks(raw, np.dtype([("scales", "u1", 16), ("qs", "u1", 64), ("d", "<u2"), ("dmin", "<u2")]))
    nb = len(b)
    sc = b["scales"].astype(np.int32)  # sub-block order = element order / 16
    dl = _f16(b["d"])[:, None] * (sc & 15).astype(F32)
    ml = _f16(b["dmin"])[:, None] * (sc >> 4).astype(F32)
    q = _two_bit_planes(b["qs"]).reshape(nb, 16, 16).astype(F32)
    return (dl[:, :, None] * q - ml[:, :, None]).reshape(-1)


def q3_k_scales(packed):
    """(nb, 12) -> (nb, 16) 6-bit scales: low nibble of byte i (i < 8) or high nibble of byte i - 8,
    high two bits from byte 8 + i % 4, bits 2 * (i // 4)."""
    p = packed.astype(np.int32)
    i = np.arange(16)
    low = np.where(i < 8, p[:, i % 8] & 15, p[:, i % 8] >> 4)
    high = (p[:, 8 + i % 4] >> (2 * (i // 4))) & 3
    return low | (high << 4)


def q3_k(raw):
    b = _blocks(raw, np.dtype([("hmask", "u1", 32), ("qs", "u1", 64), ("scales", "u1", 12), ("d", "<u2")]))
    nb = len(b)
    dl = _f16(b["d"])[:, None] * (q3_k_scales(b["scales"]) - 32).astype(F32)
    low = _two_bit_planes(b["qs"])
    # element 128h + 32j + l has its high bit at bit 4h + j of hmask[l]
    hm = b["hmask"].astype(np.int32).reshape(nb, 1, 1, 32)
    bit = (4 * np.arange(2).reshape(1, 2, 1, 1) + np.arange(4).reshape(1, 1, 4, 1))
    hbit = ((hm >> bit) & 1).reshape(nb, 256)
    q = (low - np.where(hbit == 1, 0, 4)).reshape(nb, 16, 16).astype(F32)
    return (dl[:, :, None] * q).reshape(-1)


def k4_scales_mins(packed):
    """Q4_K/Q5_K: (nb, 12) -> (nb, 8) scales and (nb, 8) mins, 6 bits each."""
    p = packed.astype(np.int32)
    sc = np.empty((len(p), 8), np.int32)
    mn = np.empty((len(p), 8), np.int32)
    for j in range(8):
        if j < 4:
            sc[:, j] = p[:, j] & 63
            mn[:, j] = p[:, j + 4] & 63
        else:
            sc[:, j] = (p[:, j + 4] & 15) | ((p[:, j - 4] >> 6) << 4)
            mn[:, j] = (p[:, j + 4] >> 4) | ((p[:, j] >> 6) << 4)
    return sc, mn


def _k4_apply(b, q):
    nb = len(b)
    sc, mn = k4_scales_mins(b["scales"])
    d1 = _f16(b["d"])[:, None] * sc.astype(F32)
    m1 = _f16(b["dmin"])[:, None] * mn.astype(F32)
    return (d1[:, :, None] * q.reshape(nb, 8, 32).astype(F32) - m1[:, :, None]).reshape(-1)


def _k4_nibbles(qs):
    """(nb, 128) -> (nb, 256): per 64 elements c, low nibbles of bytes 32c.. then their high nibbles."""
    nb = qs.shape[0]
    q = qs.reshape(nb, 4, 1, 32).astype(np.int32)
    return ((q >> (4 * np.arange(2)).reshape(1, 1, 2, 1)) & 15).reshape(nb, 256)


def q4_k(raw):
    b = _blocks(raw, np.dtype([("d", "<u2"), ("dmin", "<u2"), ("scales", "u1", 12), ("qs", "u1", 128)]))
    return _k4_apply(b, _k4_nibbles(b["qs"]))


def q5_k(raw):
    b = _blocks(raw, np.dtype([("d", "<u2"), ("dmin", "<u2"), ("scales", "u1", 12), ("qh", "u1", 32),
                               ("qs", "u1", 128)]))
    nb = len(b)
    # element 32s + l (sub-block s) has its fifth bit at bit s of qh[l]
    qh = b["qh"].astype(np.int32).reshape(nb, 1, 32)
    high = ((qh >> np.arange(8).reshape(1, 8, 1)) & 1).reshape(nb, 256)
    return _k4_apply(b, _k4_nibbles(b["qs"]) + 16 * high)


def q6_k(raw):
    b = _blocks(raw, np.dtype([("ql", "u1", 128), ("qh", "u1", 64), ("scales", "i1", 16), ("d", "<u2")]))
    nb = len(b)
    ql = b["ql"].astype(np.int32).reshape(nb, 2, 64)
    qh = b["qh"].astype(np.int32).reshape(nb, 2, 32)
    q = np.empty((nb, 2, 4, 32), np.int32)
    q[:, :, 0] = (ql[:, :, :32] & 15) | (((qh >> 0) & 3) << 4)
    q[:, :, 1] = (ql[:, :, 32:] & 15) | (((qh >> 2) & 3) << 4)
    q[:, :, 2] = (ql[:, :, :32] >> 4) | (((qh >> 4) & 3) << 4)
    q[:, :, 3] = (ql[:, :, 32:] >> 4) | (((qh >> 6) & 3) << 4)
    q = (q - 32).reshape(nb, 16, 16).astype(F32)  # sub-block = element // 16
    dsc = _f16(b["d"])[:, None] * b["scales"].astype(F32)  # (d * sc) first, then * q
    return (dsc[:, :, None] * q).reshape(-1)


def iq4_xs(raw):
    b = _blocks(raw, np.dtype([("d", "<u2"), ("scales_h", "<u2"), ("scales_l", "u1", 4), ("qs", "u1", 128)]))
    nb = len(b)
    ib = np.arange(8)
    sl = b["scales_l"].astype(np.int32)
    ls = ((sl[:, ib // 2] >> (4 * (ib % 2))) & 15) | (((b["scales_h"].astype(np.int32)[:, None] >> (2 * ib)) & 3) << 4)
    dl = _f16(b["d"])[:, None] * (ls - 32).astype(F32)
    q = _nibbles32(b["qs"].reshape(nb * 8, 16)).reshape(nb, 8, 32)
    return (dl[:, :, None] * KVALUES_IQ4NL[q].astype(F32)).reshape(-1)


DEQUANT = {2: q4_0, 3: q4_1, 6: q5_0, 7: q5_1, 8: q8_0, 20: iq4_nl,
           10: q2_k, 11: q3_k, 12: q4_k, 13: q5_k, 14: q6_k, 23: iq4_xs}


def dequantize(type_id, raw):
    qk, size = BLOCK[type_id]
    if len(raw) % size:
        raise ValueError(f"{NAMES[type_id]}: {len(raw)} bytes is not a whole number of {size}-byte blocks")
    with np.errstate(all="ignore"):  # NaN / Inf scales propagate, as in ggml
        return DEQUANT[type_id](raw).astype(F32)
