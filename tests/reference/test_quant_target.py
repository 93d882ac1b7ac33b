"""Target mode: stories260K.gguf quantized with `dspark quantize --target` (written as a Hugging Face
directory: Q/K rows un-permuted to the halves RoPE order, tokenizer carried as tokenizer.gguf) gives
logits close to the original GGUF model's over a prompt: 8-bit within a small fraction of the logit
spread (max) with the same argmax almost everywhere, 4-bit (a 260K-parameter model loses a lot at 4
bits) within 20% of the spread on average and the same argmax on 80% of positions. A Q/K permutation error or a wrong
packing moves logits by the whole spread, far beyond these bounds. Also: the quantized directory's
tensors are bit-identical to the numpy reference quantizing the (un-permuted) GGUF weights."""

import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import mlx_quant_ref as ref  # noqa: E402

PROMPT = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park."


def main():
    tmp = os.path.join(common.tmp_dir(), "quant_target.%d" % os.getpid())
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    model = common.stories_model()
    dspark = common.tool("dspark")
    try:
        import gguf_py  # the tests' own GGUF reader
        gf = gguf_py.GGUFFile(model)
        nh, nkv = int(gf.get("llama.attention.head_count")), int(gf.get("llama.attention.head_count_kv"))
        toks = common.tokenize_c(model, PROMPT)
        base = common.ref_dump(model, toks, tag="qt_base")["logits"]
        spread = float(base.std())
        for bits, gs, tol, agree in ((8, 32, 0.06, 0.95), (8, 64, 0.06, 0.95), (4, 64, None, 0.8)):
            out = os.path.join(tmp, "t%d_%d" % (bits, gs))
            common.run([dspark, "quantize", model, out, "--target", "--bits", str(bits), "--group-size", str(gs)])
            cfg = json.load(open(os.path.join(out, "config.json")))
            assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["quantization"]["bits"] == bits, cfg
            assert common.tokenize_c(out, PROMPT) == toks, "the carried tokenizer encodes differently"
            q = common.ref_dump(out, toks, tag="qt_%d" % bits)["logits"]
            d = float(np.abs(q - base).max())
            mean = float(np.abs(q - base).mean())
            same = float((q.argmax(1) == base.argmax(1)).mean())
            print("%d-bit group %d: |dlogit| max %.4f = %.3f, mean %.4f = %.3f of the spread %.3f; argmax agreement %.3f"
                  % (bits, gs, d, d / spread, mean, mean / spread, spread, same))
            if tol is not None:
                assert d <= tol * spread, "logits moved too far"
            assert mean <= 0.2 * spread, "logits moved too far on average"
            assert same >= agree, "argmax agreement too low"
            # Bit-compatibility of converted matrices with the numpy reference, Q/K un-permuted here
            # independently (inverse of llama.cpp's convert permute).
            t, meta = ref.read_dir(out)
            assert meta["format"] == "mlx"
            for hf, gg, heads in (("model.layers.1.self_attn.q_proj", "blk.1.attn_q.weight", nh),
                                  ("model.layers.1.self_attn.k_proj", "blk.1.attn_k.weight", nkv),
                                  ("model.layers.2.mlp.down_proj", "blk.2.ffn_down.weight", 0),
                                  ("model.embed_tokens", "token_embd.weight", 0)):
                w = gf.tensor(gg)
                if heads:
                    r, c = w.shape
                    w = w.reshape(heads, r // heads // 2, 2, c).swapaxes(1, 2).reshape(r, c)
                if w.shape[1] % gs:
                    assert hf + ".scales" not in t and cfg["quantization"].get(hf) is False, hf
                    continue
                words, sc, bi = ref.quantize(w, bits, gs)
                assert np.array_equal(t[hf + ".weight"][1], words), hf + ": packed words differ"
                assert np.array_equal(t[hf + ".scales"][1], sc) and np.array_equal(t[hf + ".biases"][1], bi), hf
        # An HF safetensors source (bf16, sharded, tied embeddings): the 8-bit copy keeps bf16 scales
        # and its logits stay close to the source's.
        import make_hf_llama  # noqa: E402
        hf = make_hf_llama.make_hf_llama(os.path.join(tmp, "hf"), seed=3, dim=128, layers=2, heads=4, kv_heads=2,
                                         ffn=192, vocab=300, shards=2, tied=True, dtype="bf16")
        out = os.path.join(tmp, "hf_q8")
        common.run([dspark, "quantize", hf, out, "--target", "--bits", "8", "--group-size", "64"])
        t, meta = ref.read_dir(out)
        assert t["model.embed_tokens.scales"][0] == "BF16" and "lm_head.weight" not in t, sorted(t)[:5]
        ids = [1, 17, 42, 99, 123, 7, 250, 3]
        a = common.ref_dump(hf, ids, tag="hf_base")["logits"]
        b = common.ref_dump(out, ids, tag="hf_q8")["logits"]
        d = float(np.abs(a - b).max())
        mean, same = float(np.abs(a - b).mean()), float((a.argmax(1) == b.argmax(1)).mean())
        print("HF bf16 source, 8-bit group 64: |dlogit| max %.4f = %.3f, mean %.4f = %.3f of the spread; argmax %.3f"
              % (d, d / float(a.std()), mean, mean / float(a.std()), same))
        assert d <= 0.1 * float(a.std()) and mean <= 0.02 * float(a.std()) and same >= 0.85
        print("OK")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
