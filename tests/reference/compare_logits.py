"""Compares kvwarden's logits with the independent numpy reference (llama_ref.py, deepseek2_ref.py),
one case a run.

  /usr/bin/python3 compare_logits.py --kvwarden PATH --case NAME --workdir DIR
  /usr/bin/python3 compare_logits.py --kvwarden PATH --case all --workdir DIR   (measure every case)

Each case builds a small random model with `kvwarden make-model` (or uses a real model from
$KVW_TEST_MODELS), checks that the file really carries the feature under test (metadata keys,
tensor types), runs every sequence of the case in ONE batched `kvwarden logits` call and compares
all positions. Exit status 0 = pass.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gptoss_cases  # noqa: E402
import phi3_cases  # noqa: E402
from deepseek2_ref import Deepseek2Ref  # noqa: E402
from gemma_ref import GemmaRef  # noqa: E402
from gptoss_ref import GptOssRef  # noqa: E402
from gguf_reader import GGML_TYPES  # noqa: E402
from llama_ref import LlamaRef, SpmVocab  # noqa: E402

# Tolerances: max |ours - reference| over all logits, and the share of positions whose argmax
# agrees, where a position also agrees when our pick is within the case's abs tolerance of the
# reference's best logit (random-weight models have many near-ties; with 768 tokens the top-2 gap
# is often < 0.05). The reference computes exactly in float64 from the dequantised weights; the
# engine's quantised paths also quantise activations to 8 bits (Q8_0 for Q4_0/Q8_0, Q8_K for
# K-quants), which is all of the difference there. Measured worst max-abs over 12 seeds, logit std
# about 1 (README.md has the table); limits are about 3x that, f32 ones per the project's 1e-3.
TOLERANCES = {
    # path: (max abs diff, min argmax agreement)   measured max abs diff
    "f32": (1e-3, 0.99),     # 1.4e-6 (tied 1.3e-5 with logit std 12; stories260K 6.2e-6)
    "kv_f16": (3e-3, 0.99),  # 1.2e-3 (f32 weights, f16 KV cache)
    # gemma3 with f16 KV: 2.6e-3 worst over seeds 74-78 (f32 KV: 4e-6, so all f16 rounding of
    # keys that the per-head norms keep of order one, through 6 layers).
    "kv_f16_gemma": (8e-3, 0.99),
    "kv_bf16": (3e-2, 0.99),  # 7.7e-3 (bf16 KV cache: 8 mantissa bits)
    # gpt-oss-tiny's experts see pre-activations of std ~3 (so the SwiGLU clamp at 7 engages)
    # and YaRN scales q.k by 1.35^2: rounding in K/V or activations moves its logits ~2x a
    # llama file's. Worst over seeds 81-91 (every expert used, so no routing flip): f16 KV
    # 5.0e-3, int8 KV 0.143, Q8_0 attention 0.196.
    "kv_f16_gptoss": (1.5e-2, 0.99),
    "kv_int8_gptoss": (0.3, 0.99),
    "q8_0_gptoss": (0.4, 0.99),
    # MXFP4 experts with 8-bit activations, modelled in the reference; what remains is the odd
    # quant that an f32 rounding difference moves across a rounding boundary: worst over seeds
    # 85-96 (the 7 where every feature matters) 0.062, 0.0 on two.
    "mxfp4_gptoss": (0.2, 0.99),
    "kv_int8": (6e-2, 0.99),  # 2.8e-2 (int8 KV, one f32 scale per token and kv head)
    # MLA int8: one scale per token for the whole latent row (kv_lora_rank + rope dims, 80 here,
    # 576 in DeepSeek-V2), so more rounding than one per 32-dim head: 5.7e-2 over 12 seeds.
    "kv_int8_mla": (0.15, 0.99),
    "f16": (1e-3, 0.99),     # 9.4e-7 (weights are exactly f16 on both sides)
    "bf16": (1e-3, 0.99),    # 1.0e-6
    "q8_0": (0.15, 0.99),    # 0.057
    "q4_0": (0.15, 0.99),    # 0.051
    "q4_k": (0.25, 0.99),    # 0.084
    "q5_k": (0.25, 0.99),    # 0.088
    "q6_k": (0.25, 0.99),    # 0.079
    # Q5_0 (llama-quantize's fallback on rows that are not a multiple of 256): the engine's int8
    # GEMM reads Q8_0 activations and the reference rounds them the same way (llama_ref.py), so
    # only f32 rounding remains: 3.1e-7 (llama and phi3 cases).
    "q5_0": (1e-3, 0.99),
    # Q4_1 / Q5_1 (llama-quantize's Q4_1 / Q5_1 files): the same, plus the min term (5.2e-7,
    # 4.8e-7). Where an activation lands within ~1e-5 of a Q8_0 rounding boundary, the engine's
    # float32 and the reference's float64 round it to neighbouring quants, and that one quant
    # moves the logits by 0.02-0.06: seeds 20-26 gave 6 exact runs of 12, the others one flip
    # (a probe found x / d = -84.50001 in float32 for one token). The cases use exact seeds.
    "q4_1": (1e-3, 0.99),
    "q5_1": (1e-3, 0.99),
}

_BASE = dict(arch="llama", dim=128, layers=2, heads=4, kv_heads=4, ffn=256, n_vocab=768,
             context=512, weight_type="f32", tied=False, rope_scaling="none", rope_scale=1.0,
             rope_orig_ctx=0, sliding_window=0, vocab_type="spm", kv_dtype="f32", seed=1,
             lengths=(64,), tol="f32", experts=0, experts_used=0)
# K-quants need row lengths that are multiples of 256 (dim and ffn).
_QUANT = dict(dim=256, heads=4, kv_heads=2, ffn=512, n_vocab=768, lengths=(40, 90))


def _case(**kw):
    c = dict(_BASE)
    c.update(kw)
    return c


CASES = {
    "llama_mha_f32": _case(),
    "llama_gqa_f32_batch": _case(heads=8, kv_heads=2, lengths=(1, 17, 300), seed=2),
    "llama_rope_linear": _case(rope_scaling="linear", rope_scale=4.0, rope_orig_ctx=64,
                               lengths=(200,), seed=3),
    "llama_rope_ntk": _case(rope_scaling="ntk", rope_scale=4.0, rope_orig_ctx=64, lengths=(200,),
                            seed=4),
    "llama_rope_yarn": _case(rope_scaling="yarn", rope_scale=4.0, rope_orig_ctx=64,
                             lengths=(200,), seed=5),
    "llama_sliding_window": _case(heads=4, kv_heads=2, sliding_window=16, lengths=(100, 7),
                                  seed=6),
    "qwen2_bias_gqa": _case(arch="qwen2", heads=8, kv_heads=2, vocab_type="bpe",
                            lengths=(33, 70), seed=7),
    "llama_tied": _case(tied=True, lengths=(50,), seed=8),
    "llama_kv_f16": _case(heads=8, kv_heads=2, kv_dtype="f16", lengths=(80,), seed=9,
                          tol="kv_f16"),
    "llama_kv_bf16": _case(heads=8, kv_heads=2, kv_dtype="bf16", lengths=(80,), seed=9,
                           tol="kv_bf16"),
    "llama_kv_int8": _case(heads=8, kv_heads=2, kv_dtype="int8", lengths=(80,), seed=9,
                           tol="kv_int8"),
    "llama_f16": _case(weight_type="f16", lengths=(60, 20), seed=10, tol="f16"),
    "llama_bf16": _case(weight_type="bf16", lengths=(60, 20), seed=11, tol="bf16"),
    "llama_q8_0": _case(weight_type="q8_0", seed=12, tol="q8_0", **_QUANT),
    "llama_q4_0": _case(weight_type="q4_0", seed=13, tol="q4_0", **_QUANT),
    "llama_q4_k": _case(weight_type="q4_k", seed=14, tol="q4_k", **_QUANT),
    "llama_q5_k": _case(weight_type="q5_k", seed=15, tol="q5_k", **_QUANT),
    "llama_q6_k": _case(weight_type="q6_k", seed=16, tol="q6_k", **_QUANT),
    # Rows of 128 and 256 (not all multiples of 256): the Q5_0 llama-quantize falls back to.
    "llama_q5_0": _case(weight_type="q5_0", heads=4, kv_heads=2, lengths=(40, 90), seed=19,
                        tol="q5_0"),
    "llama_q4_1": _case(weight_type="q4_1", heads=4, kv_heads=2, lengths=(40, 90), seed=24,
                        tol="q4_1"),
    "llama_q5_1": _case(weight_type="q5_1", heads=4, kv_heads=2, lengths=(40, 90), seed=22,
                        tol="q5_1"),
    # Mixtral-style MoE: 8 experts, top-2, batched so experts see tokens of several sequences.
    "llama_moe_f32": _case(heads=4, kv_heads=2, experts=8, experts_used=2, layers=3,
                           lengths=(1, 23, 120), seed=17),
    "llama_moe_top3_f16": _case(heads=4, kv_heads=2, experts=6, experts_used=3,
                                weight_type="f16", lengths=(70, 9), seed=18, tol="f16"),
    # Real trained weights and real token ids: a story prefix and the greedy prompt, batched.
    "stories260k": dict(real_model="stories260K.gguf", tol="f32",
                        texts=("Once upon a time, there was a little girl named Lily. She loved to "
                               "play outside in the park with her friends.",
                               "Once upon a time")),
}
# The same weights rewritten by `make-model --from` (model/relayout.h): phi3's fused tensors and
# qwen2's zero biases with NEOX rope, and Mistral's layout with a window of 8, far shorter than
# the sequences, so the window changes the logits (checked) and the reference applies it.
for _arch, _flags in (("phi3", ()), ("qwen2", ()), ("mistral_window", ("--sliding-window", "8"))):
    CASES["stories260k_" + _arch] = dict(CASES["stories260k"], relayout=(
        "llama" if _arch == "mistral_window" else _arch, *_flags))


# deepseek2 (MLA attention + DeepSeekMoE), built from make-model's presets with flags on top.
# `expect` is what the file must carry. MoE cases whose path rounds more than f32 weights and KV
# route every token to every expert (the top-k choice is then no discontinuity; the f32 cases
# test it): a near-tie in the router would otherwise pick another expert than the float64
# reference, a legitimate difference.
_DS_LITE = dict(q_lora=0, layout="kv_b", gating=1, groups=(0, 0), probs_bias=False, yarn=None,
                experts=8, used=2, shared=2, norm=False)
_DS_V3 = dict(q_lora=48, layout="split", gating=2, groups=(4, 2), probs_bias=True,
              yarn=(4.0, 128, 0.1), experts=8, used=2, shared=1, norm=True)


def _ds_case(preset, expect, flags=(), **kw):
    c = dict(arch="deepseek2", preset=preset, flags=tuple(flags), expect=expect, n_vocab=768,
             weight_type="f32", kv_dtype="f32", seed=1, lengths=(1, 23, 120), tol="f32",
             layout=None, same_model_as_kv_b=False)
    c.update(kw)
    return c


CASES.update({
    "deepseek2_lite_f32": _ds_case("deepseek-v2-lite-tiny", _DS_LITE, seed=32),
    # The split layout of the same seed: also checks it encodes the kv_b file's model.
    "deepseek2_lite_split_f32": _ds_case("deepseek-v2-lite-tiny", dict(_DS_LITE, layout="split"),
                                         layout="split", seed=32, same_model_as_kv_b=True),
    # q_lora, sigmoid routing in 4 groups (2 kept) with the selection bias, renormalised and
    # scaled weights, one shared expert, YaRN (factor 4 from 128), split layout; past 128 tokens.
    "deepseek2_v3_f32": _ds_case("deepseek-v3-tiny", _DS_V3, lengths=(1, 23, 200), seed=38,
                                 same_model_as_kv_b=True),
    "deepseek2_kv_f16": _ds_case("deepseek-v2-lite-tiny", dict(_DS_LITE, used=8),
                                 flags=("--experts-used", "8"), kv_dtype="f16", lengths=(80,),
                                 seed=34, tol="kv_f16"),
    "deepseek2_kv_int8": _ds_case("deepseek-v3-tiny",
                                  dict(_DS_V3, used=8, groups=(0, 0)),
                                  flags=("--expert-groups", "0", "--expert-groups-used", "0",
                                         "--experts-used", "8"),
                                  kv_dtype="int8", lengths=(80, 150), seed=35, tol="kv_int8_mla"),
    # Every matrix Q8_0 (rows are multiples of 32; the router stays f32), with q compression.
    "deepseek2_q8_0": _ds_case("deepseek-v2-lite-tiny", dict(_DS_LITE, used=8, q_lora=64),
                               flags=("--experts-used", "8", "--q-lora-rank", "64"),
                               weight_type="q8_0", lengths=(40, 90), seed=36, tol="q8_0"),
})

# qwen2moe (Qwen1.5-MoE / Qwen2-57B-A14B) from make-model's qwen2moe-tiny preset: qwen2 attention
# (q/k/v biases, NEOX rope, GQA 2:1), every layer softmax top-2 of 8 routed experts with the
# probabilities NOT renormalised, plus a shared expert gated per token by a sigmoid. `expect` is
# what the file must carry.
_Q2MOE_TINY = dict(dim=128, layers=2, heads=4, kv_heads=2, experts=8, used=2, ff_exp=64,
                   ff_shexp=256)


def _q2moe_case(preset, expect, flags=(), **kw):
    c = dict(arch="qwen2moe", preset=preset, flags=tuple(flags), expect=expect, n_vocab=768,
             weight_type="f32", kv_dtype="f32", seed=1, lengths=(1, 23, 120), tol="f32")
    c.update(kw)
    return c


CASES.update({
    "qwen2moe_f32": _q2moe_case("qwen2moe-tiny", _Q2MOE_TINY, seed=40),
})

# qwen3 (dense) from make-model's qwen3-tiny preset: heads of 64 where dim / heads is 32 (q and
# attn_output are 256 wide over a 128 embedding, key_length = value_length = 64), GQA 2:1,
# per-head Q/K RMSNorm before NEOX rope, no biases, tied output unless flags say otherwise.
_Q3_TINY = dict(dim=128, layers=2, heads=4, kv_heads=2, head_dim=64, tied=True)


def _q3_case(expect, flags=(), **kw):
    c = dict(arch="qwen3", preset="qwen3-tiny", flags=tuple(flags), expect=expect, n_vocab=768,
             weight_type="f32", kv_dtype="f32", seed=1, lengths=(1, 23, 120), tol="f32")
    c.update(kw)
    return c


# qwen3moe (Qwen3-30B-A3B's structure) from make-model's qwen3moe-tiny preset: the qwen3
# attention above with every layer softmax top-4 of 16 experts of 64, renormalised, untied.
_Q3MOE_TINY = dict(_Q3_TINY, tied=False, experts=16, used=4, ff_exp=64)

CASES.update({
    "qwen3moe_f32": _q3_case(_Q3MOE_TINY, arch="qwen3moe", preset="qwen3moe-tiny", seed=53),
    "qwen3_f32": _q3_case(_Q3_TINY, seed=50),
    "qwen3_untied_kv_f16": _q3_case(dict(_Q3_TINY, tied=False), flags=("--tied=false",),
                                    kv_dtype="f16", lengths=(80, 9), seed=51, tol="kv_f16"),
    # Untied: a tied output reads the std-1 embedding, logits spread ~11 and q8_0's rounding with
    # them, past the tolerance calibrated on std-1 logits.
    "qwen3_q8_0": _q3_case(dict(_Q3_TINY, tied=False), flags=("--tied=false",),
                           weight_type="q8_0", lengths=(40, 90), seed=52, tol="q8_0"),
})

# gemma2 / gemma3 from make-model's presets: heads of 64 over a 128 embedding, window 16 so the
# 120-token sequence crosses it. The presets keep the real soft-capping values (50 / 30), which
# barely bend logits of order one; the cases lower them so that the caps measurably matter.
# `features` are the reference switches that must each move the logits beyond the tolerance.
_G2_FEATURES = ("use_embd_scale", "use_post_norms", "use_attn_softcap", "use_final_softcap",
                "use_window", "use_gelu")
_G3_FEATURES = ("use_embd_scale", "use_post_norms", "use_qk_norm", "use_window", "use_local_rope",
                "use_gelu")
_G2_CAPS = ("--attn-softcap", "2", "--final-softcap", "3")


def _gemma_case(arch, features, flags=(), **kw):
    c = dict(arch=arch, preset=arch + "-tiny", flags=tuple(flags), features=features,
             n_vocab=768, weight_type="f32", kv_dtype="f32", seed=1, lengths=(1, 23, 120),
             tol="f32", tied=True)
    c.update(kw)
    return c


CASES.update({
    "gemma2_f32": _gemma_case("gemma2", _G2_FEATURES, _G2_CAPS, seed=70),
    "gemma2_kv_int8": _gemma_case("gemma2", _G2_FEATURES, _G2_CAPS, kv_dtype="int8",
                                  lengths=(80, 9), seed=71, tol="kv_int8"),
    # GeGLU instead of SwiGLU moves these logits ~0.7, under 5x q8_0's limit: the f32 and int8
    # cases show the activation matters; this one checks the rest through the Q8_0 paths.
    "gemma2_q8_0": _gemma_case("gemma2", tuple(f for f in _G2_FEATURES if f != "use_gelu"),
                               _G2_CAPS, weight_type="q8_0", lengths=(40, 90), seed=72,
                               tol="q8_0"),
    "gemma3_f32": _gemma_case("gemma3", _G3_FEATURES, seed=73),
    # Untied output, linear rope scaling on the global layer only, final soft-capping, f16 KV.
    "gemma3_untied_scaled_kv_f16": _gemma_case(
        "gemma3", _G3_FEATURES + ("use_final_softcap",),
        ("--tied=false", "--rope-scaling", "linear", "--rope-scale", "4", "--final-softcap", "3"),
        kv_dtype="f16", lengths=(80, 9), seed=74, tol="kv_f16_gemma", tied=False),
})

CASES.update(phi3_cases.CASES)
CASES.update(gptoss_cases.CASES)

# The smallest routing margin (gap between the last chosen and first unchosen expert's
# selection value, and between the last kept and first dropped group score) a case may have: a
# narrower one is decided by rounding, not by the engine. Cases that round more route to all.
ROUTING_MARGIN_MIN = {"f32": 1e-4, "f16": 1e-4, "bf16": 1e-3}

_GGML_TYPE_BY_FLAG = {"f32": "F32", "f16": "F16", "bf16": "BF16", "q8_0": "Q8_0", "q4_0": "Q4_0",
                      "q4_k": "Q4_K", "q5_k": "Q5_K", "q6_k": "Q6_K", "q5_0": "Q5_0",
                      "q4_1": "Q4_1", "q5_1": "Q5_1"}


class CaseFailure(Exception):
    pass


def _run(cmd):
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise CaseFailure(f"command failed ({proc.returncode}): {' '.join(cmd)}\n"
                          f"stdout:\n{proc.stdout[-2000:]}\nstderr:\n{proc.stderr[-4000:]}")
    return time.monotonic() - t0


def make_model(kvw, c, path):
    cmd = [kvw, "make-model", "--out", path, "--arch", c["arch"], "--dim", str(c["dim"]),
           "--layers", str(c["layers"]), "--heads", str(c["heads"]), "--kv-heads",
           str(c["kv_heads"]), "--ffn", str(c["ffn"]), "--n-vocab", str(c["n_vocab"]),
           "--context", str(c["context"]), "--weight-type", c["weight_type"], "--seed",
           str(c["seed"]), "--vocab-type", c["vocab_type"]]
    if c["tied"]:
        cmd.append("--tied")
    if c["rope_scaling"] != "none":
        cmd += ["--rope-scaling", c["rope_scaling"], "--rope-scale", str(c["rope_scale"]),
                "--rope-orig-ctx", str(c["rope_orig_ctx"])]
    if c["sliding_window"]:
        cmd += ["--sliding-window", str(c["sliding_window"])]
    if c["experts"]:
        cmd += ["--experts", str(c["experts"]), "--experts-used", str(c["experts_used"])]
    _run(cmd)


def make_deepseek2_model(kvw, c, path, layout=None):
    cmd = [kvw, "make-model", "--out", path, "--preset", c["preset"], "--n-vocab",
           str(c["n_vocab"]), "--weight-type", c["weight_type"], "--seed", str(c["seed"])]
    cmd += list(c["flags"])
    layout = layout or c["layout"]
    if layout:
        cmd += ["--mla-layout", layout]
    _run(cmd)


def make_preset_model(kvw, c, path):
    cmd = [kvw, "make-model", "--out", path, "--preset", c["preset"], "--n-vocab",
           str(c["n_vocab"]), "--weight-type", c["weight_type"], "--seed", str(c["seed"])]
    _run(cmd + list(c["flags"]))


def check_qwen3_file(model, c):
    """The qwen3 file must carry what llama.cpp's qwen3 loader reads, or the case proves nothing."""
    f, hp, e = model.file, model.hp, c["expect"]
    errors = []

    def expect(what, got, want):
        if got != want:
            errors.append(f"{what}: file has {got!r}, case asked for {want!r}")

    a = c["arch"] + "."
    expect("architecture", f.get("general.architecture"), c["arch"])
    expect("n_embd", hp.n_embd, e["dim"])
    expect("n_layer", hp.n_layer, e["layers"])
    expect("n_head", hp.n_head, e["heads"])
    expect("n_head_kv", hp.n_head_kv, e["kv_heads"])
    expect("n_vocab", model.n_vocab, c["n_vocab"])
    expect("key_length", f.get(a + "attention.key_length"), e["head_dim"])
    expect("value_length", f.get(a + "attention.value_length"), e["head_dim"])
    # As the converter: no rope.dimension_count, the whole key_length head rotates.
    expect("rope.dimension_count absent", f.get(a + "rope.dimension_count"), None)
    expect("rotated dims", hp.n_rot, e["head_dim"])
    expect("head length differs from dim / heads", e["head_dim"] != e["dim"] // e["heads"], True)
    expect("neox rope", hp.rope_neox, True)
    expect("tied (no output.weight)", not f.has_tensor("output.weight"), e["tied"])
    expect("q bias present", f.has_tensor("blk.0.attn_q.bias"), False)
    d, hd = e["dim"], e["head_dim"]
    want_shapes = {  # ggml order: shape[0] is the row length
        "attn_q.weight": [d, e["heads"] * hd],
        "attn_k.weight": [d, e["kv_heads"] * hd],
        "attn_v.weight": [d, e["kv_heads"] * hd],
        "attn_output.weight": [e["heads"] * hd, d],
        "attn_q_norm.weight": [hd],
        "attn_k_norm.weight": [hd],
    }
    for il in range(hp.n_layer):
        for k, shape in want_shapes.items():
            name = f"blk.{il}.{k}"
            got = list(f.tensors[name].shape) if f.has_tensor(name) else None
            expect(f"{name} shape", got, shape)
    moe = c["arch"] == "qwen3moe"
    if moe:
        expect("experts", hp.n_expert, e["experts"])
        expect("experts used", hp.n_expert_used, e["used"])
        expect("expert_feed_forward_length", f.get(a + "expert_feed_forward_length"), e["ff_exp"])
        expect("weights renormalised", hp.moe_norm_weights, True)
        expect("no shared expert", f.has_tensor("blk.0.ffn_gate_shexp.weight"), False)
        for il in range(hp.n_layer):
            for k, shape in {"ffn_gate_inp.weight": [d, e["experts"]],
                             "ffn_gate_exps.weight": [d, e["ff_exp"], e["experts"]],
                             "ffn_up_exps.weight": [d, e["ff_exp"], e["experts"]],
                             "ffn_down_exps.weight": [e["ff_exp"], d, e["experts"]]}.items():
                name = f"blk.{il}.{k}"
                got = list(f.tensors[name].shape) if f.has_tensor(name) else None
                expect(f"{name} shape", got, shape)
    want_type = _GGML_TYPE_BY_FLAG[c["weight_type"]]
    for name in ("blk.0.attn_q.weight",
                 "blk.0.ffn_down_exps.weight" if moe else "blk.0.ffn_down.weight"):
        expect(f"{name} type", GGML_TYPES[f.tensors[name].ggml_type][0], want_type)
    if errors:
        raise CaseFailure("generated model does not match the case:\n  " + "\n  ".join(errors))


def check_gemma_file(model, c):
    """The gemma file must carry what llama.cpp's gemma2/gemma3 loaders read."""
    f, hp = model.file, model.hp
    errors = []

    def expect(what, got, want):
        if got != want:
            errors.append(f"{what}: file has {got!r}, case asked for {want!r}")

    a = c["arch"] + "."
    gemma2 = c["arch"] == "gemma2"
    expect("architecture", f.get("general.architecture"), c["arch"])
    expect("n_embd", hp.n_embd, 128)
    expect("key_length", f.get(a + "attention.key_length"), 64)
    expect("value_length", f.get(a + "attention.value_length"), 64)
    expect("rope.dimension_count absent", f.get(a + "rope.dimension_count"), None)
    expect("sliding_window", f.get(a + "attention.sliding_window"), 16)
    expect("no space prefix", f.get("tokenizer.ggml.add_space_prefix"), False)
    expect("output.weight", f.has_tensor("output.weight"), not c["tied"])
    if gemma2:
        expect("rope.freq_base absent (converter)", f.get(a + "rope.freq_base"), None)
        expect("attn_logit_softcapping", f.get(a + "attn_logit_softcapping"), 2.0)
        expect("final_logit_softcapping", f.get(a + "final_logit_softcapping"), 3.0)
        expect("local layers", [hp.is_local(i) for i in range(hp.n_layer)],
               [True, False, True, False])
    else:
        expect("rope.freq_base", f.get(a + "rope.freq_base"), 1e6)
        expect("rope.freq_base_swa", f.get(a + "rope.freq_base_swa"), 1e4)
        expect("local layers", [hp.is_local(i) for i in range(hp.n_layer)],
               [True] * 5 + [False])
        expect("attn_logit_softcapping absent", f.get(a + "attn_logit_softcapping"), None)
    d, hd = 128, 64
    want = {"attn_q.weight": [d, hp.n_head * hd], "attn_k.weight": [d, hp.n_head_kv * hd],
            "attn_output.weight": [hp.n_head * hd, d], "post_attention_norm.weight": [d],
            "ffn_norm.weight": [d], "post_ffw_norm.weight": [d]}
    if not gemma2:
        want.update({"attn_q_norm.weight": [hd], "attn_k_norm.weight": [hd]})
    for il in range(hp.n_layer):
        for k, shape in want.items():
            name = f"blk.{il}.{k}"
            got = list(f.tensors[name].shape) if f.has_tensor(name) else None
            expect(f"{name} shape", got, shape)
    want_type = _GGML_TYPE_BY_FLAG[c["weight_type"]]
    expect("blk.0.attn_q type", GGML_TYPES[f.tensors["blk.0.attn_q.weight"].ggml_type][0],
           want_type)
    if errors:
        raise CaseFailure("generated model does not match the case:\n  " + "\n  ".join(errors))


def check_qwen2moe_file(model, c):
    """The qwen2moe file must carry what llama.cpp's loader reads, or the case proves nothing."""
    f, hp, e = model.file, model.hp, c["expect"]
    errors = []

    def expect(what, got, want):
        if got != want:
            errors.append(f"{what}: file has {got!r}, case asked for {want!r}")

    a = "qwen2moe."
    expect("architecture", f.get("general.architecture"), "qwen2moe")
    expect("n_embd", hp.n_embd, e["dim"])
    expect("n_layer", hp.n_layer, e["layers"])
    expect("n_head", hp.n_head, e["heads"])
    expect("n_head_kv", hp.n_head_kv, e["kv_heads"])
    expect("n_vocab", model.n_vocab, c["n_vocab"])
    expect("experts", hp.n_expert, e["experts"])
    expect("experts used", hp.n_expert_used, e["used"])
    expect("expert_feed_forward_length", f.get(a + "expert_feed_forward_length"), e["ff_exp"])
    expect("expert_shared_feed_forward_length", f.get(a + "expert_shared_feed_forward_length"),
           e["ff_shexp"])
    expect("neox rope", hp.rope_neox, True)
    expect("weights renormalised", hp.moe_norm_weights, False)
    expect("output.weight present (qwen2moe never ties)", f.has_tensor("output.weight"), True)
    d, hd = e["dim"], e["dim"] // e["heads"]
    want_shapes = {  # ggml order: shape[0] is the row length
        "attn_q.bias": [d],
        "attn_k.bias": [e["kv_heads"] * hd],
        "attn_v.bias": [e["kv_heads"] * hd],
        "ffn_gate_inp.weight": [d, e["experts"]],
        "ffn_gate_exps.weight": [d, e["ff_exp"], e["experts"]],
        "ffn_up_exps.weight": [d, e["ff_exp"], e["experts"]],
        "ffn_down_exps.weight": [e["ff_exp"], d, e["experts"]],
        "ffn_gate_inp_shexp.weight": [d],
        "ffn_gate_shexp.weight": [d, e["ff_shexp"]],
        "ffn_up_shexp.weight": [d, e["ff_shexp"]],
        "ffn_down_shexp.weight": [e["ff_shexp"], d],
    }
    for il in range(hp.n_layer):  # every layer is MoE with the shared expert
        for name, shape in want_shapes.items():
            full = f"blk.{il}.{name}"
            if full not in f.tensors:
                errors.append(f"{full}: missing")
            else:
                expect(f"{full} shape", list(f.tensors[full].shape), shape)
        if f.has_tensor(f"blk.{il}.ffn_gate.weight"):
            errors.append(f"blk.{il}: a dense ffn_gate in a qwen2moe file")
    want_type = _GGML_TYPE_BY_FLAG[c["weight_type"]]
    typed = [(n, want_type) for n in ("blk.0.attn_q.weight", "blk.0.ffn_down_exps.weight",
                                      "blk.0.ffn_down_shexp.weight")]
    typed += [("blk.0.ffn_gate_inp.weight", "F32"), ("blk.0.ffn_gate_inp_shexp.weight", "F32")]
    for name, want in typed:
        if name in f.tensors:
            expect(f"{name} type", GGML_TYPES[f.tensors[name].ggml_type][0], want)
    if errors:
        raise CaseFailure("generated model does not match the case:\n  " + "\n  ".join(errors))


def check_deepseek2_file(model, c):
    """The deepseek2 file must carry every feature the case names, or the case proves nothing."""
    f, hp, e = model.file, model.hp, c["expect"]
    errors = []

    def expect(what, got, want):
        if got != want:
            errors.append(f"{what}: file has {got!r}, case asked for {want!r}")

    a = "deepseek2."
    split = e["layout"] == "split"
    expect("architecture", f.get("general.architecture"), "deepseek2")
    expect("n_vocab", model.n_vocab, c["n_vocab"])
    expect("q_lora_rank key present", f.get(a + "attention.q_lora_rank") is not None,
           e["q_lora"] > 0)
    expect("q_lora_rank", hp.q_lora_rank, e["q_lora"])
    expect("q projection", f.has_tensor("blk.0.attn_q_a.weight"), e["q_lora"] > 0)
    expect("attn_kv_b present", f.has_tensor("blk.0.attn_kv_b.weight"), not split)
    expect("attn_k_b/attn_v_b present", f.has_tensor("blk.0.attn_k_b.weight") and
           f.has_tensor("blk.0.attn_v_b.weight"), split)
    expect("key_length_mla present", f.get(a + "attention.key_length_mla") is not None, split)
    expect("head_count_kv", hp.n_head_kv, 1 if split else hp.n_head)
    expect("experts", hp.n_expert, e["experts"])
    expect("experts used", hp.n_expert_used, e["used"])
    expect("shared experts", hp.n_expert_shared, e["shared"])
    lead = hp.n_dense_lead
    expect("shared expert tensors", f.has_tensor(f"blk.{lead}.ffn_gate_shexp.weight"),
           e["shared"] > 0)
    expect("dense lead layer", f.has_tensor("blk.0.ffn_gate.weight"), lead > 0)
    expect("gating func", f.get(a + "expert_gating_func"), e["gating"])
    expect("expert groups", (hp.n_group, hp.n_group_used) if hp.n_group > 1 else (0, 0),
           e["groups"])
    expect("probs bias tensor", f.has_tensor(f"blk.{lead}.exp_probs_b.bias"), e["probs_bias"])
    expect("weights norm", hp.weights_norm, e["norm"])
    if e["yarn"]:
        factor, orig, log_mul = e["yarn"]
        expect("rope scaling", (hp.rope_scaling, hp.rope_scale, hp.rope_orig_ctx),
               ("yarn", factor, orig))
        expect("yarn_log_multiplier", round(hp.yarn_log_mul, 6), log_mul)
    else:
        expect("rope scaling", hp.rope_scaling, "none")
    want_type = _GGML_TYPE_BY_FLAG[c["weight_type"]]
    names = ["blk.0.attn_kv_a_mqa.weight", "blk.0.attn_output.weight",
             "blk.0.attn_q_b.weight" if e["q_lora"] else "blk.0.attn_q.weight",
             "blk.0.attn_k_b.weight" if split else "blk.0.attn_kv_b.weight",
             f"blk.{lead}.ffn_down_exps.weight"]
    router = f"blk.{lead}.ffn_gate_inp.weight"
    for name, want in [(n, want_type) for n in names] + [(router, "F32")]:
        if name not in f.tensors:
            errors.append(f"{name}: missing")
        else:
            expect(f"{name} type", GGML_TYPES[f.tensors[name].ggml_type][0], want)
    if errors:
        raise CaseFailure("generated model does not match the case:\n  " + "\n  ".join(errors))


def check_model_file(model, c):
    """The generated file must really carry the feature under test, or the case proves nothing."""
    f, hp = model.file, model.hp
    errors = []

    def expect(what, got, want):
        if got != want:
            errors.append(f"{what}: file has {got!r}, case asked for {want!r}")

    expect("architecture", hp.arch, c["arch"])
    expect("n_embd", hp.n_embd, c["dim"])
    expect("n_layer", hp.n_layer, c["layers"])
    expect("n_head", hp.n_head, c["heads"])
    expect("n_head_kv", hp.n_head_kv, c["kv_heads"])
    expect("n_vocab", model.n_vocab, c["n_vocab"])
    moe = c["experts"] > 0
    expect("experts", hp.n_expert, c["experts"])
    expect("experts used", hp.n_expert_used, c["experts_used"])
    if moe:
        expect("expert tensor shape", model.layers[0]["ffn_gate_exps"].shape,
               (c["experts"], c["ffn"], c["dim"]))
    else:
        expect("ffn rows", model.layers[0]["ffn_gate"].shape[0], c["ffn"])
    expect("rope scaling", hp.rope_scaling, c["rope_scaling"])
    if c["rope_scaling"] != "none":
        expect("rope scale", hp.rope_scale, c["rope_scale"])
        expect("rope original context", hp.rope_orig_ctx, c["rope_orig_ctx"])
    expect("sliding window", hp.sliding_window, c["sliding_window"])
    expect("tied (no output.weight)", not f.has_tensor("output.weight"), c["tied"])
    if c["arch"] == "qwen2":
        expect("qwen2 q bias present", f.has_tensor("blk.0.attn_q.bias"), True)
    want_type = _GGML_TYPE_BY_FLAG[c["weight_type"]]
    for name in ("blk.0.attn_q.weight", "blk.0.ffn_down_exps.weight" if moe
                 else "blk.0.ffn_down.weight"):
        expect(f"{name} type", GGML_TYPES[f.tensors[name].ggml_type][0], want_type)
    if errors:
        raise CaseFailure("generated model does not match the case:\n  " + "\n  ".join(errors))


def run_logits(kvw, model_path, sequences, workdir, n_vocab, kv_dtype, threads, max_model_len=0):
    batch = os.path.join(workdir, "batch.json")
    out = os.path.join(workdir, "logits.bin")
    with open(batch, "w") as fh:
        json.dump({"sequences": [list(map(int, s)) for s in sequences]}, fh)
    if os.path.exists(out):
        os.remove(out)
    cmd = [kvw, "logits", "--model", model_path, "--tokens-file", batch, "--out", out,
           "--threads", str(threads), "--kv-dtype", kv_dtype]
    if max_model_len:
        cmd += ["--max-model-len", str(max_model_len)]
    seconds = _run(cmd)
    raw = np.fromfile(out, dtype="<f4")
    n_tok = sum(len(s) for s in sequences)
    if raw.size != n_tok * n_vocab:
        raise CaseFailure(f"logits.bin has {raw.size} floats, expected {n_tok} x {n_vocab}")
    return raw.reshape(n_tok, n_vocab).astype(np.float64), seconds


def compare(ours, ref, tol_name):
    max_abs, min_agree = TOLERANCES[tol_name]
    if not np.all(np.isfinite(ours)):
        raise CaseFailure("our logits contain NaN/Inf")
    diff = np.abs(ours - ref)
    rows = np.arange(ref.shape[0])
    ours_pick, ref_pick = ours.argmax(axis=1), ref.argmax(axis=1)
    near_best = ref[rows, ours_pick] >= ref[rows, ref_pick] - max_abs
    stats = {
        "max_abs_diff": float(diff.max()),
        "mean_abs_diff": float(diff.mean()),
        "ref_logit_std": float(ref.std()),
        "argmax_exact": float(np.mean(ours_pick == ref_pick)),
        "argmax_agree": float(np.mean((ours_pick == ref_pick) | near_best)),
        "tolerance": max_abs,
    }
    worst = np.unravel_index(int(diff.argmax()), diff.shape)
    stats["worst_position"] = [int(worst[0]), int(worst[1])]
    failures = []
    if stats["max_abs_diff"] >= max_abs:
        failures.append(f"max abs diff {stats['max_abs_diff']:.3e} >= {max_abs:.1e}")
    if stats["argmax_agree"] < min_agree:
        failures.append(f"argmax agreement {stats['argmax_agree']:.4f} < {min_agree}")
    return stats, failures


def _deepseek2_features_matter(model, seqs, ours, max_abs):
    """Each DeepSeek feature the file has, removed from the reference, must move the logits by
    > 100x the tolerance: shared experts, YaRN's attention mscale, the selection bias, the group
    limit, and top-k itself (one expert per token). Paths whose tolerance is within 100x of the
    logits' own spread (std ~1: int8 KV, quantised weights) need 5x: with the feature off the
    comparison would still fail clearly."""
    hp = model.hp
    factor = 100 if max_abs < 0.01 else 5
    switches = []
    if hp.n_expert_shared > 0:
        switches.append(("use_shared_experts", False, "shared experts dropped"))
    if hp.rope_scaling == "yarn":
        switches.append(("use_yarn_mscale", False, "yarn mscale dropped"))
    top_k = 0 < hp.n_expert_used < hp.n_expert  # else selection, bias and groups cannot matter
    if top_k and any(L.get("exp_probs_b") is not None for L in model.layers):
        switches.append(("use_probs_bias", False, "selection bias dropped"))
    if top_k and hp.n_group > 1:
        switches.append(("use_groups", False, "group limit dropped"))
    if hp.n_expert_used > 1:
        switches.append(("n_expert_used", 1, "one expert per token"))
    gaps = {}
    for attr, value, what in switches:
        saved = getattr(hp, attr)
        setattr(hp, attr, value)
        try:
            gaps[what] = float(np.abs(ours - model.forward_batch(seqs)).max())
        finally:
            setattr(hp, attr, saved)
    weak = {k: v for k, v in gaps.items() if v < factor * max_abs}
    if weak:
        raise CaseFailure(f"features that barely change the logits: {weak}: case is vacuous")
    return gaps


def _qwen2moe_features_matter(model, seqs, ours, max_abs):
    """Each qwen2moe feature, changed in the reference, must move the logits by > 100x the
    tolerance: the shared expert dropped, the routed weights renormalised (Mixtral's rule, which
    llama.cpp does not apply to qwen2moe), one expert per token, every expert per token."""
    hp = model.hp
    switches = [("use_shared_expert", False, "shared expert dropped"),
                ("moe_norm_weights", True, "routed weights renormalised")]
    if hp.n_expert_used > 1:
        switches.append(("n_expert_used", 1, "one expert per token"))
    if hp.n_expert_used < hp.n_expert:
        switches.append(("n_expert_used", hp.n_expert, "every expert per token"))
    gaps = {}
    for attr, value, what in switches:
        saved = getattr(hp, attr)
        setattr(hp, attr, value)
        try:
            gaps[what] = float(np.abs(ours - model.forward_batch(seqs)).max())
        finally:
            setattr(hp, attr, saved)
    weak = {k: v for k, v in gaps.items() if v < 100 * max_abs}
    if weak:
        raise CaseFailure(f"features that barely change the logits: {weak}: case is vacuous")
    return gaps


def _qwen3_features_matter(model, seqs, ours, max_abs):
    """Q/K norms dropped; qwen3moe also: weights not renormalised (qwen2moe's rule), one expert
    per token, every expert per token. Each must move the logits by > 100x the tolerance (5x on
    the rounding paths, as deepseek2)."""
    hp = model.hp
    factor = 100 if max_abs < 0.01 else 5
    switches = [("use_qk_norm", False, "Q/K norms dropped")]
    if hp.n_expert > 0:
        switches.append(("moe_norm_weights", False, "routed weights not renormalised"))
        switches.append(("n_expert_used", 1, "one expert per token"))
        switches.append(("n_expert_used", hp.n_expert, "every expert per token"))
    gaps = {}
    for attr, value, what in switches:
        saved = getattr(hp, attr)
        setattr(hp, attr, value)
        try:
            gaps[what] = float(np.abs(ours - model.forward_batch(seqs)).max())
        finally:
            setattr(hp, attr, saved)
    weak = {k: v for k, v in gaps.items() if v < factor * max_abs}
    if weak:
        raise CaseFailure(f"features that barely change the logits: {weak}: case is vacuous")
    return gaps


def _gemma_features_matter(model, seqs, ours, c, max_abs):
    """Each of the case's gemma features, switched off in the reference, must move the logits by
    > 100x the tolerance (5x on the rounding paths, as deepseek2)."""
    hp = model.hp
    factor = 100 if max_abs < 0.01 else 5
    gaps = {}
    for attr in c["features"]:
        setattr(hp, attr, False)
        try:
            gaps[attr] = float(np.abs(ours - model.forward_batch(seqs)).max())
        finally:
            setattr(hp, attr, True)
    weak = {k: v for k, v in gaps.items() if v < factor * max_abs}
    if weak:
        raise CaseFailure(f"features that barely change the logits: {weak}: case is vacuous")
    return gaps


def _phi3_features_matter(model, seqs, ours, c, max_abs):
    """Each phi3 feature changed in the reference must move the logits by > 100x the tolerance
    (5x on the rounding paths, as deepseek2)."""
    factor = 100 if max_abs < 0.01 else 5
    gaps = phi3_cases.feature_gaps(model, seqs, ours, c)
    weak = {k: v for k, v in gaps.items() if v < factor * max_abs}
    if weak:
        raise CaseFailure(f"features that barely change the logits: {weak}: case is vacuous")
    return gaps


def check_feature_matters(model, seqs, ours, c, max_abs):
    """With the case's feature switched off the reference must disagree with our logits, so a
    case cannot pass because its model happens to be insensitive to the feature."""
    hp = model.hp
    if c["arch"] in ("gemma2", "gemma3"):
        return _gemma_features_matter(model, seqs, ours, c, max_abs)
    if c["arch"] == "phi3":
        return _phi3_features_matter(model, seqs, ours, c, max_abs)
    if c["arch"] == "gpt-oss":
        factor = 100 if max_abs < 0.01 else 5
        gaps = gptoss_cases.feature_gaps(model, seqs, ours)
        weak = {k: v for k, v in gaps.items() if v < factor * max_abs}
        if weak:
            raise CaseFailure(f"features that barely change the logits: {weak}: case is vacuous")
        return gaps
    if c["arch"] == "deepseek2":
        return _deepseek2_features_matter(model, seqs, ours, max_abs)
    if c["arch"] == "qwen2moe":
        return _qwen2moe_features_matter(model, seqs, ours, max_abs)
    if c["arch"] in ("qwen3", "qwen3moe"):
        return _qwen3_features_matter(model, seqs, ours, max_abs)
    if c["experts"]:
        # Routing must matter both ways: one expert per token, and every expert per token.
        gaps = []
        for used in (1, hp.n_expert):
            saved_used, hp.n_expert_used = hp.n_expert_used, used
            try:
                gaps.append(float(np.abs(ours - model.forward_batch(seqs)).max()))
            finally:
                hp.n_expert_used = saved_used
        if min(gaps) < 100 * max_abs:
            raise CaseFailure(f"other expert counts change logits by only {min(gaps):.2e}")
        return min(gaps)
    saved = (hp.rope_scaling, hp.sliding_window)
    if c["rope_scaling"] != "none":
        hp.rope_scaling = "none"
    elif c["sliding_window"]:
        hp.sliding_window = 0
    else:
        return None
    try:
        off = model.forward_batch(seqs)
    finally:
        hp.rope_scaling, hp.sliding_window = saved
    gap = float(np.abs(ours - off).max())
    if gap < 100 * max_abs:
        raise CaseFailure(f"feature off changes logits by only {gap:.2e}: case is vacuous")
    return gap


def _window_matters(model, seqs, ours, max_abs):
    saved, model.hp.sliding_window = model.hp.sliding_window, 0
    try:
        gap = float(np.abs(ours - model.forward_batch(seqs)).max())
    finally:
        model.hp.sliding_window = saved
    if gap < 100 * max_abs:
        raise CaseFailure(f"the window changes logits by only {gap:.2e}: case is vacuous")
    return gap


def check_same_model_as_kv_b(kvw, c, model, seqs, workdir):
    """A split-layout file must encode the model the kv_b file of the same seed does."""
    twin_path = os.path.join(workdir, "model_kv_b.gguf")
    make_deepseek2_model(kvw, c, twin_path, layout="kv_b")
    twin = Deepseek2Ref(twin_path)
    if twin.split_kv_b or not model.split_kv_b:
        raise CaseFailure("expected a split case file and a kv_b twin")
    gap = float(np.abs(twin.forward_batch(seqs) - model.forward_batch(seqs)).max())
    if gap > 1e-9:
        raise CaseFailure(f"split and kv_b files of seed {c['seed']} differ by {gap:.2e}")


def real_model_sequences(c, model):
    vocab = SpmVocab(model.file)
    seqs = [vocab.encode(t) for t in c["texts"]]
    # Extend the short prompt with the reference's own greedy continuation, so the comparison
    # also covers positions the engine would produce when generating.
    seqs[-1] = model.greedy(seqs[-1], 30)
    return seqs


def run_case(kvw, name, workdir, threads):
    c = CASES[name]
    os.makedirs(workdir, exist_ok=True)
    if "real_model" in c:
        models_dir = os.environ.get("KVW_TEST_MODELS",
                                    os.path.join(os.path.dirname(__file__), "../models"))
        model_path = os.path.join(models_dir, c["real_model"])
        if "relayout" in c:
            source, model_path = model_path, os.path.join(workdir, "model.gguf")
            arch, *flags = c["relayout"]
            _run([kvw, "make-model", "--from", source, "--arch", arch, "--out", model_path, *flags])
        model = LlamaRef(model_path)
        if model.hp.arch != c.get("relayout", ("llama",))[0]:
            raise CaseFailure(f"rewritten file has architecture {model.hp.arch!r}")
        seqs = real_model_sequences(c, model)
        kv_dtype = "f32"
    elif c["arch"] == "deepseek2":
        model_path = os.path.join(workdir, "model.gguf")
        make_deepseek2_model(kvw, c, model_path)
        model = Deepseek2Ref(model_path)
        check_deepseek2_file(model, c)
        kv_dtype = c["kv_dtype"]
    elif c["arch"] in ("gemma2", "gemma3"):
        model_path = os.path.join(workdir, "model.gguf")
        make_preset_model(kvw, c, model_path)
        model = GemmaRef(model_path)
        check_gemma_file(model, c)
        kv_dtype = c["kv_dtype"]
    elif c["arch"] == "phi3":
        model_path = os.path.join(workdir, "model.gguf")
        make_preset_model(kvw, c, model_path)
        model = LlamaRef(model_path)
        model.hp.context_len = c["max_model_len"]
        errors = phi3_cases.file_errors(model, c)
        if errors:
            raise CaseFailure("generated model does not match the case:\n  " + "\n  ".join(errors))
        kv_dtype = c["kv_dtype"]
    elif c["arch"] == "gpt-oss":
        model_path = os.path.join(workdir, "model.gguf")
        make_preset_model(kvw, c, model_path)
        model = GptOssRef(model_path)
        errors = gptoss_cases.file_errors(model, c)
        if errors:
            raise CaseFailure("generated model does not match the case:\n  " + "\n  ".join(errors))
        kv_dtype = c["kv_dtype"]
    elif c["arch"] in ("qwen2moe", "qwen3", "qwen3moe"):
        model_path = os.path.join(workdir, "model.gguf")
        make_preset_model(kvw, c, model_path)
        model = LlamaRef(model_path)
        (check_qwen2moe_file if c["arch"] == "qwen2moe" else check_qwen3_file)(model, c)
        kv_dtype = c["kv_dtype"]
    else:
        model_path = os.path.join(workdir, "model.gguf")
        make_model(kvw, c, model_path)
        model = LlamaRef(model_path)
        check_model_file(model, c)
        kv_dtype = c["kv_dtype"]
    if "real_model" not in c:
        rng = np.random.default_rng(1000 + c["seed"])
        seqs = [rng.integers(0, c["n_vocab"], size=n).tolist() for n in c["lengths"]]
    if c.get("same_model_as_kv_b"):
        check_same_model_as_kv_b(kvw, c, model, seqs, workdir)
    ours, seconds = run_logits(kvw, model_path, seqs, workdir, model.n_vocab, kv_dtype, threads,
                               c.get("max_model_len", 0))
    ref = model.forward_batch(seqs)
    stats, failures = compare(ours, ref, c["tol"])
    if c.get("arch") in ("deepseek2", "qwen2moe", "qwen3moe", "gpt-oss"):
        margin = model.min_routing_margin
        stats["min_routing_margin"] = margin if math.isfinite(margin) else None
        if margin < ROUTING_MARGIN_MIN.get(c["tol"], 0.05):
            failures.append(f"routing near-tie (margin {margin:.2e}): the case tests rounding; "
                            "pick another seed")
    if "real_model" not in c:
        stats["diff_with_feature_off"] = check_feature_matters(model, seqs, ours, c,
                                                               TOLERANCES[c["tol"]][0])
    elif model.hp.sliding_window:
        stats["diff_with_window_off"] = _window_matters(model, seqs, ours, TOLERANCES[c["tol"]][0])
    stats.update(case=name, lengths=[len(s) for s in seqs], kvwarden_seconds=round(seconds, 3))
    return stats, failures


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvwarden", required=True, help="path of the kvwarden binary")
    ap.add_argument("--case", required=True, help="case name, or 'all'")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    names = list(CASES) if args.case == "all" else [args.case]
    for n in names:
        if n not in CASES:
            ap.error(f"unknown case {n!r}; known: {', '.join(CASES)}")
    failed = 0
    for n in names:
        workdir = os.path.join(args.workdir, n) if args.case == "all" else args.workdir
        try:
            stats, failures = run_case(args.kvwarden, n, workdir, args.threads)
        except (CaseFailure, subprocess.TimeoutExpired) as e:
            stats, failures = {"case": n}, [str(e)]
        print(json.dumps(stats))
        for f in failures:
            print(f"FAIL {n}: {f}")
        failed += bool(failures)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
