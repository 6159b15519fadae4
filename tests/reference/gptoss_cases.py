"""gpt-oss reference cases for compare_logits.py: files from make-model's gpt-oss-tiny preset
(gpt-oss-20b's structure at dim 128: heads of 32 so q is twice n_embd wide, GQA 4:1, even layers
windowed to 16, sinks, attention and expert biases, 16 MXFP4 experts of 64 top-4, YaRN x32 from
an original context of 64), what each file must carry (llama.cpp's openai-moe loader and
convert_hf_to_gguf.py's GptOssModel), and the features that must move the logits.
"""

from gguf_reader import GGML_TYPES

_TINY = dict(dim=128, layers=4, heads=8, kv_heads=2, head_dim=32, experts=16, used=4,
             expert_ffn=64, window=16)


def _case(expect=_TINY, flags=(), **kw):
    c = dict(arch="gpt-oss", preset="gpt-oss-tiny", flags=tuple(flags), expect=expect,
             n_vocab=768, weight_type="f32", kv_dtype="f32", seed=80, lengths=(1, 23, 90),
             tol="f32")
    c.update(kw)
    return c


# The rounding paths route every token to all 4 experts: with 16 experts top-4 some of ~400
# routings per case sit within rounding of a tie (margins of 1e-5 to 1e-2 logits over seeds
# 84-95), and a flipped choice is a legitimate difference, not an error. Selection and the
# top-k softmax are checked on the f32 case.
_ALL_USED = dict(_TINY, experts=4, used=4)
_ALL_USED_FLAGS = ("--experts", "4", "--experts-used", "4")

# f32 experts (make-model --expert-type f32) where a case tests something else: MXFP4 experts
# meet 8-bit activations (the int8 dot of kernels/packed.cc, as llama.cpp's), whose
# rounding is modelled in the reference (gptoss_ref.q8_0_activations) but still flips the odd
# quant on an upstream f32 / f16 rounding difference; gptoss_mxfp4 and the int8 / Q8_0 cases
# keep the file's MXFP4 experts.
_F32_EXPERTS = ("--expert-type", "f32")

CASES = {
    # All in f32 (f32 rounding only): routing selection and the top-k softmax.
    "gptoss_f32": _case(flags=_F32_EXPERTS, expert_type="F32"),
    "gptoss_kv_f16": _case(_ALL_USED, _ALL_USED_FLAGS + _F32_EXPERTS, kv_dtype="f16",
                           lengths=(70, 9), seed=81, tol="kv_f16_gptoss", expert_type="F32"),
    # Attention in f32, experts MXFP4 with 8-bit activations.
    "gptoss_mxfp4": _case(_ALL_USED, _ALL_USED_FLAGS, lengths=(60, 30), seed=85,
                          tol="mxfp4_gptoss"),
    "gptoss_kv_int8": _case(_ALL_USED, _ALL_USED_FLAGS, kv_dtype="int8", lengths=(60, 30),
                            seed=82, tol="kv_int8_gptoss"),
    # Attention matrices Q8_0 (8-bit activations), experts still MXFP4.
    "gptoss_q8_0": _case(_ALL_USED, _ALL_USED_FLAGS, weight_type="q8_0", lengths=(40, 50),
                         seed=84, tol="q8_0_gptoss"),
}

_TYPE_BY_FLAG = {"f32": "F32", "f16": "F16", "q8_0": "Q8_0"}

FEATURES = ("use_sinks", "use_window", "use_attn_out_bias", "use_router_bias", "use_expert_bias",
            "use_topk_softmax", "use_oai_swiglu")


def file_errors(model, c):
    """What the generated file lacks of the case's gpt-oss features (empty: all there)."""
    f, hp, e = model.file, model.hp, c["expect"]
    errors = []

    def expect(what, got, want):
        if got != want:
            errors.append(f"{what}: file has {got!r}, case asked for {want!r}")

    a = "gpt-oss."
    expect("architecture", f.get("general.architecture"), "gpt-oss")
    expect("n_embd", hp.n_embd, e["dim"])
    expect("n_head", hp.n_head, e["heads"])
    expect("n_head_kv", hp.n_head_kv, e["kv_heads"])
    expect("key_length", f.get(a + "attention.key_length"), e["head_dim"])
    expect("sliding_window", f.get(a + "attention.sliding_window"), e["window"])
    expect("expert_count", f.get(a + "expert_count"), e["experts"])
    expect("expert_used_count", f.get(a + "expert_used_count"), e["used"])
    expect("expert_feed_forward_length", f.get(a + "expert_feed_forward_length"),
           e["expert_ffn"])
    expect("rope.scaling.type", f.get(a + "rope.scaling.type"), "yarn")
    expect("no rope.dimension_count", f.get(a + "rope.dimension_count"), None)
    expect("tokenizer.ggml.pre", f.get("tokenizer.ggml.pre"), "gpt-4o")
    d, hd, ne, fe = e["dim"], e["head_dim"], e["experts"], e["expert_ffn"]
    q, kv = e["heads"] * hd, e["kv_heads"] * hd
    want = {"output.weight": [d, c["n_vocab"]]}
    for il in range(hp.n_layer):
        p = f"blk.{il}."
        want.update({p + "attn_q.weight": [d, q], p + "attn_q.bias": [q],
                     p + "attn_k.bias": [kv], p + "attn_v.bias": [kv],
                     p + "attn_output.weight": [q, d], p + "attn_output.bias": [d],
                     p + "attn_sinks.weight": [e["heads"]], p + "post_attention_norm.weight": [d],
                     p + "ffn_gate_inp.weight": [d, ne], p + "ffn_gate_inp.bias": [ne],
                     p + "ffn_gate_exps.weight": [d, fe, ne], p + "ffn_gate_exps.bias": [fe, ne],
                     p + "ffn_up_exps.bias": [fe, ne], p + "ffn_down_exps.weight": [fe, d, ne],
                     p + "ffn_down_exps.bias": [d, ne]})
        expect(p + "ffn_norm.weight absent", f.has_tensor(p + "ffn_norm.weight"), False)
    for name, shape in want.items():
        got = list(f.tensors[name].shape) if f.has_tensor(name) else None
        expect(f"{name} shape", got, shape)
    for name, want_type in (("blk.0.ffn_gate_exps.weight", c.get("expert_type", "MXFP4")),
                            ("blk.0.ffn_down_exps.weight", c.get("expert_type", "MXFP4")),
                            ("blk.0.attn_q.weight", _TYPE_BY_FLAG[c["weight_type"]])):
        if f.has_tensor(name):
            expect(f"{name} type", GGML_TYPES[f.tensors[name].ggml_type][0], want_type)
    return errors


def feature_gaps(model, seqs, ours):
    """Max |ours - reference| with each gpt-oss feature switched off in the reference (the top-k
    softmax only when the file routes to fewer experts than it has)."""
    hp = model.hp
    gaps = {}
    for attr in FEATURES:
        if attr == "use_topk_softmax" and hp.n_expert_used == hp.n_expert:
            continue
        setattr(hp, attr, False)
        try:
            gaps[attr] = float(abs(ours - model.forward_batch(seqs)).max())
        finally:
            setattr(hp, attr, True)
    return gaps
