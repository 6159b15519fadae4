"""Independent numpy reference of GGUF architecture "deepseek2" (DeepSeek-V2/V2-Lite/V3), float64.

Written from the mathematics in the naive (un-absorbed) form, following llama.cpp's
build_deepseek2 semantics, and sharing no code with the C++ engine:

  attention (multi-head latent attention, MLA), per token t and head h:
    q_t      = attn_q h_t                      or attn_q_b(rmsnorm(attn_q_a h_t) * attn_q_a_norm)
    q_t[h]   = [q_nope (qk_nope), q_pe (qk_rope)]
    kv_a_t   = attn_kv_a_mqa h_t = [c_raw (kv_lora_rank), k_pe (qk_rope)]
    c_t      = rmsnorm(c_raw) * attn_kv_a_norm              the latent the cache would hold
    q_pe, k_pe rotated "normal" style (adjacent pairs), one k_pe shared by every head
    k_t[h]   = [W_kb[h] c_t, k_pe_t],  v_t[h] = W_vb[h] c_t
    out_t[h] = sum_s softmax_s(q_t[h] . k_s[h] * kq_scale) v_s[h]   (causal)
  with YaRN (llama.cpp): s = rope.scaling.factor, mscale = attn_factor * (1 + yarn_log_mul ln s),
  kq_scale = mscale^2 / sqrt(qk_nope + qk_rope), and the rotation itself of magnitude 1.

  W_kb / W_vb come from attn_kv_b (older converters: per head nope rows of W_kb then v rows of
  W_vb) or from attn_k_b (W_kb[h] transposed) and attn_v_b (W_vb[h]); both load into the same
  math.

  FFN: SwiGLU for the leading dense layers; else DeepSeekMoE: router scores softmax or sigmoid of
  ffn_gate_inp h, a selection-only bias exp_probs_b, optional group limit (group score = sum of the
  two best selection values of the group; keep the expert_group_used_count best groups), top-k of
  the selection (ties to the lower id), weights = scores of the chosen (renormalised if
  expert_weights_norm) times expert_weights_scale, plus the always-on shared experts (one SwiGLU
  of width n_ff_exp * n_shared).
"""

import math

import numpy as np

from gguf_reader import GgufFile
from llama_ref import apply_rope, rms_norm, rope_angles, silu

GATING_SOFTMAX, GATING_SIGMOID = 1, 2


class Deepseek2Hparams:
    def __init__(self, f):
        arch = f.get("general.architecture")
        if arch != "deepseek2":
            raise ValueError(f"not a deepseek2 file: {arch!r}")
        self.arch = arch

        def meta(key, default=None):
            return f.get(f"{arch}.{key}", default)

        def need(key):
            v = meta(key)
            if v is None:
                raise ValueError(f"missing key {arch}.{key}")
            return v

        self.n_embd = int(need("embedding_length"))
        self.n_layer = int(need("block_count"))
        self.n_head = int(need("attention.head_count"))
        # MLA: head_count_kv is the converter's bookkeeping (= head_count for attn_kv_b files, 1
        # for attn_k_b/attn_v_b files, which llama.cpp runs as MQA over the latent); every query
        # head has its own keys and values decompressed from the shared latent.
        self.n_head_kv = int(meta("attention.head_count_kv", self.n_head))
        self.n_ff = int(need("feed_forward_length"))
        self.rms_eps = float(meta("attention.layer_norm_rms_epsilon", 1e-6))
        self.q_lora_rank = int(meta("attention.q_lora_rank", 0))
        self.kv_lora_rank = int(need("attention.kv_lora_rank"))
        self.n_rot = int(need("rope.dimension_count"))
        key_mla = meta("attention.key_length_mla")
        if key_mla is not None:
            if int(need("attention.key_length")) != self.kv_lora_rank + self.n_rot:
                raise ValueError("key_length beside key_length_mla must be kv_lora_rank + rope")
            self.qk_head = int(key_mla)
            self.v_head_dim = int(need("attention.value_length_mla"))
        else:
            self.qk_head = int(need("attention.key_length"))
            self.v_head_dim = int(need("attention.value_length"))
        self.qk_nope = self.qk_head - self.n_rot
        if self.qk_nope <= 0 or self.n_rot % 2:
            raise ValueError("bad MLA head lengths")

        self.rope_base = float(meta("rope.freq_base", 10000.0))
        self.rope_scaling = str(meta("rope.scaling.type", "none"))
        if self.rope_scaling not in ("none", "yarn"):
            raise ValueError(f"deepseek2 reference supports rope scaling none or yarn, "
                             f"not {self.rope_scaling!r}")
        self.rope_scale = float(meta("rope.scaling.factor", 1.0))
        self.rope_orig_ctx = int(meta("rope.scaling.original_context_length",
                                      meta("context_length", 0)))
        self.rope_attn_factor = float(meta("rope.scaling.attn_factor", 1.0))
        self.yarn_log_mul = float(meta("rope.scaling.yarn_log_multiplier", 0.0))

        self.n_expert = int(meta("expert_count", 0))
        self.n_expert_used = int(meta("expert_used_count", 0))
        self.n_expert_shared = int(meta("expert_shared_count", 0))
        self.n_ff_exp = int(meta("expert_feed_forward_length", 0))
        self.n_dense_lead = int(meta("leading_dense_block_count", 0))
        self.weights_scale = float(meta("expert_weights_scale", 1.0))
        self.weights_norm = bool(meta("expert_weights_norm", False))
        self.gating = int(meta("expert_gating_func", GATING_SOFTMAX))
        if self.gating not in (GATING_SOFTMAX, GATING_SIGMOID):
            raise ValueError(f"unknown expert_gating_func {self.gating}")
        self.n_group = int(meta("expert_group_count", 0))
        self.n_group_used = int(meta("expert_group_used_count", 0))

        # Switches for the comparison driver's sensitivity checks (the feature removed).
        self.use_shared_experts = True
        self.use_yarn_mscale = True
        self.use_probs_bias = True
        self.use_groups = True

    def is_moe_layer(self, il):
        return self.n_expert > 0 and il >= self.n_dense_lead

    def kq_scale(self):
        """llama.cpp: mscale = attn_factor (1 + yarn_log_mul ln s); kq = mscale^2 / sqrt(qk)."""
        s = self.rope_scale if self.rope_scaling == "yarn" else 1.0
        mscale = self.rope_attn_factor * (1.0 + self.yarn_log_mul * math.log(s))
        if not self.use_yarn_mscale:
            mscale = 1.0
        return mscale * mscale / math.sqrt(self.qk_head)


class Deepseek2Ref:
    def __init__(self, path):
        f = GgufFile(path)
        self.file = f
        self.hp = hp = Deepseek2Hparams(f)
        nh, nope, vd, r = hp.n_head, hp.qk_nope, hp.v_head_dim, hp.kv_lora_rank

        def w(name):
            return f.tensor(name).astype(np.float64)

        def opt(name):
            return w(name) if f.has_tensor(name) else None

        self.tok_embd = w("token_embd.weight")  # (n_vocab, n_embd)
        self.n_vocab = self.tok_embd.shape[0]
        self.output_norm = w("output_norm.weight")
        self.output = opt("output.weight")
        if self.output is None:
            self.output = self.tok_embd
        self.split_kv_b = f.has_tensor("blk.0.attn_k_b.weight")
        self.layers = []
        for il in range(hp.n_layer):
            p = f"blk.{il}."
            L = {k: w(p + k + ".weight") for k in (
                "attn_norm", "attn_kv_a_mqa", "attn_kv_a_norm", "attn_output", "ffn_norm")}
            if hp.q_lora_rank > 0:
                for k in ("attn_q_a", "attn_q_a_norm", "attn_q_b"):
                    L[k] = w(p + k + ".weight")
            else:
                L["attn_q"] = w(p + "attn_q.weight")
            if self.split_kv_b:
                # attn_k_b: ggml {nope, r, nh} -> numpy (nh, r, nope) = W_kb[h]^T per head.
                # attn_v_b: ggml {r, v, nh}    -> numpy (nh, v, r)    = W_vb[h].
                L["W_kb"] = w(p + "attn_k_b.weight").transpose(0, 2, 1)
                L["W_vb"] = w(p + "attn_v_b.weight")
            else:
                # attn_kv_b: ggml {r, nh*(nope+v)} -> numpy (nh*(nope+v), r): per head nope rows
                # of W_kb then v rows of W_vb.
                kv_b = w(p + "attn_kv_b.weight").reshape(nh, nope + vd, r)
                L["W_kb"], L["W_vb"] = kv_b[:, :nope, :], kv_b[:, nope:, :]
            if L["W_kb"].shape != (nh, nope, r) or L["W_vb"].shape != (nh, vd, r):
                raise ValueError(f"layer {il}: bad MLA up-projection shapes")
            if hp.is_moe_layer(il):
                for k in ("ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"):
                    L[k] = w(p + k + ".weight")
                L["exp_probs_b"] = opt(p + "exp_probs_b.bias")
                if hp.n_expert_shared > 0:
                    for k in ("ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp"):
                        L[k] = w(p + k + ".weight")
            else:
                for k in ("ffn_gate", "ffn_up", "ffn_down"):
                    L[k] = w(p + k + ".weight")
            self.layers.append(L)
        # Smallest routing margin seen by the last forward: the gap between the last chosen and
        # the first unchosen selection value (and between the last kept and first dropped group
        # score), relative for softmax scores. A comparison with a near-tie here would test
        # rounding luck, not the engine.
        self.min_routing_margin = math.inf

    # ----- attention -----

    def rope(self, n):
        """cos, sin (n, n_rot/2) of magnitude 1: llama.cpp passes attn_factor 1/(1 + 0.1 ln s)
        to a YaRN rope that multiplies by (1 + 0.1 ln s), so the rotation is a pure rotation and
        the YaRN magnitude lives in kq_scale alone."""
        angle, _ = rope_angles(self.hp, n)
        return np.cos(angle), np.sin(angle)

    def mla_inputs(self, L, h, cos, sin):
        """q_nope (T, nh, nope), rotated q_pe (T, nh, rope), latent c (T, r), rotated k_pe
        (T, rope)."""
        hp = self.hp
        n = h.shape[0]
        if hp.q_lora_rank > 0:
            q = rms_norm(h @ L["attn_q_a"].T, L["attn_q_a_norm"], hp.rms_eps) @ L["attn_q_b"].T
        else:
            q = h @ L["attn_q"].T
        q = q.reshape(n, hp.n_head, hp.qk_head)
        q_nope, q_pe = q[:, :, :hp.qk_nope], q[:, :, hp.qk_nope:]
        kv_a = h @ L["attn_kv_a_mqa"].T
        c = rms_norm(kv_a[:, :hp.kv_lora_rank], L["attn_kv_a_norm"], hp.rms_eps)
        k_pe = kv_a[:, hp.kv_lora_rank:]
        q_pe = apply_rope(q_pe, cos, sin, hp.n_rot, neox=False)
        k_pe = apply_rope(k_pe[:, None, :], cos, sin, hp.n_rot, neox=False)[:, 0, :]
        return q_nope, q_pe, c, k_pe

    @staticmethod
    def causal_softmax(scores):
        """scores (heads, T, T) -> probabilities, key s <= query t only."""
        n = scores.shape[-1]
        allowed = np.arange(n)[None, :] <= np.arange(n)[:, None]
        scores = np.where(allowed[None], scores, -np.inf)
        scores = scores - scores.max(axis=-1, keepdims=True)
        p = np.exp(scores)
        return p / p.sum(axis=-1, keepdims=True)

    def attention(self, L, h, cos, sin):
        """Naive MLA: decompress per-head keys and values, then ordinary causal attention."""
        hp = self.hp
        n = h.shape[0]
        q_nope, q_pe, c, k_pe = self.mla_inputs(L, h, cos, sin)
        k_nope = np.einsum("hdr,tr->thd", L["W_kb"], c)
        v = np.einsum("hvr,tr->thv", L["W_vb"], c)
        k_rope = np.broadcast_to(k_pe[:, None, :], (n, hp.n_head, hp.n_rot))
        q_full = np.concatenate([q_nope, q_pe], axis=-1)
        k_full = np.concatenate([k_nope, k_rope], axis=-1)
        p = self.causal_softmax(np.einsum("qhd,khd->hqk", q_full, k_full) * hp.kq_scale())
        out = np.einsum("hqk,khv->qhv", p, v).reshape(n, hp.n_head * hp.v_head_dim)
        return out @ L["attn_output"].T

    # ----- feed-forward -----

    @staticmethod
    def swiglu(h, gate, up, down):
        return (silu(h @ gate.T) * (h @ up.T)) @ down.T

    def router_scores(self, L, h):
        logits = h @ L["ffn_gate_inp"].T  # (T, E)
        if self.hp.gating == GATING_SIGMOID:
            return 1.0 / (1.0 + np.exp(-logits))
        p = np.exp(logits - logits.max(axis=-1, keepdims=True))
        return p / p.sum(axis=-1, keepdims=True)

    def route(self, L, h):
        """(chosen expert ids (T, k), their weights (T, k), kept groups per token or None)."""
        hp = self.hp
        k, E = hp.n_expert_used, hp.n_expert
        scores = self.router_scores(L, h)
        sel = scores.copy()
        if L.get("exp_probs_b") is not None and hp.use_probs_bias:
            sel = sel + L["exp_probs_b"][None, :]
        T = h.shape[0]
        kept = None
        # Unbiased softmax scores order like the logits: their gaps count relative to the values
        # (f32 keeps relative precision even for tiny probabilities); sigmoid scores with a bias
        # live on [0, 1] and count absolutely.
        relative = hp.gating == GATING_SOFTMAX and not np.any(sel != scores)
        if hp.n_group > 1 and hp.use_groups:
            G, per = hp.n_group, E // hp.n_group
            grouped = sel.reshape(T, G, per)
            group_score = -np.sort(-grouped, axis=-1)[:, :, :2].sum(axis=-1)  # (T, G)
            order = np.argsort(-group_score, axis=-1, kind="stable")
            kept = np.sort(order[:, :hp.n_group_used], axis=-1)
            if hp.n_group_used < G:
                gs = np.take_along_axis(group_score, order, axis=-1)
                self._margin(gs[:, hp.n_group_used - 1], gs[:, hp.n_group_used], relative)
            mask = np.zeros((T, G), dtype=bool)
            np.put_along_axis(mask, kept, True, axis=-1)
            sel = np.where(np.repeat(mask, per, axis=-1), sel, -np.inf)
        chosen = np.argsort(-sel, axis=-1, kind="stable")[:, :k]
        if k < E:
            ss = -np.sort(-sel, axis=-1)
            self._margin(ss[:, k - 1], ss[:, k], relative)
        weights = np.take_along_axis(scores, chosen, axis=-1)
        if hp.weights_norm:
            weights = weights / weights.sum(axis=-1, keepdims=True)
        return chosen, weights * hp.weights_scale, kept

    def _margin(self, last_in, first_out, relative):
        """Records the smallest gap between the last kept and first dropped value (a dropped
        -inf, masked by the group limit, is no tie)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            gap = last_in - first_out
            if relative:
                gap = gap / np.maximum(np.abs(last_in), np.abs(first_out))
        gap = np.where(np.isfinite(first_out), gap, np.inf)
        if gap.size:
            self.min_routing_margin = min(self.min_routing_margin, float(np.min(gap)))

    def moe_ffn(self, L, h):
        hp = self.hp
        chosen, weights, _ = self.route(L, h)
        out = np.zeros_like(h)
        for e in range(hp.n_expert):
            rows, slot = np.nonzero(chosen == e)
            if rows.size == 0:
                continue
            y = self.swiglu(h[rows], L["ffn_gate_exps"][e], L["ffn_up_exps"][e],
                            L["ffn_down_exps"][e])
            out[rows] += weights[rows, slot][:, None] * y
        if hp.n_expert_shared > 0 and hp.use_shared_experts:
            out += self.swiglu(h, L["ffn_gate_shexp"], L["ffn_up_shexp"], L["ffn_down_shexp"])
        return out

    # ----- the whole model -----

    def forward(self, tokens):
        """Logits (T, n_vocab) float64 for every position of one sequence starting at position 0."""
        hp = self.hp
        tokens = np.asarray(tokens, dtype=np.int64)
        cos, sin = self.rope(tokens.size)
        x = self.tok_embd[tokens]
        for il, L in enumerate(self.layers):
            x = x + self.attention(L, rms_norm(x, L["attn_norm"], hp.rms_eps), cos, sin)
            h = rms_norm(x, L["ffn_norm"], hp.rms_eps)
            if hp.is_moe_layer(il):
                x = x + self.moe_ffn(L, h)
            else:
                x = x + self.swiglu(h, L["ffn_gate"], L["ffn_up"], L["ffn_down"])
        return rms_norm(x, self.output_norm, hp.rms_eps) @ self.output.T

    def forward_batch(self, sequences):
        self.min_routing_margin = math.inf
        return np.concatenate([self.forward(s) for s in sequences], axis=0)

    def greedy(self, prompt, n_new):
        toks = list(prompt)
        for _ in range(n_new):
            toks.append(int(np.argmax(self.forward(toks)[-1])))
        return toks
