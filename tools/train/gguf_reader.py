"""gguf_reader.py: reads back what gguf_writer.py writes (GGUF v3, F32/F16 tensors).

Used to continue training from the committed model when the training checkpoint is gone:
`read(path)` returns the metadata dict and the tensors as float32 numpy arrays, row-major
[rows][cols] as gguf_writer.add_tensor took them.
"""

import struct

import numpy as np

from gguf_writer import ALIGNMENT, GGML_F16, GGML_F32, T_ARRAY, T_STRING

# Scalar GGUF value types -> struct format (types 0..12 of the GGUF spec).
_SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
           12: "d"}


class _Cursor:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, fmt):
        v = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return v[0] if len(v) == 1 else v

    def string(self):
        n = self.take("Q")
        s = self.data[self.pos:self.pos + n].decode("utf-8")
        self.pos += n
        return s

    def value(self, vtype):
        if vtype == T_STRING:
            return self.string()
        if vtype == T_ARRAY:
            etype, n = self.take("I"), self.take("Q")
            return [self.value(etype) for _ in range(n)]
        return self.take(_SCALAR[vtype])


def read(path):
    """Returns (metadata {key: value}, tensors {name: float32 ndarray})."""
    with open(path, "rb") as f:
        data = f.read()
    c = _Cursor(data)
    if data[:4] != b"GGUF":
        raise ValueError("%s: not a GGUF file" % path)
    c.pos = 4
    version, n_tensors, n_kv = c.take("I"), c.take("Q"), c.take("Q")
    if version != 3:
        raise ValueError("%s: GGUF version %d, expected 3" % (path, version))
    meta = {}
    for _ in range(n_kv):
        key = c.string()
        meta[key] = c.value(c.take("I"))
    infos = []
    for _ in range(n_tensors):
        name = c.string()
        dims = [c.take("Q") for _ in range(c.take("I"))]
        infos.append((name, dims, c.take("I"), c.take("Q")))
    align = meta.get("general.alignment", ALIGNMENT)
    base = (c.pos + align - 1) // align * align
    dtypes = {GGML_F32: "<f4", GGML_F16: "<f2"}
    tensors = {}
    for name, dims, gtype, offset in infos:
        if gtype not in dtypes:
            raise ValueError("%s: tensor %s has ggml type %d (only F32/F16)" % (path, name, gtype))
        count = int(np.prod(dims))
        arr = np.frombuffer(data, dtype=dtypes[gtype], count=count, offset=base + offset)
        tensors[name] = arr.reshape(list(reversed(dims))).astype(np.float32)
    return meta, tensors
