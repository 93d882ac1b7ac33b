"""Bit-exactness of dspark's dequantization of GGUF block types (kernels/ggml_quants.c) against an
independent numpy implementation written from ggml's block layouts (ggml_quants_ref.py).

For every type (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS):
  * random blocks (finite f16 scales of varied magnitude), fully random bytes (any f16, NaN and Inf
    included), and adversarial blocks: zero, -0.0, the largest f16 (+-65504), subnormal scales (the
    smallest, the largest), all-0xFF quant bytes (max nibbles / bits), all-zero quants, NaN and Inf scales;
  * every block-type tensor of the llama-tiny fixtures (../shared/models/gguf-fixtures/llama-tiny/*.gguf,
    all 14 llama-quantize presets), through the GGUF reader and ds_weight_row_f32 (the embedding and
    sgemm-tile path).
Compared as float32 bit patterns; a NaN must meet a NaN (ggml's f16 conversions do not define NaN
payloads: F16C quiets signalling NaNs, table lookups keep them), every other value must be the same bits.
"""

import glob
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import ggml_quants_ref as ref  # noqa: E402
from gguf_py import GGUFFile  # noqa: E402

# Byte offsets of the f16 fields of each block: (scale fields, min fields).
F16_FIELDS = {2: ([0], []), 3: ([0], [2]), 6: ([0], []), 7: ([0], [2]), 8: ([0], []), 20: ([0], []),
              10: ([80], [82]), 11: ([108], []), 12: ([0], [2]), 13: ([0], [2]), 14: ([208], []), 23: ([0], [])}
SPECIAL_F16 = [0x0000, 0x8000, 0x7BFF, 0xFBFF, 0x0001, 0x03FF, 0x8001, 0x3C00, 0x7E00, 0x7C00, 0xFC00, 0xFE01]


def check_same(what, want, got):
    if want.shape != got.shape:
        common.fail(f"{what}: {got.shape} values, expected {want.shape}")
    nan_w, nan_g = np.isnan(want), np.isnan(got)
    bad = (nan_w != nan_g) | (~nan_w & (want.view(np.uint32) != got.view(np.uint32)))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        common.fail(f"{what}: {int(bad.sum())} of {want.size} values differ; first at {i}: "
                    f"dspark {got[i]!r} ({got.view(np.uint32)[i]:#010x}), reference {want[i]!r} "
                    f"({want.view(np.uint32)[i]:#010x})")


def dspark_raw(tmp, type_id, raw):
    qk, size = ref.BLOCK[type_id]
    n = len(raw) // size * qk
    src, dst = os.path.join(tmp, "in.bin"), os.path.join(tmp, "out.f32")
    with open(src, "wb") as f:
        f.write(bytes(raw))
    common.run([common.tool("ds_ggml_dequant"), "raw", str(type_id), str(n), src, dst])
    return np.fromfile(dst, dtype="<f4")


def set_f16(blocks, offsets, values):
    for off in offsets:
        blocks[:, off:off + 2] = np.asarray(values, dtype="<u2").reshape(-1, 1).view(np.uint8)


def synthetic_blocks(type_id, rng):
    """(name, raw bytes) cases for one type."""
    qk, size = ref.BLOCK[type_id]
    scale_off, min_off = F16_FIELDS[type_id]
    cases = []
    nb = 64
    b = rng.integers(0, 256, size=(nb, size), dtype=np.uint8)
    # finite scales from 2^-20 to 2^8, either sign (random quants and sub-block scales)
    mags = (rng.standard_normal(nb) * 2.0 ** rng.integers(-20, 9, size=nb)).astype(np.float16)
    set_f16(b, scale_off, mags.view("<u2"))
    mins = (rng.standard_normal(nb) * 2.0 ** rng.integers(-20, 9, size=nb)).astype(np.float16)
    set_f16(b, min_off, mins.view("<u2"))
    cases.append(("random", b.tobytes()))
    cases.append(("random bytes", rng.integers(0, 256, size=(nb, size), dtype=np.uint8).tobytes()))
    # adversarial: every special f16 in the scale and min fields, with random, all-0xFF and all-zero quants
    for fill in ("random", "ff", "zero"):
        k = len(SPECIAL_F16)
        a = rng.integers(0, 256, size=(k * k, size), dtype=np.uint8)
        if fill != "random":
            a[:] = 0xFF if fill == "ff" else 0
        s = np.repeat(np.array(SPECIAL_F16), k)
        m = np.tile(np.array(SPECIAL_F16), k)
        set_f16(a, scale_off, s)
        set_f16(a, min_off, m)
        cases.append((f"special scales, {fill} quants", a.tobytes()))
    return cases


def main():
    tmp = os.path.join(common.tmp_dir(), "ggml_quants.%d" % os.getpid())
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    rng = np.random.default_rng(20250611)
    checked = 0
    try:
        for type_id in sorted(ref.BLOCK):
            for name, raw in synthetic_blocks(type_id, rng):
                want = ref.dequantize(type_id, raw)
                check_same(f"{ref.NAMES[type_id]} {name}", want, dspark_raw(tmp, type_id, raw))
                checked += want.size
        # The fixtures: every block-type tensor of every preset.
        files = sorted(glob.glob(os.path.join(common.shared_dir(), "models", "gguf-fixtures", "llama-tiny", "*.gguf")))
        if len(files) < 14:
            common.fail(f"expected the 14 llama-tiny fixtures, found {len(files)}")
        seen = set()
        dst = os.path.join(tmp, "t.f32")
        for path in files:
            g = GGUFFile(path)
            for t in g.tensors.values():
                if t.ggml_type not in ref.BLOCK or len(t.ne) != 2:
                    continue
                qk, size = ref.BLOCK[t.ggml_type]
                raw = g.buf[t.offset:t.offset + t.n_elements // qk * size]
                want = ref.dequantize(t.ggml_type, raw)
                common.run([common.tool("ds_ggml_dequant"), "gguf", path, t.name, dst])
                check_same(f"{os.path.basename(path)} {t.name} ({ref.NAMES[t.ggml_type]})", want,
                           np.fromfile(dst, dtype="<f4"))
                seen.add(t.ggml_type)
                checked += want.size
        missing = set(ref.BLOCK) - seen
        if missing:
            common.fail(f"the fixtures hold no tensor of {sorted(ref.NAMES[m] for m in missing)}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"ok: {checked} values bit-exact over {len(ref.BLOCK)} types")


if __name__ == "__main__":
    main()
