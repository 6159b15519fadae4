"""Independent GGUF (v2/v3) reader and ggml dequantiser for the numpy reference model.

Written from the GGUF spec and ggml's block layouts, sharing no code with the C++ engine, so that
a bug in src/gguf cannot hide itself by appearing on both sides of a comparison.
Tensors come back as float32 numpy arrays in numpy order: a ggml shape [n_in, n_out] becomes an
array of shape (n_out, n_in) (ggml's shape[0] is the fastest-varying axis).
"""

import struct

import numpy as np

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# Metadata value types (gguf_type).
_SCALAR_FORMATS = {
    0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q",
    12: "<d",
}
_TYPE_STRING = 8
_TYPE_ARRAY = 9

# ggml tensor types: name, elements per block, bytes per block.
GGML_TYPES = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    30: ("BF16", 1, 2),
    39: ("MXFP4", 32, 17),
}


class GgufError(Exception):
    pass


class _Cursor:
    def __init__(self, buf):
        self.buf = buf
        self.pos = 0

    def take(self, fmt):
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.buf):
            raise GgufError(f"truncated file at offset {self.pos}")
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return value

    def string(self):
        n = self.take("<Q")
        if self.pos + n > len(self.buf):
            raise GgufError(f"string of {n} bytes runs past the end at {self.pos}")
        raw = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return raw.decode("utf-8", errors="surrogateescape")

    def value(self, vtype):
        if vtype in _SCALAR_FORMATS:
            return self.take(_SCALAR_FORMATS[vtype])
        if vtype == _TYPE_STRING:
            return self.string()
        if vtype == _TYPE_ARRAY:
            elem_type = self.take("<I")
            n = self.take("<Q")
            if elem_type in _SCALAR_FORMATS and elem_type != 7:
                # Bulk-read numeric arrays (vocab scores can be 150k entries).
                dtype = np.dtype(_SCALAR_FORMATS[elem_type])
                end = self.pos + n * dtype.itemsize
                if end > len(self.buf):
                    raise GgufError("array runs past the end of the file")
                arr = np.frombuffer(self.buf, dtype=dtype, count=n, offset=self.pos)
                self.pos = end
                return arr.tolist()
            return [self.value(elem_type) for _ in range(n)]
        raise GgufError(f"unknown metadata value type {vtype} at offset {self.pos}")


class TensorInfo:
    def __init__(self, name, shape, ggml_type, offset):
        self.name = name
        self.shape = shape  # ggml order, shape[0] = row length
        self.ggml_type = ggml_type
        self.offset = offset  # relative to the data section

    @property
    def num_elements(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def num_bytes(self):
        _, block_elems, block_bytes = GGML_TYPES[self.ggml_type]
        return self.num_elements // block_elems * block_bytes


class GgufFile:
    """Parses the whole header eagerly; tensor data is read lazily from the file bytes."""

    def __init__(self, path):
        with open(path, "rb") as f:
            self.buf = memoryview(f.read())
        cur = _Cursor(self.buf)
        if bytes(self.buf[:4]) != GGUF_MAGIC:
            raise GgufError(f"{path}: bad magic")
        cur.pos = 4
        self.version = cur.take("<I")
        if self.version not in (2, 3):
            raise GgufError(f"{path}: unsupported GGUF version {self.version}")
        n_tensors = cur.take("<Q")
        n_kv = cur.take("<Q")
        self.metadata = {}
        for _ in range(n_kv):
            key = cur.string()
            self.metadata[key] = cur.value(cur.take("<I"))
        self.tensors = {}
        for _ in range(n_tensors):
            name = cur.string()
            n_dims = cur.take("<I")
            shape = [cur.take("<Q") for _ in range(n_dims)]
            ggml_type = cur.take("<I")
            offset = cur.take("<Q")
            if ggml_type not in GGML_TYPES:
                raise GgufError(f"{path}: tensor {name}: unsupported ggml type {ggml_type}")
            self.tensors[name] = TensorInfo(name, shape, ggml_type, offset)
        self.alignment = int(self.metadata.get("general.alignment", DEFAULT_ALIGNMENT))
        self.data_start = -(-cur.pos // self.alignment) * self.alignment
        for t in self.tensors.values():
            if t.offset % self.alignment != 0:
                raise GgufError(f"{path}: tensor {t.name}: misaligned offset {t.offset}")
            if self.data_start + t.offset + t.num_bytes > len(self.buf):
                raise GgufError(f"{path}: tensor {t.name}: data runs past the end of the file")

    def get(self, key, default=None):
        return self.metadata.get(key, default)

    def has_tensor(self, name):
        return name in self.tensors

    def tensor(self, name):
        """Dequantised float32 array, numpy order (reversed ggml shape)."""
        t = self.tensors[name]
        start = self.data_start + t.offset
        raw = np.frombuffer(self.buf, dtype=np.uint8, count=t.num_bytes, offset=start)
        flat = dequantize(raw, t.ggml_type, t.num_elements)
        return flat.reshape(tuple(reversed(t.shape)))


# ----- dequantisation (all vectorised over blocks) -----

def _f16(raw_u8_2cols):
    """(n, 2) uint8 -> (n, 1) float32 from little-endian fp16."""
    return np.ascontiguousarray(raw_u8_2cols).view("<f2").astype(np.float32)


def _deq_q4_0(b):
    d = _f16(b[:, 0:2])
    qs = b[:, 2:18]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.int8) - 8
    return d * q


def _deq_q5_0(b):
    """ggml block_q5_0: fp16 d, 32 high bits qh (bit j is element j's fifth bit), 16 bytes of
    nibbles (low nibbles elements 0..15, high nibbles 16..31); x = d * (q - 16)."""
    d = _f16(b[:, 0:2])
    qh = np.ascontiguousarray(b[:, 2:6]).view("<u4")  # (n, 1)
    qs = b[:, 6:22]
    low = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.int32)  # (n, 32)
    high = ((qh >> np.arange(32, dtype=np.uint32)[None, :]) & 1).astype(np.int32)
    return d * ((low | (high << 4)) - 16).astype(np.float32)


def _deq_q4_1(b):
    """ggml block_q4_1: fp16 d, fp16 m, 16 bytes of nibbles as Q4_0's; x = d * q + m."""
    d, m = _f16(b[:, 0:2]), _f16(b[:, 2:4])
    qs = b[:, 4:20]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32)
    return d * q + m


def _deq_q5_1(b):
    """ggml block_q5_1: fp16 d, fp16 m, qh and nibbles as Q5_0's; x = d * q + m."""
    d, m = _f16(b[:, 0:2]), _f16(b[:, 2:4])
    qh = np.ascontiguousarray(b[:, 4:8]).view("<u4")
    qs = b[:, 8:24]
    low = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.int32)
    high = ((qh >> np.arange(32, dtype=np.uint32)[None, :]) & 1).astype(np.int32)
    return d * (low | (high << 4)).astype(np.float32) + m


def _deq_q8_0(b):
    d = _f16(b[:, 0:2])
    q = b[:, 2:34].view(np.int8)
    return d * q


def _k4_scales_mins(scales):
    """(n, 12) packed 6-bit scales/mins -> two (n, 8) arrays (ggml get_scale_min_k4)."""
    s = scales.astype(np.uint8)
    sc = np.empty((s.shape[0], 8), dtype=np.uint8)
    mn = np.empty((s.shape[0], 8), dtype=np.uint8)
    sc[:, 0:4] = s[:, 0:4] & 63
    mn[:, 0:4] = s[:, 4:8] & 63
    sc[:, 4:8] = (s[:, 8:12] & 0x0F) | ((s[:, 0:4] >> 6) << 4)
    mn[:, 4:8] = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
    return sc.astype(np.float32), mn.astype(np.float32)


def _k_nibbles(qs):
    """(n, 128) bytes -> (n, 256) 4-bit values: for each 32-byte chunk, low nibbles then high."""
    chunks = qs.reshape(-1, 4, 32)
    q = np.stack([chunks & 0x0F, chunks >> 4], axis=2)  # (n, 4, 2, 32)
    return q.reshape(-1, 256)


def _deq_q4_k(b):
    d = _f16(b[:, 0:2])
    dmin = _f16(b[:, 2:4])
    sc, mn = _k4_scales_mins(b[:, 4:16])
    q = _k_nibbles(b[:, 16:144]).astype(np.float32).reshape(-1, 8, 32)
    x = (d * sc)[:, :, None] * q - (dmin * mn)[:, :, None]
    return x.reshape(-1, 256)


def _deq_q5_k(b):
    d = _f16(b[:, 0:2])
    dmin = _f16(b[:, 2:4])
    sc, mn = _k4_scales_mins(b[:, 4:16])
    qh = b[:, 16:48]
    low = _k_nibbles(b[:, 48:176]).reshape(-1, 8, 32)
    # Sub-block j (32 elements) takes its fifth bit from bit j of qh[l].
    bits = np.arange(8, dtype=np.uint8)
    high = (qh[:, None, :] >> bits[None, :, None]) & 1  # (n, 8, 32)
    q = (low + 16 * high).astype(np.float32)
    x = (d * sc)[:, :, None] * q - (dmin * mn)[:, :, None]
    return x.reshape(-1, 256)


def _deq_q6_k(b):
    ql = b[:, 0:128].reshape(-1, 2, 64)
    qh = b[:, 128:192].reshape(-1, 2, 32)
    scales = b[:, 192:208].view(np.int8).astype(np.float32)  # (n, 16)
    d = _f16(b[:, 208:210])
    # Per half (128 elements): group g of 32 takes low bits from ql[(g%2)*32 + l] (low nibble for
    # g < 2, high for g >= 2) and high bits from qh[l] >> 2g.
    low = np.stack([ql[:, :, 0:32] & 0x0F, ql[:, :, 32:64] & 0x0F,
                    ql[:, :, 0:32] >> 4, ql[:, :, 32:64] >> 4], axis=2)  # (n, 2, 4, 32)
    shifts = np.array([0, 2, 4, 6], dtype=np.uint8)
    high = (qh[:, :, None, :] >> shifts[None, None, :, None]) & 3
    q = ((low | (high << 4)).astype(np.int16) - 32).astype(np.float32).reshape(-1, 16, 16)
    x = (d * scales)[:, :, None] * q
    return x.reshape(-1, 256)


# OCP Microscaling FP4 (E2M1) magnitudes, codes 0..7; bit 3 is the sign.
_E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float64)


def _deq_mxfp4(b):
    """OCP MX block of 32 FP4 values: one E8M0 scale byte e (2^(e - 127)), then 16 bytes, the
    low nibbles elements 0..15 and the high nibbles 16..31 (ggml's block_mxfp4 order)."""
    scale = np.ldexp(1.0, b[:, 0].astype(np.int32) - 127)[:, None]
    qs = b[:, 1:17]
    codes = np.concatenate([qs & 0x0F, qs >> 4], axis=1)
    value = _E2M1[codes & 7] * np.where(codes & 8, -1.0, 1.0)
    return value * scale


_BLOCK_DEQUANT = {2: _deq_q4_0, 3: _deq_q4_1, 6: _deq_q5_0, 7: _deq_q5_1, 8: _deq_q8_0, 12: _deq_q4_k, 13: _deq_q5_k,
                  14: _deq_q6_k, 39: _deq_mxfp4}


def dequantize(raw, ggml_type, n_elements):
    """raw: uint8 array of the tensor's bytes -> flat float32 array of n_elements."""
    if ggml_type == 0:
        return raw.view("<f4").astype(np.float32)
    if ggml_type == 1:
        return raw.view("<f2").astype(np.float32)
    if ggml_type == 30:
        # bf16 is the top half of an f32.
        return (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
    _, block_elems, block_bytes = GGML_TYPES[ggml_type]
    blocks = raw.reshape(-1, block_bytes)
    out = _BLOCK_DEQUANT[ggml_type](blocks).reshape(-1)
    assert out.size == n_elements
    return out.astype(np.float32)
