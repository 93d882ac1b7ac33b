"""llama.cpp's tokenizer for a "gemma4" GGUF vocabulary, written out in Python from
src/llama-vocab.cpp (independent of the C engine), for tests/reference/test_tokenizer_hf.py.

Load (llama_vocab::impl::load): LLAMA_VOCAB_TYPE_BPE, pre-type GEMMA4, escape_whitespaces, BOS
always added (PR 21500); merges "left right" split at the first space after the first byte; the
tokens whose text is one of EOG_TEXTS become control (end-of-generation) tokens, except "</s>",
which becomes normal when "<|tool_response>" is in the vocabulary.
Encode (tokenize): control (only when parsing special tokens), unknown and user-defined tokens are
cut out of the text first, longest token text first (tokenizer_st_partition); each remaining
fragment gets " " -> "▁", is split by [^\\n]+|[\\n]+, and each piece is BPE-merged over its UTF-8
characters, lowest rank first, leftmost first (llm_tokenizer_bpe_session); a piece made only of
newlines that is a token is taken whole (PR 21343); a final symbol that is not a token becomes one
"<0xXX>" token per byte.
Decode (token_to_piece, no lstrip): control/unknown tokens as their text only with special, user-
defined as their text, normal with "▁" -> " ", byte tokens as their byte.
"""

import re

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

EOG_TEXTS = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
             "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
             "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "<｜end▁of▁sentence｜>", "[e~["}


class Gemma4Tokenizer:
    def __init__(self, tokens, types, merges, bos, eog_override=True, newline_rule=True, escape=True):
        self.tokens = tokens
        self.id = {t: i for i, t in enumerate(tokens)}
        self.types = list(types)
        if eog_override:
            for i, t in enumerate(tokens):
                if t in EOG_TEXTS:
                    self.types[i] = CONTROL
            if "<|tool_response>" in self.id and "</s>" in self.id:
                self.types[self.id["</s>"]] = NORMAL
        self.eog = {i for i, t in enumerate(tokens) if t in EOG_TEXTS and self.types[i] == CONTROL}
        self.rank = {}
        for r, m in enumerate(merges):
            k = m.find(" ", 1)
            self.rank.setdefault((m[:k], m[k + 1:]) if k >= 0 else ("", ""), r)
        self.bos = bos
        self.newline_rule = newline_rule
        self.escape = escape
        special = [i for i, ty in enumerate(self.types) if ty in (CONTROL, USER_DEFINED, UNKNOWN)]
        self.special = sorted(special, key=lambda i: -len(tokens[i].encode()))

    def _partition(self, text, parse_special):
        frags = [text]  # str: raw text, int: a token
        for i in self.special:
            if not parse_special and self.types[i] in (CONTROL, UNKNOWN):
                continue
            t = self.tokens[i]
            out = []
            for f in frags:
                if isinstance(f, int) or t not in f:
                    out.append(f)
                    continue
                parts = f.split(t)
                for k, p in enumerate(parts):
                    if k:
                        out.append(i)
                    if p:
                        out.append(p)
            frags = out
        return frags

    def _bpe(self, word):
        if self.newline_rule and set(word) == {"\n"} and word in self.id:
            return [self.id[word]]
        syms = list(word)
        while len(syms) > 1:
            best = None
            for k in range(len(syms) - 1):
                r = self.rank.get((syms[k], syms[k + 1]))
                if r is not None and (best is None or r < best[0]):
                    best = (r, k)
            if best is None:
                break
            k = best[1]
            syms[k:k + 2] = [syms[k] + syms[k + 1]]
        out = []
        for s in syms:
            if s in self.id:
                out.append(self.id[s])
            else:
                out += [self.id["<0x%02X>" % b] for b in s.encode() if "<0x%02X>" % b in self.id]
        return out

    def encode(self, text, add_special=True, parse_special=True):
        out = [self.bos] if add_special else []
        for f in self._partition(text, parse_special):
            if isinstance(f, int):
                out.append(f)
                continue
            if self.escape:
                f = f.replace(" ", "\u2581")
            for w in re.findall(r"[^\n]+|\n+", f):
                out += self._bpe(w)
        return out

    def decode(self, ids, special=True):
        b = b""
        for i in ids:
            t, ty = self.tokens[i], self.types[i]
            if ty in (CONTROL, UNKNOWN):
                b += t.encode() if special else b""
            elif ty == USER_DEFINED:
                b += t.encode()
            elif ty == BYTE:
                b += bytes([int(t[3:5], 16)])
            elif ty == NORMAL:
                b += t.replace("\u2581", " ").encode()
        return b.decode("utf-8", errors="replace")
