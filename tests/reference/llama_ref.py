"""Independent numpy reference of the Llama-family decoder ("llama", "qwen2", Mixtral-style
mixture-of-experts llama files, "qwen2moe": Qwen1.5-MoE / Qwen2-57B-A14B, "qwen3": per-head
Q/K RMSNorm with an explicit head length, "qwen3moe": that attention with Mixtral's routing, and
"phi3": Phi-3/3.5/4-mini's fused QKV and gate/up with LongRoPE), float64 throughout.

Written from the architecture's mathematics, not from the C++ engine: the comparison tests trust
it as the oracle. Also holds a tiny SentencePiece-style tokenizer (merge by score) and, run as a
script, greedy generation from a real model:
  /usr/bin/python3 llama_ref.py MODEL.gguf ["Once upon a time"] [n_tokens]
"""

import math
import sys

import numpy as np

from gguf_reader import GgufFile


class Hparams:
    def __init__(self, f):
        arch = f.get("general.architecture")
        if arch not in ("llama", "qwen2", "qwen2moe", "qwen3", "qwen3moe", "phi3"):
            raise ValueError(f"unsupported architecture {arch!r}")
        self.arch = arch

        def meta(key, default=None):
            return f.get(f"{arch}.{key}", default)

        self.n_embd = int(meta("embedding_length"))
        self.n_layer = int(meta("block_count"))
        self.n_head = int(meta("attention.head_count"))
        self.n_head_kv = int(meta("attention.head_count_kv", self.n_head))
        # qwen3 (HF Qwen3Config.head_dim): heads need not be n_embd / n_head long.
        self.head_dim = int(meta("attention.key_length", self.n_embd // self.n_head))
        if int(meta("attention.value_length", self.head_dim)) != self.head_dim:
            raise ValueError("key_length != value_length")
        # qwen3 (HF Qwen3Attention): q_norm / k_norm, RMSNorm over each head's head_dim with
        # the model's eps, after the projections and before RoPE. use_qk_norm is a switch the
        # comparison driver flips to show it matters.
        self.qk_norm = arch in ("qwen3", "qwen3moe")
        self.use_qk_norm = True
        self.n_rot = int(meta("rope.dimension_count", self.head_dim))
        self.rms_eps = float(meta("attention.layer_norm_rms_epsilon", 1e-5))
        self.rope_base = float(meta("rope.freq_base", 10000.0))
        self.sliding_window = int(meta("attention.sliding_window", 0))
        self.rope_scaling = str(meta("rope.scaling.type", "none"))
        self.rope_scale = float(meta("rope.scaling.factor", 1.0))
        self.rope_orig_ctx = int(meta("rope.scaling.original_context_length",
                                      meta("context_length", 0)))
        self.rope_attn_factor = float(meta("rope.scaling.attn_factor", 1.0))
        legacy_linear = meta("rope.scale_linear")
        if legacy_linear is not None and self.rope_scaling == "none":
            self.rope_scaling, self.rope_scale = "linear", float(legacy_linear)
        # llama GGUFs store q/k permuted for adjacent-pair rotation; qwen2 keeps HF's half split.
        self.rope_neox = arch in ("qwen2", "qwen2moe", "qwen3", "qwen3moe", "phi3")
        # phi3 (HF Phi3: Phi3LongRoPEScaledRotaryEmbedding, qkv_proj, gate_up_proj): LongRoPE
        # divides pair i's frequency by long_factor[i] when the model is set up for more than
        # original_max_position_embeddings tokens, else by short_factor[i] (context_len: the
        # serving context, default context_length); cos and sin carry rope.scaling.attn_factor.
        # Switches the comparison driver flips to show each matters: longrope "auto" | "long" |
        # "short" | "none", use_attn_factor, and the fused tensors' parts exchanged (swap_kv:
        # attn_qkv's K and V rows; swap_gate_up: ffn_up's halves).
        self.context_len = int(meta("context_length", 0))
        self.longrope = "auto"
        self.use_attn_factor = True
        self.swap_kv = False
        self.swap_gate_up = False
        # Mixtral-style mixture of experts (HF MixtralSparseMoeBlock): softmax over the router
        # logits, the top expert_used_count experts, their probabilities renormalised to sum 1.
        self.n_expert = int(meta("expert_count", 0))
        self.n_expert_used = int(meta("expert_used_count", 0))
        # qwen2moe (HF Qwen2MoeSparseMoeBlock with norm_topk_prob false, llama.cpp's
        # build_qwen2moe with norm_w = false): the chosen softmax probabilities are used as they
        # are, not renormalised; every layer also has a shared expert (SwiGLU of
        # expert_shared_feed_forward_length) scaled per token by sigmoid(ffn_gate_inp_shexp . h).
        # The routed experts' width is expert_feed_forward_length. moe_norm_weights and
        # use_shared_expert are switches the comparison driver flips to show both matter.
        self.qwen2moe = arch == "qwen2moe"
        self.moe_norm_weights = not self.qwen2moe
        self.use_shared_expert = True
        self.n_ff_exp = int(meta("expert_feed_forward_length", 0))
        self.n_ff_shexp = int(meta("expert_shared_feed_forward_length", 0))
        if arch in ("qwen2moe", "qwen3moe") and self.n_expert <= 0:
            raise ValueError(f"{arch} needs expert_count > 0")
        # qwen3moe (HF Qwen3MoeSparseMoeBlock, norm_topk_prob true; llama.cpp's build_qwen3moe):
        # Mixtral's rule, softmax, top-k, the chosen probabilities renormalised; experts of
        # expert_feed_forward_length (read from the tensors' shapes), no shared expert.
        if self.n_head % self.n_head_kv != 0:
            raise ValueError("n_head must be a multiple of n_head_kv")


def rope_angles(hp, n_pos, rope_freqs=None):
    """Angles (n_pos, n_rot/2) of pair i at each position with the scaling applied, and the YaRN
    magnitude factor the rotation carries (1 unless YaRN: (1 + 0.1 ln s) * attn_factor)."""
    d = hp.n_rot
    i = np.arange(d // 2, dtype=np.float64)
    base = hp.rope_base
    scaling, s = hp.rope_scaling, hp.rope_scale
    if scaling == "ntk":
        base = base * s ** (d / (d - 2))
    theta = base ** (-2.0 * i / d)
    if rope_freqs is not None:
        theta = theta / rope_freqs[: d // 2].astype(np.float64)
    pos = np.arange(n_pos, dtype=np.float64)[:, None]
    # rope.scaling.attn_factor multiplies cos and sin under every scaling (llama.cpp's
    # ggml_rope_ext); YaRN multiplies its own magnitude in.
    mscale = hp.rope_attn_factor if getattr(hp, "use_attn_factor", True) else 1.0
    if scaling == "linear":
        angle = pos * theta[None, :] / s
    elif scaling == "yarn":
        extrap = pos * theta[None, :]
        interp = extrap / s

        def corr_dim(beta):
            return d * math.log(hp.rope_orig_ctx / (beta * 2 * math.pi)) / (2 * math.log(base))

        low = max(0.0, math.floor(corr_dim(32.0)))
        high = min(d - 1.0, math.ceil(corr_dim(1.0)))
        y = (i - low) / max(0.001, high - low)
        ramp = 1.0 - np.clip(y, 0.0, 1.0)
        angle = interp * (1.0 - ramp[None, :]) + extrap * ramp[None, :]
        mscale *= 1.0 + 0.1 * math.log(s)
    elif scaling in ("none", "ntk"):
        angle = pos * theta[None, :]
    else:
        raise ValueError(f"unknown rope scaling {scaling!r}")
    return angle, mscale


def rope_tables(hp, n_pos, rope_freqs=None):
    """cos, sin of shape (n_pos, n_rot/2): the angle of pair i at each position, with scaling."""
    angle, mscale = rope_angles(hp, n_pos, rope_freqs)
    return np.cos(angle) * mscale, np.sin(angle) * mscale


def apply_rope(x, cos, sin, n_rot, neox):
    """x: (T, heads, head_dim); rotates the first n_rot dims of each head."""
    out = x.copy()
    c, s = cos[:, None, :], sin[:, None, :]
    if neox:
        half = n_rot // 2
        a, b = x[:, :, :half], x[:, :, half:n_rot]
        out[:, :, :half] = a * c - b * s
        out[:, :, half:n_rot] = a * s + b * c
    else:
        a, b = x[:, :, 0:n_rot:2], x[:, :, 1:n_rot:2]
        out[:, :, 0:n_rot:2] = a * c - b * s
        out[:, :, 1:n_rot:2] = a * s + b * c
    return out


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(x):
    return x / (1.0 + np.exp(-x))


# GGML types whose matmul reads Q8_0-rounded activations in the engine (its packed int8 GEMM),
# where the reference applies the same rounding: Q4_1 (3), Q5_0 (6), Q5_1 (7) and IQ4_NL (20)
# (Q4_1/Q5_1's min term is m x the sum of the rounded activations, as llama.cpp's x Q8_1 dot).
# Q4_0 and Q8_0 do too in the engine; their cases' tolerances were set without it.
_Q8_ACT_TYPES = {3, 6, 7, 20}


def q8_0_activations(v):
    """v rounded as quantize_row_q8_0 does in float32 (d = amax / 127 per 32 values, q =
    rint(v / d), d stored in fp16), back in float64."""
    v32 = np.asarray(v).astype(np.float32)
    shape = v32.shape
    v32 = v32.reshape(-1, 32)
    d = np.abs(v32).max(axis=1, keepdims=True) / np.float32(127)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    q = np.rint(v32 * inv)
    return (q * d.astype(np.float16).astype(np.float64)).reshape(shape)


class Q8ActWeight(np.ndarray):
    """A weight matrix (or a slice or transpose of one) whose matmul input is rounded to Q8_0
    first, as the engine's int8 GEMM reads it; every other operation sees a plain array."""

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        args = [np.asarray(x) for x in inputs]
        if ufunc is np.matmul and method == "__call__" and isinstance(inputs[1], Q8ActWeight):
            args[0] = q8_0_activations(args[0])
        return getattr(ufunc, method)(*args, **kwargs)


class LlamaRef:
    def __init__(self, path):
        f = GgufFile(path)
        self.file = f
        self.hp = hp = Hparams(f)

        def w(name):
            t = f.tensor(name).astype(np.float64)
            if f.tensors[name].ggml_type in _Q8_ACT_TYPES and t.ndim == 2:
                return t.view(Q8ActWeight)
            return t

        def opt(name):
            return w(name) if f.has_tensor(name) else None

        self.tok_embd = w("token_embd.weight")  # (n_vocab, n_embd)
        self.n_vocab = self.tok_embd.shape[0]
        self.output_norm = w("output_norm.weight")
        self.output = opt("output.weight")
        if self.output is None:
            self.output = self.tok_embd  # tied embeddings
        self.rope_freqs = opt("rope_freqs.weight")
        self.rope_long = opt("rope_factors_long.weight")
        self.rope_short = opt("rope_factors_short.weight")
        # Smallest relative gap between the last chosen and the first unchosen router
        # probability of any token in the last forward_batch (inf: top-k never dropped one).
        self.min_routing_margin = math.inf
        self.layers = []
        for il in range(hp.n_layer):
            p = f"blk.{il}."
            ffn = ("ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps") \
                if hp.n_expert > 0 else ("ffn_gate", "ffn_up", "ffn_down")
            if hp.qwen2moe:
                ffn += ("ffn_gate_inp_shexp", "ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp")
            qkv = ("attn_qkv",) if f.has_tensor(p + "attn_qkv.weight") else (
                "attn_q", "attn_k", "attn_v")
            if hp.arch == "phi3":
                ffn = ("ffn_up", "ffn_down")  # ffn_up: gate rows, then up rows
            layer = {k: w(p + k + ".weight") for k in (
                "attn_norm", "attn_output", "ffn_norm") + qkv + ffn}
            for k in ("attn_q", "attn_k", "attn_v"):
                layer[k + ".bias"] = opt(p + k + ".bias")
            if f.has_tensor(p + "attn_qkv.bias"):
                raise ValueError("fused QKV biases are not modelled")
            if hp.qk_norm:
                layer["attn_q_norm"] = w(p + "attn_q_norm.weight")
                layer["attn_k_norm"] = w(p + "attn_k_norm.weight")
            self.layers.append(layer)

    def attention_mask(self, n):
        """(n, n) bool: query p may attend key k."""
        p = np.arange(n)[:, None]
        k = np.arange(n)[None, :]
        allowed = k <= p
        if self.hp.sliding_window > 0:
            allowed &= k > p - self.hp.sliding_window
        return allowed

    def forward(self, tokens):
        """Logits (T, n_vocab) float64 for every position of one sequence starting at position 0."""
        hp = self.hp
        tokens = np.asarray(tokens, dtype=np.int64)
        n = tokens.size
        hd, nh, nkv = hp.head_dim, hp.n_head, hp.n_head_kv
        cos, sin = rope_tables(hp, n, self.rope_factors())
        mask = self.attention_mask(n)
        kv_of_head = np.arange(nh) // (nh // nkv)
        x = self.tok_embd[tokens]
        for L in self.layers:
            h = rms_norm(x, L["attn_norm"], hp.rms_eps)
            q, k, v = self.qkv(L, h)
            if L["attn_q.bias"] is not None:
                q, k, v = q + L["attn_q.bias"], k + L["attn_k.bias"], v + L["attn_v.bias"]
            q, k = q.reshape(n, nh, hd), k.reshape(n, nkv, hd)
            if hp.qk_norm and hp.use_qk_norm:
                q = rms_norm(q, L["attn_q_norm"], hp.rms_eps)
                k = rms_norm(k, L["attn_k_norm"], hp.rms_eps)
            q = apply_rope(q, cos, sin, hp.n_rot, hp.rope_neox)
            k = apply_rope(k, cos, sin, hp.n_rot, hp.rope_neox)
            v = v.reshape(n, nkv, hd)
            k, v = k[:, kv_of_head, :], v[:, kv_of_head, :]  # GQA: expand kv heads
            scores = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(hd)
            scores = np.where(mask[None], scores, -np.inf)
            scores -= scores.max(axis=-1, keepdims=True)
            probs = np.exp(scores)
            probs /= probs.sum(axis=-1, keepdims=True)
            attn = np.einsum("hqk,khd->qhd", probs, v).reshape(n, nh * hd)
            x = x + attn @ L["attn_output"].T
            h = rms_norm(x, L["ffn_norm"], hp.rms_eps)
            if hp.n_expert > 0:
                x = x + self.moe_ffn(L, h)
            else:
                gate, up = self.gate_up(L, h)
                x = x + (silu(gate) * up) @ L["ffn_down"].T
        x = rms_norm(x, self.output_norm, hp.rms_eps)
        return x @ self.output.T

    def rope_factors(self):
        """Per-pair frequency divisors, as llama.cpp's get_rope_factors: rope_freqs, else the
        LongRoPE set the context picks (long when context_len > original context), else None."""
        hp = self.hp
        if self.rope_freqs is not None:
            return self.rope_freqs
        mode = hp.longrope
        if mode == "auto":
            mode = "long" if hp.context_len > hp.rope_orig_ctx else "short"
        return {"long": self.rope_long, "short": self.rope_short, "none": None}[mode]

    def qkv(self, L, h):
        """Q, K, V projections of h (T, n_embd): separate tensors, or the row blocks of attn_qkv
        (q_dim rows, then kv_dim, then kv_dim)."""
        hp = self.hp
        if "attn_qkv" not in L:
            return h @ L["attn_q"].T, h @ L["attn_k"].T, h @ L["attn_v"].T
        nq, nkv = hp.n_head * hp.head_dim, hp.n_head_kv * hp.head_dim
        W = L["attn_qkv"]
        if W.shape[0] != nq + 2 * nkv:
            raise ValueError(f"attn_qkv has {W.shape[0]} rows, expected {nq + 2 * nkv}")
        wq, wk, wv = W[:nq], W[nq:nq + nkv], W[nq + nkv:]
        if hp.swap_kv:
            wk, wv = wv, wk
        return h @ wq.T, h @ wk.T, h @ wv.T

    def gate_up(self, L, h):
        """SwiGLU's gate and up projections: ffn_gate and ffn_up, or phi3's ffn_up halves."""
        if "ffn_gate" in L:
            return h @ L["ffn_gate"].T, h @ L["ffn_up"].T
        W = L["ffn_up"]
        n_ff = L["ffn_down"].shape[1]
        if W.shape[0] != 2 * n_ff:
            raise ValueError(f"fused ffn_up has {W.shape[0]} rows, expected {2 * n_ff}")
        gate, up = W[:n_ff], W[n_ff:]
        if self.hp.swap_gate_up:
            gate, up = up, gate
        return h @ gate.T, h @ up.T

    def moe_ffn(self, L, h):
        """Sparse MoE block for h (T, n_embd); expert tensors are (E, rows, n_in). Mixtral: softmax
        router, top-k (ties to the lower id), the chosen probabilities renormalised to sum 1.
        qwen2moe: the same without renormalising, plus the gated shared expert."""
        hp = self.hp
        k, n_exp = hp.n_expert_used, hp.n_expert
        logits = h @ L["ffn_gate_inp"].T  # (T, E)
        probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
        probs /= probs.sum(axis=-1, keepdims=True)
        if k < n_exp:
            ordered = -np.sort(-probs, axis=-1)
            last_in, first_out = ordered[:, k - 1], ordered[:, k]
            gap = (last_in - first_out) / last_in
            if gap.size:
                self.min_routing_margin = min(self.min_routing_margin, float(gap.min()))
        out = np.zeros_like(h)
        for t in range(h.shape[0]):
            chosen = np.argsort(-probs[t], kind="stable")[:k]
            weights = probs[t, chosen]
            if hp.moe_norm_weights:
                weights = weights / weights.sum()
            for e, wt in zip(chosen, weights):
                g = L["ffn_gate_exps"][e] @ h[t]
                u = L["ffn_up_exps"][e] @ h[t]
                out[t] += wt * (L["ffn_down_exps"][e] @ (silu(g) * u))
        if hp.qwen2moe and hp.use_shared_expert:
            shared = (silu(h @ L["ffn_gate_shexp"].T) * (h @ L["ffn_up_shexp"].T)) \
                @ L["ffn_down_shexp"].T
            gate = 1.0 / (1.0 + np.exp(-(h @ L["ffn_gate_inp_shexp"])))  # (T,): one per token
            out += gate[:, None] * shared
        return out

    def forward_batch(self, sequences):
        """Independent sequences -> logits concatenated in order, (sum of lengths, n_vocab)."""
        self.min_routing_margin = math.inf
        return np.concatenate([self.forward(s) for s in sequences], axis=0)

    def greedy(self, prompt, n_new):
        toks = list(prompt)
        for _ in range(n_new):
            toks.append(int(np.argmax(self.forward(toks)[-1])))
        return toks


class SpmVocab:
    """SentencePiece-style tokenizer from GGUF vocab: repeatedly merge the best-scoring pair."""

    def __init__(self, f):
        self.tokens = f.get("tokenizer.ggml.tokens")
        self.scores = f.get("tokenizer.ggml.scores", [0.0] * len(self.tokens))
        self.index = {t: i for i, t in enumerate(self.tokens)}
        self.bos = int(f.get("tokenizer.ggml.bos_token_id", 1))

    def encode(self, text, add_bos=True):
        text = "\u2581" + text.replace(" ", "\u2581")
        pieces = list(text)
        while True:
            best, best_i = None, -1
            for i in range(len(pieces) - 1):
                merged = pieces[i] + pieces[i + 1]
                tid = self.index.get(merged)
                if tid is not None and (best is None or self.scores[tid] > best):
                    best, best_i = self.scores[tid], i
            if best_i < 0:
                break
            pieces[best_i:best_i + 2] = [pieces[best_i] + pieces[best_i + 1]]
        ids = [self.bos] if add_bos else []
        for p in pieces:
            if p in self.index:
                ids.append(self.index[p])
            else:  # byte fallback
                ids.extend(self.index[f"<0x{b:02X}>"] for b in p.encode("utf-8"))
        return ids

    def decode(self, ids):
        out = bytearray()
        for i in ids:
            t = self.tokens[i]
            if len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
                out.append(int(t[3:5], 16))
            elif t in ("<s>", "</s>", "<unk>"):
                continue
            else:
                out.extend(t.replace("\u2581", " ").encode("utf-8"))
        return out.decode("utf-8", errors="replace")


def main(argv):
    path = argv[1]
    prompt = argv[2] if len(argv) > 2 else "Once upon a time"
    n_new = int(argv[3]) if len(argv) > 3 else 60
    model = LlamaRef(path)
    vocab = SpmVocab(model.file)
    ids = vocab.encode(prompt)
    out = model.greedy(ids, n_new)
    print("prompt ids:", ids)
    print("generated ids:", out[len(ids):])
    print("text:", vocab.decode(out).lstrip())


if __name__ == "__main__":
    main(sys.argv)
