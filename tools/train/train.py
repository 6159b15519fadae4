"""train.py: trains kvwarden's embedded default model (see README.md for the command line).

Steps: extract the KJV text (kjv.py), train the tokenizer (spm_bpe.py), encode every chapter
as <s> text </s>, then train the Llama model (model.py) on random 256-token windows of the
training stream. Everything is seeded: the window offsets come from a torch.Generator seeded
with --seed, so a rerun with the same flags and the same torch build sees the same batches.
A checkpoint (model + optimizer + step) is written every --ckpt-every steps and at the end, and
the run resumes from it, so a run cut short still leaves a usable model in --out.
Progress goes to --out/log.csv (step, seconds, lr, train loss, validation loss).
"""

import argparse
import dataclasses
import json
import math
import os
import time

import torch
import torch.nn.functional as F

import kjv
from export import import_gguf
from model import Config, Llama
from spm_bpe import BOS, EOS, Tokenizer


def prepare(out, vocab_size):
    """Tokenizer and token streams, cached in `out` (they depend only on the text)."""
    tok_path = os.path.join(out, "tokenizer.json")
    data_path = os.path.join(out, "tokens.pt")
    if os.path.exists(tok_path) and os.path.exists(data_path):
        return Tokenizer.load(tok_path), torch.load(data_path)
    train_docs, val_docs = kjv.split_documents()
    if os.path.exists(tok_path):  # e.g. the vocabulary of the GGUF we continue from
        tok = Tokenizer.load(tok_path)
    else:
        t0 = time.time()
        tok = Tokenizer.train(train_docs, vocab_size)
        print("tokenizer: %d pieces in %.1fs" % (len(tok.pieces), time.time() - t0), flush=True)

    def stream(docs):
        ids = []
        for d in docs:
            ids += tok.encode(d, bos=True, eos=True)
        return torch.tensor(ids, dtype=torch.int16)

    data = {"train": stream(train_docs), "val": stream(val_docs)}
    tok.save(tok_path)
    torch.save(data, data_path)
    return tok, data


def lr_at(step, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    p = min(1.0, (step - args.warmup) / max(1, args.steps - args.warmup))
    return args.min_lr + 0.5 * (args.lr - args.min_lr) * (1 + math.cos(math.pi * p))


@torch.no_grad()
def evaluate(model, val, n_ctx):
    """Mean next-token loss over non-overlapping n_ctx windows of the validation stream."""
    model.eval()
    total, count = 0.0, 0
    n = (len(val) - 1) // n_ctx
    for i in range(0, n, 16):
        rows = [val[j * n_ctx:(j + 1) * n_ctx + 1].long() for j in range(i, min(n, i + 16))]
        x = torch.stack(rows)
        logits = model(x[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1),
                               reduction="sum")
        total += loss.item()
        count += x[:, 1:].numel()
    model.train()
    return total / count


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="/tmp/kvw-train")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--init-gguf", default="",
                    help="with no checkpoint in --out: start from this GGUF's weights and vocabulary")
    ap.add_argument("--ctx", type=int, default=256, help="training window (tokens)")
    ap.add_argument("--n-ctx", type=int, default=0,
                    help="the model's context (llama.context_length); 0: --ctx")
    ap.add_argument("--rope-scaling", default="none", choices=("none", "linear", "yarn"))
    ap.add_argument("--rope-factor", type=float, default=1.0)
    ap.add_argument("--rope-orig-ctx", type=int, default=0,
                    help="context before the extension (rope.scaling.original_context_length)")
    ap.add_argument("--recompute", action="store_true",
                    help="recompute each block in backward instead of storing its activations")
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr", type=float, default=3e-4)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ckpt-every", type=int, default=10)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--max-steps-this-run", type=int, default=0,
                    help="stop after this many steps (timing trials); 0: run to --steps")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    ckpt_path = os.path.join(args.out, "ckpt.pt")
    ck = torch.load(ckpt_path) if os.path.exists(ckpt_path) else None
    cfg = Config(n_ctx=args.n_ctx or args.ctx, rope_scaling=args.rope_scaling,
                 rope_factor=args.rope_factor, rope_orig_ctx=args.rope_orig_ctx)
    init = None
    if ck is None and args.init_gguf:
        _, init, gguf_tok = import_gguf(args.init_gguf)
        gguf_tok.save(os.path.join(args.out, "tokenizer.json"))
        print("starting from %s" % args.init_gguf, flush=True)
    tok, data = prepare(args.out, args.vocab)
    train, val = data["train"], data["val"]
    print("tokens: train %d, val %d" % (len(train), len(val)), flush=True)

    torch.manual_seed(args.seed)
    cfg = Config(**ck["config"]) if ck else dataclasses.replace(cfg, n_vocab=len(tok.pieces))
    model = Llama(cfg)
    if init is not None:
        model.load_state_dict(init.state_dict())
    print("parameters: %d" % model.n_params(), flush=True)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    step, elapsed = 0, 0.0
    if ck:
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        step, elapsed = ck["step"], ck["elapsed"]
        print("resumed at step %d" % step, flush=True)
    log_path = os.path.join(args.out, "log.csv")
    if step == 0:
        with open(log_path, "w") as f:
            f.write("step,seconds,lr,train_loss,val_loss\n")

    def save():
        tmp = ckpt_path + ".tmp"
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                    "elapsed": elapsed, "config": cfg.to_dict(), "args": vars(args)}, tmp)
        os.replace(tmp, ckpt_path)

    n_ctx = args.ctx
    stop = args.steps if not args.max_steps_this_run else min(args.steps,
                                                              step + args.max_steps_this_run)
    t_last = time.time()
    while step < stop:
        # Batch `step` depends only on (seed, step): resuming reproduces the same data order.
        g = torch.Generator().manual_seed(args.seed * 1000003 + step)
        offs = torch.randint(0, len(train) - n_ctx - 1, (args.batch,), generator=g)
        x = torch.stack([train[o:o + n_ctx + 1].long() for o in offs.tolist()])
        lr = lr_at(step, args)
        for group in opt.param_groups:
            group["lr"] = lr
        logits = model(x[:, :-1], recompute=args.recompute)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        now = time.time()
        elapsed += now - t_last
        t_last = now
        val_loss = ""
        if step % args.eval_every == 0 or step == args.steps:
            val_loss = "%.4f" % evaluate(model, val, n_ctx)
            t_last = time.time()  # evaluation time is not training time
        with open(log_path, "a") as f:
            f.write("%d,%.1f,%.6f,%.4f,%s\n" % (step, elapsed, lr, loss.item(), val_loss))
        if step % 10 == 0 or val_loss:
            print("step %d  %.1fs  lr %.2e  loss %.4f  val %s" % (step, elapsed, lr, loss.item(),
                                                                  val_loss or "-"), flush=True)
        if step % args.ckpt_every == 0 or step == stop:
            save()
    print("done: step %d, %.1fs of training" % (step, elapsed), flush=True)


if __name__ == "__main__":
    main()
