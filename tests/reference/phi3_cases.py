"""phi3 reference cases for compare_logits.py: Phi-3/3.5/4-mini files from make-model's phi3-tiny
and phi4-mini-tiny presets, what each file must carry (llama.cpp's phi3 loader and
convert_hf_to_gguf.py's Phi3MiniModel), and the features that must move the logits.

phi3-tiny: Phi-3.5-mini's structure at dim 128 (MHA, heads of 32, fused attn_qkv and gate/up
ffn_up, LongRoPE factors from an original context of 256 of 8192 with attn_factor
sqrt(1 + ln 32 / ln 256) = 1.27, Phi-3.5-mini's ratio, sliding_window 16384 > context, untied). phi4-mini-tiny: GQA 3:1, 24 of 32
dims rotated, tied, byte-level BPE. `max_model_len` is the context kvwarden and the reference are
set up for: above 256 the long factors apply, at or below it the short ones.
"""

import math

from gguf_reader import GGML_TYPES

_PHI3_TINY = dict(dim=128, layers=2, heads=4, kv_heads=4, ffn=256, n_rot=32, ctx=8192, orig=256,
                  window=16384, tied=False)
_PHI4_MINI_TINY = dict(_PHI3_TINY, dim=192, heads=6, kv_heads=2, ffn=512, n_rot=24, window=0,
                       tied=True)


def _case(preset, expect, flags=(), **kw):
    c = dict(arch="phi3", preset=preset, flags=tuple(flags), expect=expect, n_vocab=768,
             weight_type="f32", kv_dtype="f32", seed=1, lengths=(1, 23, 120), tol="f32",
             max_model_len=512)
    c.update(kw)
    return c


CASES = {
    # Long factors (max_model_len 512 > 256), past the original context in the 300-token row.
    "phi3_f32": _case("phi3-tiny", _PHI3_TINY, lengths=(1, 23, 300), seed=60),
    # Short factors (max_model_len 256 = the original context), f16 KV.
    "phi3_short_kv_f16": _case("phi3-tiny", _PHI3_TINY, max_model_len=256, kv_dtype="f16",
                               lengths=(80, 9), seed=61, tol="kv_f16"),
    # A window shorter than the rows (the KV manager's every-layer window), int8 KV.
    "phi3_window_kv_int8": _case("phi3-tiny", dict(_PHI3_TINY, window=16),
                                 flags=("--sliding-window", "16"), kv_dtype="int8",
                                 lengths=(100, 7), seed=62, tol="kv_int8"),
    "phi3_q8_0": _case("phi3-tiny", _PHI3_TINY, weight_type="q8_0", lengths=(40, 90), seed=63,
                       tol="q8_0"),
    # Every matrix Q5_0 (rows of 128: llama-quantize's fallback where K-quants cannot go).
    "phi3_q5_0": _case("phi3-tiny", _PHI3_TINY, weight_type="q5_0", lengths=(40, 90), seed=65,
                       tol="q5_0"),
    # Phi-4-mini: GQA, partial rotary, tied output.
    "phi4_mini_f32": _case("phi4-mini-tiny", _PHI4_MINI_TINY, seed=64),
}

_TYPE_BY_FLAG = {"f32": "F32", "f16": "F16", "q8_0": "Q8_0", "q5_0": "Q5_0"}


def file_errors(model, c):
    """What the generated file lacks of the case's phi3 features (empty: all there)."""
    f, hp, e = model.file, model.hp, c["expect"]
    errors = []

    def expect(what, got, want):
        if got != want:
            errors.append(f"{what}: file has {got!r}, case asked for {want!r}")

    a = "phi3."
    expect("architecture", f.get("general.architecture"), "phi3")
    expect("n_embd", hp.n_embd, e["dim"])
    expect("n_head", hp.n_head, e["heads"])
    expect("n_head_kv", hp.n_head_kv, e["kv_heads"])
    expect("rope.dimension_count", f.get(a + "rope.dimension_count"), e["n_rot"])
    expect("context_length", f.get(a + "context_length"), e["ctx"])
    expect("original_context_length", f.get(a + "rope.scaling.original_context_length"),
           e["orig"])
    expect("sliding_window (always written)", f.get(a + "attention.sliding_window"), e["window"])
    scale = e["ctx"] / e["orig"]
    attn = math.sqrt(1 + math.log(scale) / math.log(e["orig"])) if scale > 1 else 1.0
    got_attn = f.get(a + "rope.scaling.attn_factor")
    expect("attn_factor", got_attn is not None and abs(got_attn - attn) < 1e-6, True)
    expect("no rope.scaling.type", f.get(a + "rope.scaling.type"), None)
    expect("neox rope", hp.rope_neox, True)
    expect("tied (no output.weight)", not f.has_tensor("output.weight"), e["tied"])
    if f.get("tokenizer.ggml.model") == "llama":  # llama.cpp names it in any model called phi3
        expect("<|endoftext|> in the vocabulary",
               "<|endoftext|>" in f.get("tokenizer.ggml.tokens"), True)
    d, hd, ff = e["dim"], e["dim"] // e["heads"], e["ffn"]
    want = {"rope_factors_long.weight": [e["n_rot"] // 2],
            "rope_factors_short.weight": [e["n_rot"] // 2]}
    for il in range(hp.n_layer):
        p = f"blk.{il}."
        want[p + "attn_qkv.weight"] = [d, (e["heads"] + 2 * e["kv_heads"]) * hd]
        want[p + "attn_output.weight"] = [e["heads"] * hd, d]
        want[p + "ffn_up.weight"] = [d, 2 * ff]
        want[p + "ffn_down.weight"] = [ff, d]
        for absent in ("attn_q.weight", "attn_k.weight", "ffn_gate.weight"):
            expect(p + absent + " absent", f.has_tensor(p + absent), False)
    for name, shape in want.items():
        got = list(f.tensors[name].shape) if f.has_tensor(name) else None
        expect(f"{name} shape", got, shape)
    if model.rope_long is not None and model.rope_short is not None:
        expect("long and short factors differ",
               float(abs(model.rope_long - model.rope_short).max()) > 0.5, True)
    for name in ("blk.0.attn_qkv.weight", "blk.0.ffn_up.weight"):
        if f.has_tensor(name):
            expect(f"{name} type", GGML_TYPES[f.tensors[name].ggml_type][0],
                   _TYPE_BY_FLAG[c["weight_type"]])
    return errors


def feature_gaps(model, seqs, ours, c):
    """Max |ours - reference| with each phi3 feature changed in the reference: K and V rows of
    attn_qkv exchanged, the gate/up halves exchanged, the other LongRoPE set, no factors, no
    attention factor, and (when the case has one) no window."""
    hp = model.hp
    picked_long = hp.context_len > hp.rope_orig_ctx
    switches = [("swap_kv", True, "attn_qkv K and V rows exchanged"),
                ("swap_gate_up", True, "ffn_up gate and up halves exchanged"),
                ("longrope", "short" if picked_long else "long",
                 "the other LongRoPE factor set"),
                ("longrope", "none", "no LongRoPE factors"),
                ("use_attn_factor", False, "no rope attn_factor")]
    if 0 < hp.sliding_window < max(len(s) for s in seqs):
        switches.append(("sliding_window", 0, "no sliding window"))
    gaps = {}
    for attr, value, what in switches:
        saved = getattr(hp, attr)
        setattr(hp, attr, value)
        try:
            gaps[what] = float(abs(ours - model.forward_batch(seqs)).max())
        finally:
            setattr(hp, attr, saved)
    return gaps
