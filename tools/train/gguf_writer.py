"""gguf_writer.py: a small GGUF v3 writer (metadata, tensor infos, 32-byte aligned data).

Layout, little-endian: "GGUF", u32 version, u64 tensor count, u64 metadata count; each metadata
entry is a string key, a u32 value type and the value (strings are u64 length + UTF-8 bytes;
arrays are u32 element type, u64 count, elements); each tensor info is a string name, u32 number
of dimensions, u64 dimensions (innermost first, as ggml's ne[]), u32 ggml type and u64 offset
into the data section; then padding to the alignment and the tensor data, each tensor starting
at a multiple of the alignment.
"""

import struct

import numpy as np

ALIGNMENT = 32

# GGUF metadata value types.
T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY = 4, 5, 6, 7, 8, 9
# ggml tensor types.
GGML_F32, GGML_F16 = 0, 1


def _string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


class GgufWriter:
    def __init__(self):
        self.kv = []       # encoded metadata entries
        self.tensors = []  # (name, numpy array in its stored dtype, ggml type)

    def _add(self, key, vtype, payload):
        self.kv.append(_string(key) + struct.pack("<I", vtype) + payload)

    def add_u32(self, key, v):
        self._add(key, T_UINT32, struct.pack("<I", v))

    def add_f32(self, key, v):
        self._add(key, T_FLOAT32, struct.pack("<f", v))

    def add_bool(self, key, v):
        self._add(key, T_BOOL, struct.pack("<B", 1 if v else 0))

    def add_string(self, key, v):
        self._add(key, T_STRING, _string(v))

    def add_string_array(self, key, values):
        body = b"".join(_string(v) for v in values)
        self._add(key, T_ARRAY, struct.pack("<IQ", T_STRING, len(values)) + body)

    def add_f32_array(self, key, values):
        body = np.asarray(values, dtype="<f4").tobytes()
        self._add(key, T_ARRAY, struct.pack("<IQ", T_FLOAT32, len(values)) + body)

    def add_i32_array(self, key, values):
        body = np.asarray(values, dtype="<i4").tobytes()
        self._add(key, T_ARRAY, struct.pack("<IQ", T_INT32, len(values)) + body)

    def add_tensor(self, name, array, f16):
        """array: numpy, row-major [rows][cols]; stored with ggml dims (cols, rows)."""
        stored = np.ascontiguousarray(array, dtype="<f2" if f16 else "<f4")
        self.tensors.append((name, stored, GGML_F16 if f16 else GGML_F32))

    def write(self, path):
        infos, offset = [], 0
        for name, arr, gtype in self.tensors:
            dims = list(reversed(arr.shape))
            infos.append(_string(name) + struct.pack("<I", len(dims)) +
                         b"".join(struct.pack("<Q", d) for d in dims) +
                         struct.pack("<IQ", gtype, offset))
            offset += _padded(arr.nbytes)
        with open(path, "wb") as f:
            f.write(b"GGUF" + struct.pack("<IQQ", 3, len(self.tensors), len(self.kv)))
            for e in self.kv:
                f.write(e)
            for e in infos:
                f.write(e)
            f.write(b"\0" * (_padded(f.tell()) - f.tell()))
            for _, arr, _ in self.tensors:
                data = arr.tobytes()
                f.write(data + b"\0" * (_padded(len(data)) - len(data)))


def _padded(n):
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT
