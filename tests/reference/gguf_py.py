"""A minimal, independent GGUF reader (numpy only).

Written from the public GGUF specification (ggml's docs/gguf.md), versions 2 and 3, little-endian:

    magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
    n_kv x (string key, u32 value_type, value)
    n_tensors x (string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset)
    padding to `general.alignment` (default 32), then the data section.

Strings are a u64 byte length followed by UTF-8 bytes. Arrays are a u32 element type, a u64 count
and the elements (arrays may nest). Tensor offsets are relative to the start of the aligned data
section. `ne[0]` is the innermost (fastest) dimension, so a tensor with ne=[dim, vocab] is the
row-major numpy array of shape (vocab, dim).

Usage:
    g = GGUFFile(path)
    g.metadata["llama.embedding_length"]   # python int / float / str / bool / list
    g.tensor("token_embd.weight")          # numpy float32 array, numpy-ordered shape
"""

import struct
from dataclasses import dataclass

import numpy as np

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# Metadata value types.
T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32 = 0, 1, 2, 3, 4, 5, 6
T_BOOL, T_STRING, T_ARRAY, T_UINT64, T_INT64, T_FLOAT64 = 7, 8, 9, 10, 11, 12

_SCALAR_FORMATS = {
    T_UINT8: "<B", T_INT8: "<b", T_UINT16: "<H", T_INT16: "<h", T_UINT32: "<I", T_INT32: "<i",
    T_FLOAT32: "<f", T_BOOL: "<?", T_UINT64: "<Q", T_INT64: "<q", T_FLOAT64: "<d",
}

# ggml tensor types this reader understands.
GGML_F32, GGML_F16, GGML_Q8_0, GGML_BF16 = 0, 1, 8, 30
GGML_TYPE_NAMES = {GGML_F32: "F32", GGML_F16: "F16", GGML_Q8_0: "Q8_0", GGML_BF16: "BF16"}


def _quant_types():
    """ggml block types tests/reference/ggml_quants_ref.py dequantizes (Q4_0 ... IQ4_XS)."""
    import ggml_quants_ref
    return ggml_quants_ref.DEQUANT


class GGUFError(Exception):
    """Malformed or unsupported GGUF file."""


@dataclass
class TensorInfo:
    name: str
    ne: tuple          # ggml order: ne[0] innermost
    ggml_type: int
    offset: int        # absolute byte offset in the file

    @property
    def shape(self):
        """The numpy (row-major) shape: ne reversed."""
        return tuple(reversed(self.ne))

    @property
    def n_elements(self):
        n = 1
        for d in self.ne:
            n *= d
        return n


class _Cursor:
    """Sequential little-endian reader over a bytes object."""

    def __init__(self, buf, path):
        self.buf = buf
        self.pos = 0
        self.path = path

    def take(self, n):
        if self.pos + n > len(self.buf):
            raise GGUFError(f"{self.path}: truncated at byte {self.pos} (wanted {n} more)")
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def scalar(self, vtype):
        fmt = _SCALAR_FORMATS[vtype]
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def u32(self):
        return self.scalar(T_UINT32)

    def u64(self):
        return self.scalar(T_UINT64)

    def string(self):
        n = self.u64()
        return bytes(self.take(n)).decode("utf-8")

    def value(self, vtype):
        if vtype in _SCALAR_FORMATS:
            return self.scalar(vtype)
        if vtype == T_STRING:
            return self.string()
        if vtype == T_ARRAY:
            etype = self.u32()
            count = self.u64()
            return [self.value(etype) for _ in range(count)]
        raise GGUFError(f"{self.path}: unknown metadata value type {vtype} at byte {self.pos}")


class GGUFFile:
    """A parsed GGUF file: `version`, `metadata` (dict), `tensors` (dict name -> TensorInfo)."""

    def __init__(self, path):
        self.path = str(path)
        with open(self.path, "rb") as f:
            self.buf = f.read()
        cur = _Cursor(self.buf, self.path)
        if bytes(cur.take(4)) != GGUF_MAGIC:
            raise GGUFError(f"{self.path}: bad magic (not a GGUF file)")
        self.version = cur.u32()
        if self.version not in (2, 3):
            raise GGUFError(f"{self.path}: unsupported GGUF version {self.version}")
        n_tensors = cur.u64()
        n_kv = cur.u64()
        self.metadata = {}
        for _ in range(n_kv):
            key = cur.string()
            vtype = cur.u32()
            self.metadata[key] = cur.value(vtype)
        infos = []
        for _ in range(n_tensors):
            name = cur.string()
            n_dims = cur.u32()
            ne = tuple(cur.u64() for _ in range(n_dims))
            ggml_type = cur.u32()
            offset = cur.u64()
            infos.append((name, ne, ggml_type, offset))
        align = int(self.metadata.get("general.alignment", DEFAULT_ALIGNMENT))
        self.alignment = align
        self.data_start = (cur.pos + align - 1) // align * align
        self.tensors = {}
        for name, ne, ggml_type, offset in infos:
            self.tensors[name] = TensorInfo(name, ne, ggml_type, self.data_start + offset)

    def get(self, key, default=None):
        return self.metadata.get(key, default)

    def tensor(self, name):
        """Tensor `name` as a float32 numpy array of shape ne reversed."""
        info = self.tensors[name]
        n = info.n_elements
        t = info.ggml_type
        if t == GGML_F32:
            a = self._frombuffer(info, np.dtype("<f4"), n)
        elif t == GGML_F16:
            a = self._frombuffer(info, np.dtype("<f2"), n).astype(np.float32)
        elif t == GGML_BF16:
            raw = self._frombuffer(info, np.dtype("<u2"), n).astype(np.uint32)
            a = (raw << 16).view(np.float32)
        elif t == GGML_Q8_0:
            a = self._q8_0(info, n)
        elif t in _quant_types():
            import ggml_quants_ref  # the block types' numpy dequantizer (written from ggml's layouts)
            qk, size = ggml_quants_ref.BLOCK[t]
            if n % qk:
                raise GGUFError(f"{self.path}: tensor {name}: {n} elements is not a whole number of {qk}-blocks")
            a = ggml_quants_ref.dequantize(t, self._frombuffer(info, np.dtype("u1"), n // qk * size).tobytes())
        else:
            raise GGUFError(f"{self.path}: tensor {name} has unsupported ggml type {t}")
        return np.array(a.reshape(info.shape), dtype=np.float32)  # a writable copy

    def _frombuffer(self, info, dtype, count):
        end = info.offset + count * dtype.itemsize
        if end > len(self.buf):
            raise GGUFError(f"{self.path}: tensor {info.name} runs past the end of the file")
        return np.frombuffer(self.buf, dtype=dtype, count=count, offset=info.offset)

    def _q8_0(self, info, n):
        """Q8_0: blocks of 32 values, each an f16 scale followed by 32 int8 quants."""
        if n % 32:
            raise GGUFError(f"{self.path}: Q8_0 tensor {info.name} size not a multiple of 32")
        block = np.dtype([("d", "<f2"), ("q", "i1", (32,))])
        blocks = self._frombuffer(info, block, n // 32)
        return (blocks["d"].astype(np.float32)[:, None] * blocks["q"].astype(np.float32)).reshape(-1)


class GGUFWriter:
    """A minimal GGUF v3 writer (the layout above, written instead of read).

        w = GGUFWriter()
        w.add("general.architecture", "llama")             # str -> STRING, bool -> BOOL,
        w.add("llama.block_count", 4)                      # int -> UINT32 (INT32 if negative),
        w.add("llama.rope.freq_base", 10000.0)             # float -> FLOAT32,
        w.add("x.list", [1, 2], T_INT32)                   # list -> ARRAY of the given element type
        w.add_tensor("token_embd.weight", array, "BF16")   # F32 / F16 / BF16 (numpy row-major; ne reversed)
        w.write(path)

    Tensor data is aligned to `general.alignment` (32) inside the data section, like gguf-py's writer."""

    def __init__(self, alignment=DEFAULT_ALIGNMENT):
        self.kv = []          # (key, vtype, value, element type for arrays)
        self.tensors = []     # (name, ne, ggml type, bytes)
        self.alignment = alignment

    def add(self, key, value, vtype=None):
        if vtype is None:
            if isinstance(value, bool):
                vtype = T_BOOL
            elif isinstance(value, int):
                vtype = T_UINT32 if value >= 0 else T_INT32
            elif isinstance(value, float):
                vtype = T_FLOAT32
            elif isinstance(value, str):
                vtype = T_STRING
            else:
                raise TypeError(f"{key}: give the element type of a list")
        self.kv = [kv for kv in self.kv if kv[0] != key]  # a key given again replaces it (as gguf-py does)
        if isinstance(value, (list, tuple)):
            self.kv.append((key, T_ARRAY, list(value), vtype))
        else:
            self.kv.append((key, vtype, value, None))

    def add_tensor(self, name, array, ggml_type="F32", ne=None):
        a = np.ascontiguousarray(array, dtype=np.float32)
        if ggml_type == "F32":
            t, raw = GGML_F32, a.astype("<f4").tobytes()
        elif ggml_type == "F16":
            t, raw = GGML_F16, a.astype("<f2").tobytes()
        elif ggml_type == "BF16":
            u = a.view(np.uint32).astype(np.uint64)  # round to nearest, ties to even
            t, raw = GGML_BF16, ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2").tobytes()
        else:
            raise ValueError(f"{name}: unsupported type {ggml_type}")
        self.tensors.append((name, tuple(ne) if ne else tuple(reversed(a.shape)), t, raw))

    @staticmethod
    def _str(s):
        b = s.encode("utf-8")
        return struct.pack("<Q", len(b)) + b

    def _value(self, vtype, v):
        if vtype == T_STRING:
            return self._str(v)
        return struct.pack(_SCALAR_FORMATS[vtype], v)

    def write(self, path):
        out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(self.tensors), len(self.kv)))
        for key, vtype, value, etype in self.kv:
            out += self._str(key) + struct.pack("<I", vtype)
            if vtype == T_ARRAY:
                out += struct.pack("<IQ", etype, len(value))
                for e in value:
                    out += self._value(etype, e)
            else:
                out += self._value(vtype, value)
        offset = 0
        for name, ne, t, raw in self.tensors:
            out += self._str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
            out += struct.pack("<IQ", t, offset)
            offset += (len(raw) + self.alignment - 1) // self.alignment * self.alignment
        out += b"\0" * (-len(out) % self.alignment)
        for _, _, _, raw in self.tensors:
            out += raw + b"\0" * (-len(raw) % self.alignment)
        with open(path, "wb") as f:
            f.write(out)
        return path
