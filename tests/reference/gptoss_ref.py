"""Independent numpy reference of gpt-oss ("gpt-oss"), float64 throughout, written from the
architecture's definition (OpenAI's gpt-oss reference model, HF GptOss modeling) with the GGUF
names llama.cpp's converter writes:

  x = embed(tokens)
  per layer: h = rms(x) * attn_norm
             q, k, v = h Wq + bq, h Wk + bk, h Wv + bv       heads of attention.key_length
             q, k = rope_neox(q, k)                          (YaRN from the file)
             s = (q . k) / sqrt(head_dim); even layers see only the last `window` keys
             p = softmax over [s_0 .. s_t, sink_h] without the sink's column   (attn_sinks)
             x += (p v) Wo + bo
             h = rms(x) * post_attention_norm
             r = h Wr + br; top-k experts by r; weights = softmax(r[top-k])
             per chosen e: g = h Wg_e + bg_e, u = h Wu_e + bu_e
                           a = min(g, 7) sigmoid(1.702 min(g, 7)) (clamp(u, -7, 7) + 1)
                           y_e = a Wd_e + bd_e
             x += sum_e weight_e y_e
  logits = rms(x) * output_norm @ output^T

Each feature has a switch (use_*) that the comparison driver turns off to show it matters.
"""

import math

import numpy as np

from gguf_reader import GGML_TYPES, GgufFile
from llama_ref import apply_rope, rms_norm, rope_tables

ALPHA, LIMIT = 1.702, 7.0


class GptOssHparams:
    def __init__(self, f):
        if f.get("general.architecture") != "gpt-oss":
            raise ValueError("not a gpt-oss file")

        def meta(key, default=None):
            return f.get(f"gpt-oss.{key}", default)

        self.n_embd = int(meta("embedding_length"))
        self.n_layer = int(meta("block_count"))
        self.n_head = int(meta("attention.head_count"))
        self.n_head_kv = int(meta("attention.head_count_kv", self.n_head))
        self.head_dim = int(meta("attention.key_length", self.n_embd // self.n_head))
        self.rms_eps = float(meta("attention.layer_norm_rms_epsilon"))
        self.sliding_window = int(meta("attention.sliding_window"))
        self.swa_period = int(meta("attention.sliding_window_pattern", 2))
        self.n_expert = int(meta("expert_count"))
        self.n_expert_used = int(meta("expert_used_count"))
        # The attributes llama_ref.rope_tables reads.
        self.n_rot = self.head_dim
        self.rope_base = float(meta("rope.freq_base", 10000.0))
        self.rope_scaling = str(meta("rope.scaling.type", "none"))
        self.rope_scale = float(meta("rope.scaling.factor", 1.0))
        self.rope_orig_ctx = int(meta("rope.scaling.original_context_length",
                                      meta("context_length", 0)))
        self.rope_attn_factor = 1.0
        # Switches the comparison driver flips.
        self.use_sinks = True
        self.use_window = True
        self.use_attn_out_bias = True
        self.use_router_bias = True
        self.use_expert_bias = True
        self.use_topk_softmax = True  # False: softmax over all experts, chosen weights as they are
        self.use_oai_swiglu = True    # False: plain SwiGLU, silu(g) * u

    def is_local(self, il):
        p = self.swa_period
        return p == 0 or il % p < p - 1


def q8_0_activations(v):
    """v rounded as the engine and llama.cpp quantise the input of an MXFP4 matmul (Q8_0, as
    quantize_row_q8_0 in float32: d = amax / 127, q = rint(v * (1 / d)), stored d in fp16), back
    in float64: MXFP4 weights meet 8-bit activations in an int8 dot product in both."""
    v32 = v.astype(np.float32).reshape(-1, 32)
    d = np.abs(v32).max(axis=1, keepdims=True) / np.float32(127)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    q = np.rint(v32 * inv)
    return (q * d.astype(np.float16).astype(np.float64)).reshape(v.shape)


def swiglu_oai(g, u):
    g = np.minimum(g, LIMIT)
    u = np.clip(u, -LIMIT, LIMIT)
    return g / (1.0 + np.exp(-ALPHA * g)) * (u + 1.0)


class GptOssRef:
    def __init__(self, path):
        f = GgufFile(path)
        self.file = f
        self.hp = hp = GptOssHparams(f)

        def w(name):
            return f.tensor(name).astype(np.float64)

        self.tok_embd = w("token_embd.weight")
        self.n_vocab = self.tok_embd.shape[0]
        self.output_norm = w("output_norm.weight")
        self.output = w("output.weight")
        names = ("attn_norm.weight", "attn_q.weight", "attn_q.bias", "attn_k.weight",
                 "attn_k.bias", "attn_v.weight", "attn_v.bias", "attn_output.weight",
                 "attn_output.bias", "attn_sinks.weight", "post_attention_norm.weight",
                 "ffn_gate_inp.weight", "ffn_gate_inp.bias", "ffn_gate_exps.weight",
                 "ffn_gate_exps.bias", "ffn_up_exps.weight", "ffn_up_exps.bias",
                 "ffn_down_exps.weight", "ffn_down_exps.bias")
        self.layers = [{k: w(f"blk.{il}.{k}") for k in names} for il in range(hp.n_layer)]
        # Expert inputs are rounded to 8 bits when the experts are MXFP4 (q8_0_activations).
        mxfp4 = [name for name, (tname, _, _) in GGML_TYPES.items() if tname == "MXFP4"]
        self.expert_act = (q8_0_activations if f.tensors["blk.0.ffn_gate_exps.weight"].ggml_type
                           in mxfp4 else (lambda v: v))
        self.min_routing_margin = math.inf

    def mask(self, n, local):
        p = np.arange(n)[:, None]
        k = np.arange(n)[None, :]
        allowed = k <= p
        if local and self.hp.use_window:
            allowed &= k > p - self.hp.sliding_window
        return allowed

    def attention(self, L, h, local, cos, sin):
        hp = self.hp
        n, hd, nh, nkv = h.shape[0], hp.head_dim, hp.n_head, hp.n_head_kv
        q = (h @ L["attn_q.weight"].T + L["attn_q.bias"]).reshape(n, nh, hd)
        k = (h @ L["attn_k.weight"].T + L["attn_k.bias"]).reshape(n, nkv, hd)
        v = (h @ L["attn_v.weight"].T + L["attn_v.bias"]).reshape(n, nkv, hd)
        q = apply_rope(q, cos, sin, hd, True)
        k = apply_rope(k, cos, sin, hd, True)
        kv_of_head = np.arange(nh) // (nh // nkv)
        k, v = k[:, kv_of_head, :], v[:, kv_of_head, :]
        scores = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(hd)
        scores = np.where(self.mask(n, local)[None], scores, -np.inf)
        if hp.use_sinks:  # one more column per head, dropped after the softmax
            sink = np.broadcast_to(L["attn_sinks.weight"][:, None, None], (nh, n, 1))
            scores = np.concatenate([scores, sink], axis=-1)
        scores = scores - scores.max(axis=-1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(axis=-1, keepdims=True)
        probs = probs[:, :, :n]
        out = np.einsum("hqk,khd->qhd", probs, v).reshape(n, nh * hd) @ L["attn_output.weight"].T
        return out + L["attn_output.bias"] if hp.use_attn_out_bias else out

    def moe(self, L, h):
        hp = self.hp
        k, n_exp = hp.n_expert_used, hp.n_expert
        logits = h @ L["ffn_gate_inp.weight"].T
        if hp.use_router_bias:
            logits = logits + L["ffn_gate_inp.bias"]
        if k < n_exp:
            ordered = -np.sort(-logits, axis=-1)
            gap = ordered[:, k - 1] - ordered[:, k]
            self.min_routing_margin = min(self.min_routing_margin, float(gap.min()))
        all_probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
        all_probs /= all_probs.sum(axis=-1, keepdims=True)
        out = np.zeros_like(h)
        eb = 1.0 if hp.use_expert_bias else 0.0
        for t in range(h.shape[0]):
            chosen = np.argsort(-logits[t], kind="stable")[:k]
            if hp.use_topk_softmax:
                wts = np.exp(logits[t, chosen] - logits[t, chosen].max())
                wts /= wts.sum()
            else:
                wts = all_probs[t, chosen]
            ht = self.expert_act(h[t])
            for e, wt in zip(chosen, wts):
                g = L["ffn_gate_exps.weight"][e] @ ht + eb * L["ffn_gate_exps.bias"][e]
                u = L["ffn_up_exps.weight"][e] @ ht + eb * L["ffn_up_exps.bias"][e]
                a = swiglu_oai(g, u) if hp.use_oai_swiglu else g / (1.0 + np.exp(-g)) * u
                y = (L["ffn_down_exps.weight"][e] @ self.expert_act(a)
                     + eb * L["ffn_down_exps.bias"][e])
                out[t] += wt * y
        return out

    def forward(self, tokens):
        hp = self.hp
        tokens = np.asarray(tokens, dtype=np.int64)
        n = tokens.size
        cos, sin = rope_tables(hp, n)
        x = self.tok_embd[tokens]
        for il, L in enumerate(self.layers):
            h = rms_norm(x, L["attn_norm.weight"], hp.rms_eps)
            x = x + self.attention(L, h, hp.is_local(il), cos, sin)
            h = rms_norm(x, L["post_attention_norm.weight"], hp.rms_eps)
            x = x + self.moe(L, h)
        return rms_norm(x, self.output_norm, hp.rms_eps) @ self.output.T

    def forward_batch(self, sequences):
        self.min_routing_margin = math.inf
        return np.concatenate([self.forward(s) for s in sequences], axis=0)

    def greedy(self, prompt, n_new):
        toks = list(prompt)
        for _ in range(n_new):
            toks.append(int(np.argmax(self.forward(toks)[-1])))
        return toks
