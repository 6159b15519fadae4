"""Checks of the reference itself, needing no kvwarden binary: GGUF parsing of every metadata type,
vectorised dequantisation against plain per-element loops written from ggml's dequantize_row_*,
RoPE/attention identities, and greedy text from the real stories260K model.

  /usr/bin/python3 selftest_reference.py          (KVW_TEST_MODELS locates stories260K.gguf)
"""

import math
import os
import struct
import sys
import tempfile
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deepseek2_ref  # noqa: E402
import gguf_reader  # noqa: E402
import llama_ref  # noqa: E402


# ----- a minimal GGUF writer, only for these tests -----

def _str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


_FMT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
        11: "<q", 12: "<d"}


def _value(vtype, v):
    if vtype == 8:
        return _str(v)
    if vtype == 9:
        elem_type, items = v
        out = struct.pack("<IQ", elem_type, len(items))
        return out + b"".join(_value(elem_type, x) for x in items)
    return struct.pack(_FMT[vtype], v)


def write_gguf(path, kvs, tensors, alignment=32, version=3):
    """kvs: [(key, vtype, value)]; tensors: [(name, ggml shape, ggml type, raw bytes)]."""
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for key, vtype, v in kvs:
        head += _str(key) + struct.pack("<I", vtype) + _value(vtype, v)
    offset, blobs = 0, []
    for name, shape, ttype, raw in tensors:
        head += _str(name) + struct.pack("<I", len(shape))
        head += b"".join(struct.pack("<Q", s) for s in shape)
        head += struct.pack("<IQ", ttype, offset)
        pad = (-len(raw)) % alignment
        blobs.append(raw + b"\0" * pad)
        offset += len(raw) + pad
    head += b"\0" * ((-len(head)) % alignment)
    with open(path, "wb") as fh:
        fh.write(head + b"".join(blobs))


# ----- scalar transliterations of ggml's dequantize_row_* loops (one block at a time) -----

def _h(b, i):
    return float(np.frombuffer(bytes(b[i:i + 2]), dtype="<f2")[0])


def _scale_min_k4(j, q):
    if j < 4:
        return q[j] & 63, q[j + 4] & 63
    return (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4)


def scalar_q4_0(b):
    d = _h(b, 0)
    y = [0.0] * 32
    for j in range(16):
        y[j] = d * ((b[2 + j] & 0xF) - 8)
        y[j + 16] = d * ((b[2 + j] >> 4) - 8)
    return y


def scalar_q5_0(b):
    d = _h(b, 0)
    qh = b[2] | (b[3] << 8) | (b[4] << 16) | (b[5] << 24)
    y = [0.0] * 32
    for j in range(16):
        xh_0 = ((qh >> j) << 4) & 0x10
        xh_1 = (qh >> (j + 12)) & 0x10
        y[j] = d * (((b[6 + j] & 0x0F) | xh_0) - 16)
        y[j + 16] = d * (((b[6 + j] >> 4) | xh_1) - 16)
    return y


def scalar_q8_0(b):
    d = _h(b, 0)
    return [d * (x - 256 if x > 127 else x) for x in b[2:34]]


def scalar_q4_k(b):
    d, dmin, sc, qs = _h(b, 0), _h(b, 2), b[4:16], b[16:144]
    y, q, is_ = [], 0, 0
    for _ in range(4):
        s1, m1 = _scale_min_k4(is_, sc)
        s2, m2 = _scale_min_k4(is_ + 1, sc)
        y += [d * s1 * (qs[q + l] & 0xF) - dmin * m1 for l in range(32)]
        y += [d * s2 * (qs[q + l] >> 4) - dmin * m2 for l in range(32)]
        q, is_ = q + 32, is_ + 2
    return y


def scalar_q5_k(b):
    d, dmin, sc, qh, qs = _h(b, 0), _h(b, 2), b[4:16], b[16:48], b[48:176]
    y, q, is_, u1, u2 = [], 0, 0, 1, 2
    for _ in range(4):
        s1, m1 = _scale_min_k4(is_, sc)
        s2, m2 = _scale_min_k4(is_ + 1, sc)
        y += [d * s1 * ((qs[q + l] & 0xF) + (16 if qh[l] & u1 else 0)) - dmin * m1
              for l in range(32)]
        y += [d * s2 * ((qs[q + l] >> 4) + (16 if qh[l] & u2 else 0)) - dmin * m2
              for l in range(32)]
        q, is_, u1, u2 = q + 32, is_ + 2, u1 << 2, u2 << 2
    return y


def scalar_q6_k(b):
    ql, qh = b[0:128], b[128:192]
    sc = [x - 256 if x > 127 else x for x in b[192:208]]
    d = _h(b, 208)
    y = [0.0] * 256
    for half in range(2):
        o, lo, ho, so = 128 * half, 64 * half, 32 * half, 8 * half
        for l in range(32):
            is_ = l // 16
            q1 = ((ql[lo + l] & 0xF) | (((qh[ho + l] >> 0) & 3) << 4)) - 32
            q2 = ((ql[lo + l + 32] & 0xF) | (((qh[ho + l] >> 2) & 3) << 4)) - 32
            q3 = ((ql[lo + l] >> 4) | (((qh[ho + l] >> 4) & 3) << 4)) - 32
            q4 = ((ql[lo + l + 32] >> 4) | (((qh[ho + l] >> 6) & 3) << 4)) - 32
            y[o + l] = d * sc[so + is_] * q1
            y[o + l + 32] = d * sc[so + is_ + 2] * q2
            y[o + l + 64] = d * sc[so + is_ + 4] * q3
            y[o + l + 96] = d * sc[so + is_ + 6] * q4
    return y


def random_blocks(rng, ggml_type, n_blocks):
    """Random block bytes whose fp16 scale fields are finite."""
    _, _, nbytes = gguf_reader.GGML_TYPES[ggml_type]
    raw = rng.integers(0, 256, size=(n_blocks, nbytes), dtype=np.uint8)
    scale_offsets = {2: [0], 6: [0], 8: [0], 12: [0, 2], 13: [0, 2], 14: [208]}[ggml_type]
    for off in scale_offsets:
        halves = rng.uniform(-0.1, 0.1, size=n_blocks).astype("<f2")
        raw[:, off:off + 2] = halves.view(np.uint8).reshape(n_blocks, 2)
    return raw


class DequantTest(unittest.TestCase):
    def test_vectorised_matches_scalar_loops(self):
        rng = np.random.default_rng(7)
        scalar = {2: scalar_q4_0, 6: scalar_q5_0, 8: scalar_q8_0, 12: scalar_q4_k,
                  13: scalar_q5_k, 14: scalar_q6_k}
        for ttype, fn in scalar.items():
            name, elems, _ = gguf_reader.GGML_TYPES[ttype]
            raw = random_blocks(rng, ttype, 5)
            got = gguf_reader.dequantize(raw.reshape(-1), ttype, 5 * elems)
            want = np.concatenate([np.array(fn(list(map(int, blk))), np.float32) for blk in raw])
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7, err_msg=name)

    def test_q4_0_known_block(self):
        # d = 0.5; byte j holds q=j in the low nibble (element j) and 15-j high (element j+16).
        block = np.frombuffer(np.float16(0.5).tobytes(), np.uint8).tolist()
        block += [j | ((15 - j) << 4) for j in range(16)]
        got = gguf_reader.dequantize(np.array(block, np.uint8), 2, 32)
        want = 0.5 * (np.concatenate([np.arange(16), 15 - np.arange(16)]) - 8)
        np.testing.assert_array_equal(got, want)

    def test_float_types(self):
        x = np.array([1.5, -2.25, 3.0e-3, 65504.0], np.float32)
        np.testing.assert_array_equal(
            gguf_reader.dequantize(x.view(np.uint8), 0, 4), x)
        np.testing.assert_array_equal(
            gguf_reader.dequantize(x.astype("<f2").view(np.uint8), 1, 4), x.astype(np.float16))
        bf = (x.view(np.uint32) >> 16).astype("<u2")
        got = gguf_reader.dequantize(bf.view(np.uint8), 30, 4)
        np.testing.assert_array_equal(got, (bf.astype(np.uint32) << 16).view(np.float32))
        self.assertEqual(got[0], 1.5)


class GgufParseTest(unittest.TestCase):
    def test_all_metadata_types_arrays_alignment_and_tensors(self):
        kvs = [("u8", 0, 200), ("i8", 1, -5), ("u16", 2, 60000), ("i16", 3, -30000),
               ("u32", 4, 4000000000), ("i32", 5, -2000000000), ("f32", 6, 0.5),
               ("bool", 7, True), ("str", 8, "h\u00e9llo"), ("u64", 10, 2 ** 63 + 5),
               ("i64", 11, -(2 ** 62)), ("f64", 12, math.pi),
               ("general.alignment", 4, 64),
               ("arr_i32", 9, (5, [1, -2, 3])), ("arr_str", 9, (8, ["a", "", "\u2581b"])),
               ("arr_bool", 9, (7, [True, False])),
               ("nested", 9, (9, [(4, [1, 2]), (8, ["x"]), (9, [(6, [1.5])])]))]
        rng = np.random.default_rng(3)
        f32 = rng.standard_normal((3, 5)).astype(np.float32)  # numpy (rows, cols)
        q8 = random_blocks(rng, 8, 4)  # 2 rows of 64
        tensors = [("a.weight", [5, 3], 0, f32.tobytes()),
                   ("b.weight", [64, 2], 8, q8.tobytes())]
        with tempfile.TemporaryDirectory() as tmp:
            for version in (2, 3):
                path = os.path.join(tmp, f"t{version}.gguf")
                write_gguf(path, kvs, tensors, alignment=64, version=version)
                f = gguf_reader.GgufFile(path)
                self.assertEqual(f.version, version)
                self.assertEqual(f.alignment, 64)
                self.assertEqual(f.data_start % 64, 0)
                for key, vtype, v in kvs:
                    if vtype == 6:
                        self.assertAlmostEqual(f.get(key), v)
                    elif vtype != 9:
                        self.assertEqual(f.get(key), v, key)
                self.assertEqual(f.get("arr_i32"), [1, -2, 3])
                self.assertEqual(f.get("arr_str"), ["a", "", "\u2581b"])
                self.assertEqual(f.get("arr_bool"), [True, False])
                self.assertEqual(f.get("nested"), [[1, 2], ["x"], [[1.5]]])
                np.testing.assert_array_equal(f.tensor("a.weight"), f32)
                self.assertEqual(f.tensors["b.weight"].offset, 64)
                want = gguf_reader.dequantize(q8.reshape(-1), 8, 128).reshape(2, 64)
                np.testing.assert_array_equal(f.tensor("b.weight"), want)

    def test_rejects_bad_files(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "bad.gguf")
            write_gguf(path, [], [("a", [4], 0, b"\0" * 16)])
            with open(path, "rb") as fh:
                data = fh.read()
            # Wrong magic, version 1, tensor data cut short (16 data bytes + 16 padding).
            for bad in (b"GGUG" + data[4:], data[:4] + struct.pack("<I", 1) + data[8:],
                        data[:-20]):
                with open(path, "wb") as fh:
                    fh.write(bad)
                with self.assertRaises(gguf_reader.GgufError):
                    gguf_reader.GgufFile(path)


class _Hp:
    def __init__(self, **kw):
        self.n_rot, self.rope_base, self.rope_scaling, self.rope_scale = 16, 10000.0, "none", 1.0
        self.rope_orig_ctx, self.rope_attn_factor = 64, 1.0
        self.__dict__.update(kw)


class RopeTest(unittest.TestCase):
    def test_rotation_preserves_norm_and_neox_is_a_permutation(self):
        rng = np.random.default_rng(1)
        x = rng.standard_normal((10, 3, 16))
        cos, sin = llama_ref.rope_tables(_Hp(), 10)
        y = llama_ref.apply_rope(x, cos, sin, 16, neox=False)
        np.testing.assert_allclose(np.linalg.norm(y, axis=-1), np.linalg.norm(x, axis=-1))
        np.testing.assert_allclose(y[0], x[0])  # position 0 is unrotated
        perm = np.concatenate([np.arange(0, 16, 2), np.arange(1, 16, 2)])
        yn = llama_ref.apply_rope(x[:, :, perm], cos, sin, 16, neox=True)
        np.testing.assert_allclose(yn, y[:, :, perm])

    def test_relative_position_property(self):
        # <rope(q, m), rope(k, n)> depends only on m - n.
        rng = np.random.default_rng(2)
        q, k = rng.standard_normal(16), rng.standard_normal(16)
        cos, sin = llama_ref.rope_tables(_Hp(), 40)
        rq = llama_ref.apply_rope(np.tile(q, (40, 1, 1)), cos, sin, 16, False)[:, 0]
        rk = llama_ref.apply_rope(np.tile(k, (40, 1, 1)), cos, sin, 16, False)[:, 0]
        self.assertAlmostEqual(rq[10] @ rk[3], rq[37] @ rk[30])

    def test_scalings(self):
        c0, s0 = llama_ref.rope_tables(_Hp(), 64)
        c1, s1 = llama_ref.rope_tables(_Hp(rope_scaling="linear", rope_scale=4.0), 64)
        np.testing.assert_allclose(c1[8], c0[2])  # position 8 / 4 = 2
        cy, sy = llama_ref.rope_tables(_Hp(rope_scaling="yarn", rope_scale=1.0), 64)
        np.testing.assert_allclose(cy, c0)
        np.testing.assert_allclose(sy, s0)
        cy, sy = llama_ref.rope_tables(_Hp(rope_scaling="yarn", rope_scale=4.0), 64)
        mscale = 1 + 0.1 * math.log(4.0)
        np.testing.assert_allclose(cy[0], mscale)  # magnitude scaled
        np.testing.assert_allclose(cy[5, 0], mscale * c0[5, 0])  # fastest pair extrapolates
        np.testing.assert_allclose(cy[8, -1], mscale * c1[8, -1])  # slowest pair interpolates
        cn, _ = llama_ref.rope_tables(_Hp(rope_scaling="ntk", rope_scale=4.0), 64)
        np.testing.assert_allclose(cn[:, 0], c0[:, 0])  # pair 0 keeps theta = 1
        self.assertFalse(np.allclose(cn[:, -1], c0[:, -1]))


class ModelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        d = os.environ.get("KVW_TEST_MODELS",
                           os.path.join(os.path.dirname(__file__), "../models"))
        cls.model = llama_ref.LlamaRef(os.path.join(d, "stories260K.gguf"))
        cls.vocab = llama_ref.SpmVocab(cls.model.file)

    def test_causal_prefix_and_sliding_window(self):
        toks = self.vocab.encode("Once upon a time, there was a big dog.")
        full = self.model.forward(toks)
        np.testing.assert_allclose(self.model.forward(toks[:5]), full[:5], atol=1e-12)
        self.model.hp.sliding_window = len(toks)  # window covering everything: no change
        try:
            np.testing.assert_allclose(self.model.forward(toks), full, atol=1e-12)
            self.model.hp.sliding_window = 3
            windowed = self.model.forward(toks)
        finally:
            self.model.hp.sliding_window = 0
        np.testing.assert_allclose(windowed[:3], full[:3], atol=1e-12)
        self.assertGreater(np.abs(windowed[5:] - full[5:]).max(), 1e-3)

    def test_tokenizer_round_trip(self):
        text = "Once upon a time, Lily's mom said \"hi\"."
        ids = self.vocab.encode(text)
        self.assertEqual(ids[0], 1)
        self.assertEqual(self.vocab.decode(ids).lstrip(), text)
        self.assertLess(len(ids), len(text) // 2)  # merges happened

    def test_greedy_story_is_coherent(self):
        ids = self.vocab.encode("Once upon a time")
        text = self.vocab.decode(self.model.greedy(ids, 40)).lstrip()
        print("\nstories260K greedy (reference):", text)
        self.assertTrue(text.startswith("Once upon a time, there was a little girl named Lily."),
                        text)



# ----- deepseek2 (MLA + DeepSeekMoE): files written here in both tensor layouts -----

# V2-Lite-like (no q compression, softmax routing, 2 shared experts) and V3-like (q_lora, sigmoid
# routing renormalised and scaled, 4 groups of which 2 are kept, selection bias, YaRN) at tiny size.
_DS_V2 = dict(n_embd=64, n_layer=3, n_head=4, q_lora=0, kv_lora=32, rope=8, nope=16, v=16,
              n_ff=96, n_expert=8, n_used=2, n_shared=2, n_ff_exp=32, dense_lead=1, gating=1,
              norm=False, scale=1.0, groups=0, groups_used=0, probs_bias=False, yarn=None,
              n_vocab=50, ctx=256)
_DS_V3 = dict(_DS_V2, q_lora=24, n_shared=1, gating=2, norm=True, scale=2.5, groups=4,
              groups_used=2, probs_bias=True, yarn=(4.0, 16, 0.1))


def write_deepseek2_gguf(path, cfg, layout, seed):
    """f32 deepseek2 file with llama.cpp's key and tensor names. The same seed gives the same
    model in both layouts: attn_kv_b is drawn, then stored whole ("kv_b") or as attn_k_b (W_kb[h]
    transposed) and attn_v_b ("split")."""
    c = cfg
    rng = np.random.default_rng(seed)
    a = "deepseek2."
    nh, nope, rope, v, r = c["n_head"], c["nope"], c["rope"], c["v"], c["kv_lora"]
    kvs = [("general.architecture", 8, "deepseek2"), (a + "context_length", 4, c["ctx"]),
           (a + "embedding_length", 4, c["n_embd"]), (a + "block_count", 4, c["n_layer"]),
           (a + "feed_forward_length", 4, c["n_ff"]), (a + "attention.head_count", 4, nh),
           (a + "attention.head_count_kv", 4, nh if layout == "kv_b" else 1),
           (a + "attention.layer_norm_rms_epsilon", 6, 1e-6), (a + "rope.freq_base", 6, 10000.0),
           (a + "rope.dimension_count", 4, rope), (a + "attention.kv_lora_rank", 4, r),
           (a + "expert_count", 4, c["n_expert"]), (a + "expert_used_count", 4, c["n_used"]),
           (a + "expert_shared_count", 4, c["n_shared"]),
           (a + "expert_feed_forward_length", 4, c["n_ff_exp"]),
           (a + "leading_dense_block_count", 4, c["dense_lead"]),
           (a + "expert_weights_scale", 6, c["scale"]), (a + "expert_weights_norm", 7, c["norm"]),
           (a + "expert_gating_func", 4, c["gating"])]
    if c["q_lora"]:
        kvs.append((a + "attention.q_lora_rank", 4, c["q_lora"]))
    if layout == "kv_b":
        kvs += [(a + "attention.key_length", 4, nope + rope), (a + "attention.value_length", 4, v)]
    else:
        kvs += [(a + "attention.key_length", 4, r + rope), (a + "attention.value_length", 4, r),
                (a + "attention.key_length_mla", 4, nope + rope),
                (a + "attention.value_length_mla", 4, v)]
    if c["groups"] > 1:
        kvs += [(a + "expert_group_count", 4, c["groups"]),
                (a + "expert_group_used_count", 4, c["groups_used"])]
    if c["yarn"]:
        factor, orig, log_mul = c["yarn"]
        kvs += [(a + "rope.scaling.type", 8, "yarn"), (a + "rope.scaling.factor", 6, factor),
                (a + "rope.scaling.original_context_length", 4, orig),
                (a + "rope.scaling.yarn_log_multiplier", 6, log_mul)]
    tensors = []

    def add(name, arr):  # arr in numpy order; ggml shape is reversed
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        tensors.append((name, list(reversed(arr.shape)), 0, arr.tobytes()))

    def mat(*shape, std=None):  # last axis is the input
        std = std if std is not None else 1.0 / math.sqrt(shape[-1])
        return rng.uniform(-math.sqrt(3) * std, math.sqrt(3) * std, size=shape)

    def norm(n):
        return 1.0 + mat(n, std=0.1)

    d = c["n_embd"]
    add("token_embd.weight", mat(c["n_vocab"], d, std=1.0))
    for il in range(c["n_layer"]):
        p = f"blk.{il}."
        add(p + "attn_norm.weight", norm(d))
        if c["q_lora"]:
            add(p + "attn_q_a.weight", mat(c["q_lora"], d))
            add(p + "attn_q_a_norm.weight", norm(c["q_lora"]))
            add(p + "attn_q_b.weight", mat(nh * (nope + rope), c["q_lora"]))
        else:
            add(p + "attn_q.weight", mat(nh * (nope + rope), d))
        add(p + "attn_kv_a_mqa.weight", mat(r + rope, d))
        add(p + "attn_kv_a_norm.weight", norm(r))
        kv_b = mat(nh * (nope + v), r)
        if layout == "kv_b":
            add(p + "attn_kv_b.weight", kv_b)
        else:
            per_head = kv_b.reshape(nh, nope + v, r)
            add(p + "attn_k_b.weight", per_head[:, :nope, :].transpose(0, 2, 1))
            add(p + "attn_v_b.weight", per_head[:, nope:, :])
        add(p + "attn_output.weight", mat(d, nh * v))
        add(p + "ffn_norm.weight", norm(d))
        if il < c["dense_lead"]:
            add(p + "ffn_gate.weight", mat(c["n_ff"], d))
            add(p + "ffn_up.weight", mat(c["n_ff"], d))
            add(p + "ffn_down.weight", mat(d, c["n_ff"]))
            continue
        E, fe = c["n_expert"], c["n_ff_exp"]
        add(p + "ffn_gate_inp.weight", mat(E, d, std=3.0 / math.sqrt(d)))
        if c["probs_bias"]:
            add(p + "exp_probs_b.bias", mat(E, std=0.1))
        add(p + "ffn_gate_exps.weight", mat(E, fe, d))
        add(p + "ffn_up_exps.weight", mat(E, fe, d))
        add(p + "ffn_down_exps.weight", mat(E, d, fe))
        if c["n_shared"]:
            fs = fe * c["n_shared"]
            add(p + "ffn_gate_shexp.weight", mat(fs, d))
            add(p + "ffn_up_shexp.weight", mat(fs, d))
            add(p + "ffn_down_shexp.weight", mat(d, fs))
    add("output_norm.weight", norm(d))
    add("output.weight", mat(c["n_vocab"], d))
    write_gguf(path, kvs, tensors)


class AbsorbedDeepseek2Ref(deepseek2_ref.Deepseek2Ref):
    """MLA in the absorbed form an engine runs over a latent cache: per head q_abs = W_kb[h]^T
    q_nope, scores against [c, k_pe] of every cached token, out = W_vb[h] (sum_s p_s c_s). No
    per-head key or value is ever formed."""

    def attention(self, L, h, cos, sin):
        hp = self.hp
        q_nope, q_pe, c, k_pe = self.mla_inputs(L, h, cos, sin)
        q_abs = np.einsum("hdr,thd->thr", L["W_kb"], q_nope)
        scores = np.einsum("thr,sr->hts", q_abs, c) + np.einsum("thd,sd->hts", q_pe, k_pe)
        p = self.causal_softmax(scores * hp.kq_scale())
        latent_out = np.einsum("hts,sr->thr", p, c)
        out = np.einsum("hvr,thr->thv", L["W_vb"], latent_out)
        return out.reshape(h.shape[0], -1) @ L["attn_output"].T


class Deepseek2Test(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.paths = {}
        for name, cfg in (("v2", _DS_V2), ("v3", _DS_V3)):
            for layout in ("kv_b", "split"):
                path = os.path.join(cls.tmp.name, f"{name}_{layout}.gguf")
                write_deepseek2_gguf(path, cfg, layout, seed=5)
                cls.paths[name, layout] = path
        rng = np.random.default_rng(11)
        cls.seqs = [rng.integers(0, _DS_V2["n_vocab"], size=n).tolist() for n in (1, 9, 40)]

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_hparams_of_both_layouts(self):
        for layout in ("kv_b", "split"):
            hp = deepseek2_ref.Deepseek2Ref(self.paths["v3", layout]).hp
            self.assertEqual((hp.qk_nope, hp.n_rot, hp.v_head_dim, hp.kv_lora_rank,
                              hp.q_lora_rank), (16, 8, 16, 32, 24))
            self.assertEqual((hp.gating, hp.n_group, hp.n_group_used), (2, 4, 2))
            self.assertTrue(hp.weights_norm)
            self.assertAlmostEqual(hp.yarn_log_mul, 0.1, places=6)
        self.assertEqual(deepseek2_ref.Deepseek2Ref(self.paths["v2", "kv_b"]).hp.q_lora_rank, 0)

    def test_kv_b_and_split_files_are_the_same_model(self):
        for name in ("v2", "v3"):
            kv_b = deepseek2_ref.Deepseek2Ref(self.paths[name, "kv_b"])
            split = deepseek2_ref.Deepseek2Ref(self.paths[name, "split"])
            self.assertFalse(kv_b.split_kv_b)
            self.assertTrue(split.split_kv_b)
            a, b = kv_b.forward_batch(self.seqs), split.forward_batch(self.seqs)
            self.assertGreater(a.std(), 0.3)
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-9, err_msg=name)

    def test_absorbed_attention_equals_naive(self):
        for key in (("v2", "kv_b"), ("v3", "split")):
            naive = deepseek2_ref.Deepseek2Ref(self.paths[key])
            absorbed = AbsorbedDeepseek2Ref(self.paths[key])
            np.testing.assert_allclose(absorbed.forward_batch(self.seqs),
                                       naive.forward_batch(self.seqs), rtol=0, atol=1e-9,
                                       err_msg=str(key))

    def test_yarn_scales_scores_not_the_rotation(self):
        m = deepseek2_ref.Deepseek2Ref(self.paths["v3", "kv_b"])
        mscale = 1 + float(np.float32(0.1)) * math.log(4.0)  # the file stores f32
        self.assertAlmostEqual(m.hp.kq_scale(), mscale ** 2 / math.sqrt(24), places=12)
        cos, sin = m.rope(50)
        np.testing.assert_allclose(cos ** 2 + sin ** 2, 1.0)
        m.hp.use_yarn_mscale = False
        self.assertAlmostEqual(m.hp.kq_scale(), 1 / math.sqrt(24), places=12)
        v2 = deepseek2_ref.Deepseek2Ref(self.paths["v2", "kv_b"])
        self.assertAlmostEqual(v2.hp.kq_scale(), 1 / math.sqrt(24), places=12)

    def test_group_limited_routing_keeps_to_the_best_groups(self):
        m = deepseek2_ref.Deepseek2Ref(self.paths["v3", "split"])
        hp, L = m.hp, m.layers[1]
        h = np.random.default_rng(3).standard_normal((200, hp.n_embd))
        chosen, weights, kept = m.route(L, h)
        scores = 1 / (1 + np.exp(-(h @ L["ffn_gate_inp"].T)))
        sel = scores + L["exp_probs_b"]
        per = hp.n_expert // hp.n_group
        for t in range(h.shape[0]):
            group_score = [sorted(sel[t, g * per:(g + 1) * per])[-2:] for g in range(hp.n_group)]
            best = sorted(range(hp.n_group), key=lambda g: -sum(group_score[g]))[:2]
            self.assertEqual(sorted(best), list(kept[t]))
            self.assertTrue(all(e // per in best for e in chosen[t]), (t, chosen[t], best))
            in_kept = [e for e in range(hp.n_expert) if e // per in best]
            want = sorted(in_kept, key=lambda e: -sel[t, e])[:hp.n_expert_used]
            self.assertEqual(list(chosen[t]), want)
            # Weights are the unbiased scores of the chosen, renormalised, times the scale.
            w = scores[t, chosen[t]]
            np.testing.assert_allclose(weights[t], w / w.sum() * 2.5)
        hp.use_groups = False
        ungrouped, _, _ = m.route(L, h)
        differs = np.any(np.sort(ungrouped, axis=1) != np.sort(chosen, axis=1), axis=1)
        self.assertGreater(differs.sum(), 0)  # the group limit changed some choices
        self.assertTrue(np.all(np.isfinite(weights)))


# ----- qwen2moe (Qwen1.5-MoE): a file written here, the MoE block against HF's formulation -----

_Q2 = dict(n_embd=64, n_layer=2, n_head=4, n_head_kv=2, n_ff=96, n_expert=6, n_used=2,
           n_ff_exp=32, n_ff_shexp=96, n_vocab=50, ctx=256)


def write_qwen2moe_gguf(path, c, seed):
    """f32 qwen2moe file with llama.cpp's key and tensor names (LLM_ARCH_QWEN2MOE's loader)."""
    rng = np.random.default_rng(seed)
    a = "qwen2moe."
    d, hd = c["n_embd"], c["n_embd"] // c["n_head"]
    kv = c["n_head_kv"] * hd
    kvs = [("general.architecture", 8, "qwen2moe"), (a + "context_length", 4, c["ctx"]),
           (a + "embedding_length", 4, d), (a + "block_count", 4, c["n_layer"]),
           (a + "feed_forward_length", 4, c["n_ff"]), (a + "attention.head_count", 4, c["n_head"]),
           (a + "attention.head_count_kv", 4, c["n_head_kv"]),
           (a + "attention.layer_norm_rms_epsilon", 6, 1e-6), (a + "rope.freq_base", 6, 10000.0),
           (a + "expert_count", 4, c["n_expert"]), (a + "expert_used_count", 4, c["n_used"]),
           (a + "expert_feed_forward_length", 4, c["n_ff_exp"]),
           (a + "expert_shared_feed_forward_length", 4, c["n_ff_shexp"])]
    tensors = []

    def add(name, arr):  # numpy order; the ggml shape is reversed
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        tensors.append((name, list(reversed(arr.shape)), 0, arr.tobytes()))

    def mat(*shape, std=None):
        std = std if std is not None else 1.0 / math.sqrt(shape[-1])
        return rng.uniform(-math.sqrt(3) * std, math.sqrt(3) * std, size=shape)

    E, fe, fs = c["n_expert"], c["n_ff_exp"], c["n_ff_shexp"]
    add("token_embd.weight", mat(c["n_vocab"], d, std=1.0))
    for il in range(c["n_layer"]):
        p = f"blk.{il}."
        add(p + "attn_norm.weight", 1.0 + mat(d, std=0.1))
        for name, rows in (("attn_q", d), ("attn_k", kv), ("attn_v", kv)):
            add(p + name + ".weight", mat(rows, d))
            add(p + name + ".bias", mat(rows, std=0.1))
        add(p + "attn_output.weight", mat(d, d))
        add(p + "ffn_norm.weight", 1.0 + mat(d, std=0.1))
        add(p + "ffn_gate_inp.weight", mat(E, d, std=3.0 / math.sqrt(d)))
        add(p + "ffn_gate_exps.weight", mat(E, fe, d))
        add(p + "ffn_up_exps.weight", mat(E, fe, d))
        add(p + "ffn_down_exps.weight", mat(E, d, fe))
        add(p + "ffn_gate_inp_shexp.weight", mat(d))  # 1-D: one gate logit per token
        add(p + "ffn_gate_shexp.weight", mat(fs, d))
        add(p + "ffn_up_shexp.weight", mat(fs, d))
        add(p + "ffn_down_shexp.weight", mat(d, fs))
    add("output_norm.weight", 1.0 + mat(d, std=0.1))
    add("output.weight", mat(c["n_vocab"], d))
    write_gguf(path, kvs, tensors)


class Qwen2MoeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.path = os.path.join(cls.tmp.name, "qwen2moe.gguf")
        write_qwen2moe_gguf(cls.path, _Q2, seed=9)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_hparams(self):
        hp = llama_ref.LlamaRef(self.path).hp
        self.assertEqual((hp.n_expert, hp.n_expert_used, hp.n_ff_exp, hp.n_ff_shexp),
                         (6, 2, 32, 96))
        self.assertTrue(hp.rope_neox)
        self.assertFalse(hp.moe_norm_weights)

    def test_moe_block_equals_hf_formulation(self):
        """HF's Qwen2MoeSparseMoeBlock (norm_topk_prob false), expert-major as HF loops:
        softmax(router), top-k probabilities as weights, plus sigmoid(shared_expert_gate(h)) *
        shared_expert(h)."""
        m = llama_ref.LlamaRef(self.path)
        L = m.layers[1]
        h = np.random.default_rng(4).standard_normal((60, _Q2["n_embd"]))
        logits = h @ L["ffn_gate_inp"].T
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        top = np.argsort(-p, axis=1)[:, :_Q2["n_used"]]
        want = np.zeros_like(h)
        for e in range(_Q2["n_expert"]):
            rows, slot = np.nonzero(top == e)
            x = h[rows]
            y = (llama_ref.silu(x @ L["ffn_gate_exps"][e].T) * (x @ L["ffn_up_exps"][e].T)) \
                @ L["ffn_down_exps"][e].T
            want[rows] += p[rows, e][:, None] * y
        shared = (llama_ref.silu(h @ L["ffn_gate_shexp"].T) * (h @ L["ffn_up_shexp"].T)) \
            @ L["ffn_down_shexp"].T
        gate = 1 / (1 + np.exp(-(h @ L["ffn_gate_inp_shexp"])))
        self.assertGreater(gate.std(), 0.05)  # the gate varies from token to token
        want += gate[:, None] * shared
        np.testing.assert_allclose(m.moe_ffn(L, h), want, rtol=0, atol=1e-12)

    def test_forward_and_switches(self):
        m = llama_ref.LlamaRef(self.path)
        seqs = [[1, 2, 3], list(range(5, 40))]
        base = m.forward_batch(seqs)
        self.assertGreater(base.std(), 0.3)
        np.testing.assert_allclose(m.forward(seqs[1][:10]), base[3:13], atol=1e-12)  # causal
        for attr, value in (("use_shared_expert", False), ("moe_norm_weights", True)):
            saved = getattr(m.hp, attr)
            setattr(m.hp, attr, value)
            try:
                self.assertGreater(np.abs(m.forward_batch(seqs) - base).max(), 1e-2, attr)
            finally:
                setattr(m.hp, attr, saved)


if __name__ == "__main__":
    unittest.main(verbosity=2)
