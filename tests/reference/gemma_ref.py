"""Independent numpy reference of Gemma-2 ("gemma2") and Gemma-3 text ("gemma3") decoders, float64
throughout, written from the architectures' definitions (HF Gemma2/Gemma3 modeling, Google's
gemma_pytorch) with the GGUF conventions llama.cpp's converter and loader use:

  x = embed(tokens) * sqrt(n_embd)
  per layer: h = rms(x) * attn_norm                (norm weights stored with HF's +1 added)
             q, k, v = h Wq, h Wk, h Wv             heads of attention.key_length
             gemma3: q, k = rms(q) * q_norm, rms(k) * k_norm, per head
             q, k = rope_neox(q, k), local layers with their own base (gemma3: unscaled)
             s = (q . k) * scale, scale = 1/sqrt(head_dim) (27B shapes: 1/sqrt(n_embd/n_head))
             gemma2: s = cap * tanh(s / cap)       (attn_logit_softcapping)
             local layers (l % period < period - 1): keys within the window only
             x += rms(softmax(s) v Wo) * post_attention_norm
             h = rms(x) * ffn_norm
             x += rms((gelu_tanh(h Wgate) * h Wup) Wdown) * post_ffw_norm
  logits = rms(x) * output_norm @ E^T (tied), then cap * tanh(logits / cap) if final soft-capping

Each feature has a switch (use_*) that the comparison driver turns off to show it matters.
"""

import math

import numpy as np

from gguf_reader import GgufFile
from llama_ref import apply_rope, rms_norm, rope_tables


class _Rope:
    """The attributes llama_ref.rope_tables reads."""

    def __init__(self, n_rot, base, scaling, scale, orig_ctx):
        self.n_rot, self.rope_base = n_rot, base
        self.rope_scaling, self.rope_scale = scaling, scale
        self.rope_orig_ctx, self.rope_attn_factor = orig_ctx, 1.0


class GemmaHparams:
    def __init__(self, f):
        arch = f.get("general.architecture")
        if arch not in ("gemma2", "gemma3"):
            raise ValueError(f"unsupported architecture {arch!r}")
        self.arch = arch
        gemma2 = arch == "gemma2"

        def meta(key, default=None):
            return f.get(f"{arch}.{key}", default)

        self.n_embd = int(meta("embedding_length"))
        self.n_layer = int(meta("block_count"))
        self.n_head = int(meta("attention.head_count"))
        self.n_head_kv = int(meta("attention.head_count_kv", self.n_head))
        self.head_dim = int(meta("attention.key_length", self.n_embd // self.n_head))
        self.rms_eps = float(meta("attention.layer_norm_rms_epsilon"))
        self.sliding_window = int(meta("attention.sliding_window", 4096 if gemma2 else 0))
        self.swa_period = int(meta("attention.sliding_window_pattern", 2 if gemma2 else 6))
        self.attn_softcap = float(meta("attn_logit_softcapping", 50.0)) if gemma2 else 0.0
        self.final_softcap = float(meta("final_logit_softcapping", 30.0 if gemma2 else 0.0))
        big = self.n_layer == (46 if gemma2 else 62)  # the 27B models' query_pre_attn_scalar
        self.attn_scale = 1.0 / math.sqrt(self.n_embd / self.n_head if big else self.head_dim)
        base = float(meta("rope.freq_base", 10000.0))
        scaling = str(meta("rope.scaling.type", "none"))
        scale = float(meta("rope.scaling.factor", 1.0))
        orig = int(meta("rope.scaling.original_context_length", meta("context_length", 0)))
        self.rope_global = _Rope(self.head_dim, base, scaling, scale, orig)
        # Local layers: gemma2 the global rope with rope.freq_base_swa as base if present;
        # gemma3 rope.freq_base_swa or 10000, never scaled.
        if gemma2:
            self.rope_local = _Rope(self.head_dim, float(meta("rope.freq_base_swa", base)),
                                    scaling, scale, orig)
        else:
            self.rope_local = _Rope(self.head_dim, float(meta("rope.freq_base_swa", 10000.0)),
                                    "none", 1.0, orig)
        self.qk_norm = not gemma2
        # Switches the comparison driver flips.
        self.use_embd_scale = True
        self.use_post_norms = True
        self.use_attn_softcap = True
        self.use_final_softcap = True
        self.use_window = True
        self.use_local_rope = True
        self.use_qk_norm = True
        self.use_gelu = True  # False: SwiGLU instead of GeGLU

    def is_local(self, il):
        p = self.swa_period
        return self.sliding_window > 0 and (p == 0 or il % p < p - 1)


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def softcap(x, cap):
    return cap * np.tanh(x / cap)


class GemmaRef:
    def __init__(self, path):
        f = GgufFile(path)
        self.file = f
        self.hp = hp = GemmaHparams(f)

        def w(name):
            return f.tensor(name).astype(np.float64)

        self.tok_embd = w("token_embd.weight")
        self.n_vocab = self.tok_embd.shape[0]
        self.output_norm = w("output_norm.weight")
        # gemma2: llama.cpp always reads token_embd as the output; gemma3: output.weight if any.
        tied = hp.arch == "gemma2" or not f.has_tensor("output.weight")
        self.output = self.tok_embd if tied else w("output.weight")
        names = ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "post_attention_norm",
                 "ffn_norm", "ffn_gate", "ffn_up", "ffn_down", "post_ffw_norm")
        if hp.qk_norm:
            names += ("attn_q_norm", "attn_k_norm")
        self.layers = [{k: w(f"blk.{il}.{k}.weight") for k in names} for il in range(hp.n_layer)]
        self.min_routing_margin = math.inf  # no routing; the driver's interface

    def mask(self, n, local):
        p = np.arange(n)[:, None]
        k = np.arange(n)[None, :]
        allowed = k <= p
        if local and self.hp.use_window:
            allowed &= k > p - self.hp.sliding_window
        return allowed

    def forward(self, tokens):
        hp = self.hp
        tokens = np.asarray(tokens, dtype=np.int64)
        n = tokens.size
        hd, nh, nkv = hp.head_dim, hp.n_head, hp.n_head_kv
        ropes = {}
        for local in (False, True):
            r = hp.rope_local if local and hp.use_local_rope else hp.rope_global
            ropes[local] = rope_tables(r, n)
        kv_of_head = np.arange(nh) // (nh // nkv)
        x = self.tok_embd[tokens]
        if hp.use_embd_scale:
            x = x * math.sqrt(hp.n_embd)
        for il, L in enumerate(self.layers):
            local = hp.is_local(il)
            cos, sin = ropes[local]
            h = rms_norm(x, L["attn_norm"], hp.rms_eps)
            q = (h @ L["attn_q"].T).reshape(n, nh, hd)
            k = (h @ L["attn_k"].T).reshape(n, nkv, hd)
            v = (h @ L["attn_v"].T).reshape(n, nkv, hd)
            if hp.qk_norm and hp.use_qk_norm:
                q = rms_norm(q, L["attn_q_norm"], hp.rms_eps)
                k = rms_norm(k, L["attn_k_norm"], hp.rms_eps)
            q = apply_rope(q, cos, sin, hd, True)
            k = apply_rope(k, cos, sin, hd, True)
            k, v = k[:, kv_of_head, :], v[:, kv_of_head, :]
            scores = np.einsum("qhd,khd->hqk", q, k) * hp.attn_scale
            if hp.attn_softcap > 0 and hp.use_attn_softcap:
                scores = softcap(scores, hp.attn_softcap)
            scores = np.where(self.mask(n, local)[None], scores, -np.inf)
            scores -= scores.max(axis=-1, keepdims=True)
            probs = np.exp(scores)
            probs /= probs.sum(axis=-1, keepdims=True)
            attn = np.einsum("hqk,khd->qhd", probs, v).reshape(n, nh * hd) @ L["attn_output"].T
            if hp.use_post_norms:
                attn = rms_norm(attn, L["post_attention_norm"], hp.rms_eps)
            x = x + attn
            h = rms_norm(x, L["ffn_norm"], hp.rms_eps)
            g = h @ L["ffn_gate"].T
            act = gelu_tanh(g) if hp.use_gelu else g / (1.0 + np.exp(-g))
            ff = (act * (h @ L["ffn_up"].T)) @ L["ffn_down"].T
            if hp.use_post_norms:
                ff = rms_norm(ff, L["post_ffw_norm"], hp.rms_eps)
            x = x + ff
        logits = rms_norm(x, self.output_norm, hp.rms_eps) @ self.output.T
        if hp.final_softcap > 0 and hp.use_final_softcap:
            logits = softcap(logits, hp.final_softcap)
        return logits

    def forward_batch(self, sequences):
        return np.concatenate([self.forward(s) for s in sequences], axis=0)

    def greedy(self, prompt, n_new):
        toks = list(prompt)
        for _ in range(n_new):
            toks.append(int(np.argmax(self.forward(toks)[-1])))
        return toks
