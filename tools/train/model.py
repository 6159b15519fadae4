"""model.py: the Llama-architecture decoder in PyTorch, matching our C++ forward (src/model).

Conventions that must agree with src/model/forward.cc and rope.cc for general.architecture=llama:
- RMSNorm: x / sqrt(mean(x^2) + eps) * weight, eps 1e-5.
- RoPE "normal" style (llama.cpp's LLAMA_ROPE_TYPE_NORM): the pairs rotated are the adjacent
  dimensions (2i, 2i+1) of each head, by angle pos * base^(-2i/head_dim). Because we train in
  this layout ourselves, the exported Q/K weights need no permutation (llama.cpp's converter
  permutes Hugging Face checkpoints only because they are trained in the NeoX half-split layout).
- RoPE scaling as rope.cc: "linear" divides every frequency by the factor; "yarn" interpolates
  the low frequencies by the factor and keeps the high ones, with a linear ramp between the pairs
  that turn beta_slow=1 and beta_fast=32 times over the original context, and multiplies cos and
  sin by 1 + 0.1 ln(factor) (so the attention logits grow by its square).
- Attention: causal, scaled by 1/sqrt(head_dim), grouped-query (n_head / n_head_kv query heads
  share one K/V head: query head h uses KV head h // group).
- FFN: down(silu(gate(x)) * up(x)); no biases anywhere.
- Output: tied to the token embedding (no output.weight in the GGUF).
"""

import math
from dataclasses import dataclass, asdict

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


@dataclass
class Config:
    n_vocab: int = 4096
    n_embd: int = 256
    n_layer: int = 6
    n_head: int = 8
    n_head_kv: int = 4
    n_ff: int = 640
    n_ctx: int = 256
    norm_eps: float = 1e-5
    rope_base: float = 10000.0
    rope_scaling: str = "none"  # none, linear or yarn (llama.rope.scaling.type)
    rope_factor: float = 1.0
    rope_orig_ctx: int = 0  # context before the extension (rope.scaling.original_context_length)

    @property
    def head_dim(self):
        return self.n_embd // self.n_head

    def to_dict(self):
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(n))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _yarn_corr_dim(n_rot, orig_ctx, beta, base):
    return n_rot * math.log(orig_ctx / (beta * 2.0 * math.pi)) / (2.0 * math.log(base))


def rope_tables(cfg, n_pos):
    """cos and sin [n_pos][head_dim / 2], computed in float64 as RopeTable does."""
    n_rot, s = cfg.head_dim, cfg.rope_factor
    inv = cfg.rope_base ** (-2.0 * torch.arange(n_rot // 2, dtype=torch.float64) / n_rot)
    pos = torch.arange(n_pos, dtype=torch.float64)[:, None]
    mscale = 1.0
    if cfg.rope_scaling == "linear":
        ang = pos * (inv / s)[None, :]
    elif cfg.rope_scaling == "yarn":
        orig = cfg.rope_orig_ctx
        low = max(0.0, math.floor(_yarn_corr_dim(n_rot, orig, 32.0, cfg.rope_base)))
        high = min(n_rot - 1.0, math.ceil(_yarn_corr_dim(n_rot, orig, 1.0, cfg.rope_base)))
        i = torch.arange(n_rot // 2, dtype=torch.float64)
        ramp = 1.0 - ((i - low) / max(0.001, high - low)).clamp(0.0, 1.0)
        extrap = pos * inv[None, :]
        ang = extrap * (1.0 / s) * (1.0 - ramp) + extrap * ramp
        mscale = 1.0 + 0.1 * math.log(s)
    else:
        assert cfg.rope_scaling == "none", cfg.rope_scaling
        ang = pos * inv[None, :]
    return (torch.cos(ang) * mscale).float(), (torch.sin(ang) * mscale).float()


def apply_rope(x, cos, sin):
    # x: [batch, heads, seq, head_dim]; rotate the adjacent pairs (2i, 2i+1).
    x0, x1 = x[..., 0::2], x[..., 1::2]
    r0 = x0 * cos - x1 * sin
    r1 = x0 * sin + x1 * cos
    return torch.stack((r0, r1), dim=-1).flatten(-2)


def causal_attention(q, k, v, chunk=512):
    """softmax(q k^T / sqrt(d) + causal mask) v, a chunk of queries at a time: the score matrix
    is never t x t (8192^2 floats per head is 256 MB), and keys after a chunk are skipped."""
    t, out = q.shape[2], []
    for s in range(0, t, chunk):
        e = min(t, s + chunk)
        att = (q[:, :, s:e] @ k[:, :, :e].transpose(-2, -1)) / math.sqrt(q.shape[-1])
        att = att + torch.full((e - s, e), float("-inf")).triu(s + 1)
        out.append(F.softmax(att, dim=-1) @ v[:, :, :e])
    return torch.cat(out, dim=2)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        d, hd = cfg.n_embd, cfg.head_dim
        self.attn_norm = RMSNorm(d, cfg.norm_eps)
        self.wq = nn.Linear(d, cfg.n_head * hd, bias=False)
        self.wk = nn.Linear(d, cfg.n_head_kv * hd, bias=False)
        self.wv = nn.Linear(d, cfg.n_head_kv * hd, bias=False)
        self.wo = nn.Linear(cfg.n_head * hd, d, bias=False)
        self.ffn_norm = RMSNorm(d, cfg.norm_eps)
        self.gate = nn.Linear(d, cfg.n_ff, bias=False)
        self.up = nn.Linear(d, cfg.n_ff, bias=False)
        self.down = nn.Linear(cfg.n_ff, d, bias=False)

    def forward(self, x, cos, sin):
        cfg = self.cfg
        b, t, _ = x.shape
        hd = cfg.head_dim
        h = self.attn_norm(x)
        q = self.wq(h).view(b, t, cfg.n_head, hd).transpose(1, 2)
        k = self.wk(h).view(b, t, cfg.n_head_kv, hd).transpose(1, 2)
        v = self.wv(h).view(b, t, cfg.n_head_kv, hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        group = cfg.n_head // cfg.n_head_kv
        # Query head h reads KV head h // group (expand is a view: no copy in the forward).
        k = k[:, :, None].expand(b, cfg.n_head_kv, group, t, hd).reshape(b, cfg.n_head, t, hd)
        v = v[:, :, None].expand(b, cfg.n_head_kv, group, t, hd).reshape(b, cfg.n_head, t, hd)
        y = causal_attention(q, k, v)
        x = x + self.wo(y.transpose(1, 2).reshape(b, t, cfg.n_head * hd))
        h = self.ffn_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.token_embd = nn.Embedding(cfg.n_vocab, cfg.n_embd)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.output_norm = RMSNorm(cfg.n_embd, cfg.norm_eps)
        cos, sin = rope_tables(cfg, cfg.n_ctx)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.apply(self._init)
        # GPT-2 style: scale the residual projections down with depth.
        for blk in self.blocks:
            for lin in (blk.wo, blk.down):
                nn.init.normal_(lin.weight, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, ids, recompute=False):
        """recompute: keep only the blocks' inputs for backward (long training windows)."""
        t = ids.shape[1]
        assert t <= self.cfg.n_ctx
        x = self.token_embd(ids)
        for blk in self.blocks:
            if recompute:
                x = checkpoint(blk, x, self.cos[:t], self.sin[:t], use_reentrant=False)
            else:
                x = blk(x, self.cos[:t], self.sin[:t])
        return self.output_norm(x) @ self.token_embd.weight.t()

    def n_params(self):
        return sum(p.numel() for p in self.parameters())
