"""export.py: writes a training checkpoint as a llama-architecture GGUF for kvwarden.

  /usr/bin/python3 export.py --out /tmp/kvw-train --gguf ../../models/kvwarden-default.gguf

Matrices are stored as F16, norm weights as F32. Tensor names and metadata keys are the ones
src/model/hparams.cc and weights.cc read; the output projection is tied to token_embd (no
output.weight). The tokenizer is a "llama" (SentencePiece) vocabulary with byte fallback.

The chat template makes a plain completion prompt: the model is not instruction-tuned, so the
messages' contents are joined by single spaces, with no role markers and nothing appended for the
generation prompt; a "chat" request thus continues the user's text.
"""

import argparse
import os

import torch

import gguf_reader
from gguf_writer import GgufWriter
from model import Config, Llama
from spm_bpe import BOS, EOS, UNK, Tokenizer

CHAT_TEMPLATE = ("{% for message in messages %}{% if not loop.first %} {% endif %}"
                 "{{ message['content'] }}{% endfor %}")


def load_model(out):
    ck = torch.load(os.path.join(out, "ckpt.pt"))
    model = Llama(Config(**ck["config"]))
    model.load_state_dict(ck["model"])
    model.eval()
    return model, ck["step"]


def gguf_tensors(model):
    """(GGUF tensor name, parameter) pairs; matrices are stored F16, vectors F32."""
    yield "token_embd.weight", model.token_embd.weight
    yield "output_norm.weight", model.output_norm.weight
    for i, b in enumerate(model.blocks):
        p = "blk.%d." % i
        yield from ((p + "attn_norm.weight", b.attn_norm.weight), (p + "attn_q.weight", b.wq.weight),
                    (p + "attn_k.weight", b.wk.weight), (p + "attn_v.weight", b.wv.weight),
                    (p + "attn_output.weight", b.wo.weight), (p + "ffn_norm.weight", b.ffn_norm.weight),
                    (p + "ffn_gate.weight", b.gate.weight), (p + "ffn_up.weight", b.up.weight),
                    (p + "ffn_down.weight", b.down.weight))


def import_gguf(path):
    """The inverse of export(): (Config, model with the file's weights, Tokenizer)."""
    meta, tensors = gguf_reader.read(path)
    a = "llama."
    cfg = Config(n_vocab=tensors["token_embd.weight"].shape[0], n_embd=meta[a + "embedding_length"],
                 n_layer=meta[a + "block_count"], n_head=meta[a + "attention.head_count"],
                 n_head_kv=meta[a + "attention.head_count_kv"], n_ff=meta[a + "feed_forward_length"],
                 n_ctx=meta[a + "context_length"],
                 norm_eps=meta[a + "attention.layer_norm_rms_epsilon"],
                 rope_base=meta[a + "rope.freq_base"],
                 rope_scaling=meta.get(a + "rope.scaling.type", "none"),
                 rope_factor=meta.get(a + "rope.scaling.factor", 1.0),
                 rope_orig_ctx=meta.get(a + "rope.scaling.original_context_length", 0))
    model = Llama(cfg)
    with torch.no_grad():
        for name, p in gguf_tensors(model):
            p.copy_(torch.from_numpy(tensors[name]))
    tok = Tokenizer(meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.scores"],
                    meta["tokenizer.ggml.token_type"])
    return cfg, model, tok


def export(model, tok, path, step):
    cfg = model.cfg
    w = GgufWriter()
    w.add_string("general.architecture", "llama")
    w.add_string("general.name", "kvwarden-default")
    w.add_string("general.description",
                 "kvwarden's embedded default model: a %d-parameter Llama trained on the King "
                 "James Bible (tools/train; %d steps in the last run, see "
                 "models/kvwarden-default.md)" % (model.n_params(), step))
    w.add_string("general.license", "public-domain text; model weights CC0")
    w.add_u32("general.alignment", 32)
    w.add_u32("general.file_type", 1)  # mostly F16
    w.add_u32("llama.context_length", cfg.n_ctx)
    w.add_u32("llama.embedding_length", cfg.n_embd)
    w.add_u32("llama.block_count", cfg.n_layer)
    w.add_u32("llama.feed_forward_length", cfg.n_ff)
    w.add_u32("llama.attention.head_count", cfg.n_head)
    w.add_u32("llama.attention.head_count_kv", cfg.n_head_kv)
    w.add_u32("llama.rope.dimension_count", cfg.head_dim)
    w.add_f32("llama.rope.freq_base", cfg.rope_base)
    w.add_f32("llama.attention.layer_norm_rms_epsilon", cfg.norm_eps)
    if cfg.rope_scaling != "none":
        w.add_string("llama.rope.scaling.type", cfg.rope_scaling)
        w.add_f32("llama.rope.scaling.factor", cfg.rope_factor)
        w.add_u32("llama.rope.scaling.original_context_length", cfg.rope_orig_ctx)
    w.add_u32("llama.vocab_size", cfg.n_vocab)
    w.add_string("tokenizer.ggml.model", "llama")
    w.add_string_array("tokenizer.ggml.tokens", tok.pieces)
    w.add_f32_array("tokenizer.ggml.scores", tok.scores)
    w.add_i32_array("tokenizer.ggml.token_type", tok.types)
    w.add_u32("tokenizer.ggml.bos_token_id", BOS)
    w.add_u32("tokenizer.ggml.eos_token_id", EOS)
    w.add_u32("tokenizer.ggml.unknown_token_id", UNK)
    w.add_bool("tokenizer.ggml.add_bos_token", True)
    w.add_bool("tokenizer.ggml.add_eos_token", False)
    w.add_bool("tokenizer.ggml.add_space_prefix", True)
    w.add_string("tokenizer.chat_template", CHAT_TEMPLATE)

    for name, p in gguf_tensors(model):
        w.add_tensor(name, p.detach().float().numpy(), f16=p.dim() == 2)
    w.write(path)


def f16_model(model):
    """A copy whose matrices went through float16, as the GGUF stores them."""
    m = Llama(model.cfg)
    m.load_state_dict(model.state_dict())
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() == 2:
                p.copy_(p.half().float())
    m.eval()
    return m


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="/tmp/kvw-train", help="training directory")
    ap.add_argument("--gguf", default=os.path.join(os.path.dirname(__file__),
                                                   "../../models/kvwarden-default.gguf"))
    args = ap.parse_args()
    model, step = load_model(args.out)
    tok = Tokenizer.load(os.path.join(args.out, "tokenizer.json"))
    export(model, tok, args.gguf, step)
    print("wrote %s (step %d, %d bytes)" % (args.gguf, step, os.path.getsize(args.gguf)))


if __name__ == "__main__":
    main()
