"""Bit-compatibility of `dspark quantize` with the contract (docs/formats/mlx-affine.md): for drafters in
F32 and BF16 and every (bits, group size), each quantized tensor's packed words, scales and biases
equal what the independent numpy implementation (mlx_quant_ref.py) computes from the source, bit
for bit; the policy (which tensors, config blocks, metadata) is as specified."""

import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import mlx_quant_ref as ref  # noqa: E402


def main():
    tmp = os.path.join(common.tmp_dir(), "quant_bits.%d" % os.getpid())
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    dspark = common.tool("dspark")
    model = common.stories_model()
    checked = 0
    try:
        for dtype in ("f32", "bf16"):
            src = os.path.join(tmp, "d_" + dtype)
            common.run([dspark, "init-drafter", "-m", model, "-o", src, "--layers", "2", "--seed", "5",
                        "--dtype", dtype])
            srct, _ = ref.read_dir(src)
            for bits, gs in ((4, 32), (4, 64), (8, 32), (8, 64)):
                out = os.path.join(tmp, "q_%s_%d_%d" % (dtype, bits, gs))
                common.run([dspark, "quantize", src, out, "--bits", str(bits), "--group-size", str(gs)])
                qt, meta = ref.read_dir(out)
                cfg = json.load(open(os.path.join(out, "config.json")))
                blk = cfg["quantization"]
                assert cfg["quantization_config"] == blk, "the two config blocks differ"
                assert blk["bits"] == bits and blk["group_size"] == gs and blk["mode"] == "affine", blk
                assert meta.get("format") == "mlx", meta
                assert blk.get("confidence_head.proj") is False, blk
                n_q = 0
                for name, (sdt, a) in srct.items():
                    module = name[:-len(".weight")] if name.endswith(".weight") else None
                    eligible = (a.ndim == 2 and module is not None and a.shape[1] % gs == 0
                                and not module.startswith("confidence_head."))
                    if not eligible:
                        assert module is None or module + ".scales" not in qt, name
                        odt, oa = qt[name]
                        assert odt == sdt and np.array_equal(oa, a), "%s changed" % name
                        if a.ndim == 2 and module is not None:
                            assert blk.get(module) is False, "%s should be recorded as false" % module
                        continue
                    n_q += 1
                    words, scales, biases = ref.quantize(ref.as_f32(sdt, a), bits, gs)
                    wdt, wq = qt[name]
                    sdt_q, sq = qt[module + ".scales"]
                    bdt_q, bq = qt[module + ".biases"]
                    assert wdt == "U32" and wq.shape == (a.shape[0], a.shape[1] * bits // 32), (name, wq.shape)
                    assert sdt_q == sdt and bdt_q == sdt, (name, sdt_q, bdt_q, sdt)
                    assert np.array_equal(wq, words), "%s: packed words differ (%d of %d)" % (
                        name, int((wq != words).sum()), words.size)
                    if sdt == "BF16":
                        want_s, want_b = ref.to_bf16_bits(scales), ref.to_bf16_bits(biases)
                    else:
                        want_s, want_b = scales, biases
                    assert np.array_equal(sq.view(np.uint16 if sdt == "BF16" else np.uint32),
                                          np.asarray(want_s).view(np.uint16 if sdt == "BF16" else np.uint32)), \
                        "%s: scales differ" % name
                    assert np.array_equal(bq.view(np.uint16 if sdt == "BF16" else np.uint32),
                                          np.asarray(want_b).view(np.uint16 if sdt == "BF16" else np.uint32)), \
                        "%s: biases differ" % name
                    # Dequantized values are near the source (sanity of the whole chain).
                    deq = ref.dequantize(wq, ref.as_f32(sdt, sq), ref.as_f32(sdt, bq), bits, gs, a.shape[1])
                    err = np.abs(deq - ref.as_f32(sdt, a)).max()
                    step = np.abs(ref.as_f32(sdt, sq)).max()
                    tol = step * 1.01 + 1e-6  # one step at most (clamped far extremes), see test_quant.c
                    if sdt == "BF16":  # + the rounding of scale and bias to bf16 (2^-8 relative)
                        tol += ((2**bits - 1) * step + np.abs(ref.as_f32(sdt, bq)).max()) * 2.0**-8
                    assert err <= tol, (name, err, step)
                    checked += 1
                for must in ("embed_tokens", "markov_head.markov_w1", "fc", "lm_head", "markov_head.markov_w2"):
                    assert must + ".scales" in qt, "%s not quantized" % must
                assert n_q > 0
                print("%s %d-bit group %d: %d tensors bit-identical" % (dtype, bits, gs, n_q))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    assert checked > 0
    print("OK: %d quantized tensors identical to the numpy reference" % checked)


if __name__ == "__main__":
    main()
