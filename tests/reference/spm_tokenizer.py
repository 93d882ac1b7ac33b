"""An independent Python implementation of llama.cpp's SentencePiece-style (SPM) tokenizer.

Encoding (what llama.cpp does for `tokenizer.ggml.model = "llama"`):
  1. an empty text encodes to [BOS] only (no space prefix);
  2. if add_space_prefix (default true), prepend " "; replace every " " with "▁" (U+2581);
  3. the initial symbols are the text's UTF-8 characters;
  4. repeatedly merge the adjacent pair whose concatenation is a vocabulary piece with the
     highest score (ties: the leftmost pair), via a priority queue of bigrams with lazy
     invalidation (an entry is stale when either side has since changed);
  5. each final symbol that is a piece emits its id; otherwise each of its bytes emits the id of
     the piece "<0xXX>" (uppercase hex);
  6. BOS is prepended (when asked).

Decoding: "▁" becomes " ", byte pieces "<0xXX>" give their byte, control pieces give nothing; the
bytes are then read as UTF-8 (invalid sequences -> U+FFFD).

The vocabulary comes from the GGUF file through gguf_py.
"""

import heapq
import re

import gguf_py

SPACE_MARK = "\u2581"  # "▁"
_BYTE_PIECE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")

# tokenizer.ggml.token_type values (llama.cpp's llama_token_type)
TT_NORMAL, TT_UNKNOWN, TT_CONTROL, TT_USER_DEFINED, TT_UNUSED, TT_BYTE = 1, 2, 3, 4, 5, 6


class SPMTokenizer:
    def __init__(self, pieces, scores, token_types=None, bos_id=1, eos_id=2, add_space_prefix=True):
        self.pieces = list(pieces)
        self.scores = [float(s) for s in scores]
        self.types = list(token_types) if token_types is not None else [TT_NORMAL] * len(self.pieces)
        self.bos_id = bos_id
        self.eos_id = eos_id
        self.add_space_prefix = add_space_prefix
        # Later duplicates win, as a map filled in id order would do.
        self.piece_to_id = {p: i for i, p in enumerate(self.pieces)}

    @classmethod
    def from_gguf(cls, path):
        g = gguf_py.GGUFFile(path)
        model = g.get("tokenizer.ggml.model")
        if model != "llama":
            raise ValueError(f"{path}: tokenizer model {model!r} is not SPM ('llama')")
        return cls(
            pieces=g.get("tokenizer.ggml.tokens"),
            scores=g.get("tokenizer.ggml.scores"),
            token_types=g.get("tokenizer.ggml.token_type"),
            bos_id=int(g.get("tokenizer.ggml.bos_token_id", 1)),
            eos_id=int(g.get("tokenizer.ggml.eos_token_id", 2)),
            add_space_prefix=bool(g.get("tokenizer.ggml.add_space_prefix", True)),
        )

    # -----------------------------------------------------------------------------------------
    # Encoding

    def encode(self, text, add_bos=True):
        ids = [self.bos_id] if add_bos else []
        if text == "":
            return ids
        if self.add_space_prefix:
            text = " " + text
        text = text.replace(" ", SPACE_MARK)
        for sym in self._merge(list(text)):
            ids.extend(self._emit(sym))
        return ids

    def _merge(self, symbols):
        """Bigram merging over a doubly linked list of symbols; returns the final symbols."""
        n = len(symbols)
        text = list(symbols)             # text[i] is "" once symbol i was merged into its left
        prev = list(range(-1, n - 1))
        nxt = list(range(1, n + 1))
        nxt[-1] = -1
        heap = []

        def try_add(left, right):
            if left < 0 or right < 0:
                return
            joined = text[left] + text[right]
            tok = self.piece_to_id.get(joined)
            if tok is None:
                return
            # Highest score first, then the leftmost pair; remember the joined length so stale
            # entries can be recognised when they come out.
            heapq.heappush(heap, (-self.scores[tok], left, right, len(joined)))

        for i in range(n - 1):
            try_add(i, i + 1)

        while heap:
            _, left, right, size = heapq.heappop(heap)
            if text[left] == "" or text[right] == "" or len(text[left]) + len(text[right]) != size:
                continue  # stale: one side was merged away or grew since this entry was made
            if nxt[left] != right:
                continue
            text[left] += text[right]
            text[right] = ""
            nxt[left] = nxt[right]
            if nxt[right] >= 0:
                prev[nxt[right]] = left
            try_add(prev[left], left)
            try_add(left, nxt[left])

        out, i = [], 0
        while i >= 0 and n > 0:
            out.append(text[i])
            i = nxt[i]
        return out

    def _emit(self, sym):
        tok = self.piece_to_id.get(sym)
        if tok is not None:
            return [tok]
        ids = []
        for b in sym.encode("utf-8"):
            piece = "<0x%02X>" % b
            if piece not in self.piece_to_id:
                raise KeyError(f"no byte-fallback piece {piece} in the vocabulary")
            ids.append(self.piece_to_id[piece])
        return ids

    # -----------------------------------------------------------------------------------------
    # Decoding

    def token_bytes(self, tok):
        """The raw bytes token `tok` stands for."""
        piece = self.pieces[tok]
        ttype = self.types[tok]
        if ttype in (TT_CONTROL, TT_UNUSED):
            return b""
        if ttype == TT_BYTE:
            m = _BYTE_PIECE.match(piece)
            if m:
                return bytes([int(m.group(1), 16)])
        if ttype == TT_UNKNOWN:
            return b""
        return piece.replace(SPACE_MARK, " ").encode("utf-8")

    def decode(self, ids, strip_leading_space=False):
        data = b"".join(self.token_bytes(t) for t in ids)
        if strip_leading_space and data.startswith(b" "):
            data = data[1:]
        return data.decode("utf-8", errors="replace")
