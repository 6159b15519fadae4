"""evaluate.py: validation numbers, samples, the loss plot and the test data for the exported model.

  /usr/bin/python3 evaluate.py --out /tmp/kvw-train --kvwarden /tmp/build-train/apps/kvwarden/kvwarden

Writes, from the checkpoint in --out (the same weights export.py writes, rounded to F16 where the
GGUF stores F16):
  tests/default_model/heldout_tokens.json  the first 8 non-overlapping 256-token windows of the
                                           validation stream, as `kvwarden logits` reads them
  tests/default_model/heldout_text.txt     the validation chapters inside those windows, one a
                                           line (the tokenizer test re-encodes them)
  tests/default_model/pytorch_ppl.txt      PyTorch's perplexity on those windows
  tests/default_model/heldout_8k_tokens.json  the first 8192 validation tokens, one sequence
  tests/default_model/pytorch_ppl_8k.txt   PyTorch's perplexity on it
  models/kvwarden-default-loss.svg/.csv    the loss curve
  --out/eval.json                          full validation loss, samples, C++ comparison
Perplexity by context (eval.json "ppl_by_ctx"): the validation stream cut into non-overlapping
windows of 256, 1024, 4096 and 8192 tokens, each window alone, every position but the first
predicted from the ones before it in its window.
With --kvwarden, also runs the binary: `logits` on a prompt (max abs difference from PyTorch),
the same perplexities from its logits, and greedy `generate` on the sample prompts (must equal
PyTorch's greedy text).
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

from export import f16_model, load_model
from spm_bpe import EOS, Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "../.."))
TEST_DIR = os.path.join(ROOT, "tests/default_model")
N_WINDOWS, WINDOW = 8, 256
PROMPTS = ["In the beginning", "And the LORD said unto Moses,", "Blessed are the",
           "The kingdom of heaven is like"]
N_SAMPLE = 40
CONTEXTS = (256, 1024, 4096, 8192)


@torch.no_grad()
def window_nll(model, windows):
    """Summed next-token NLL and count over each window (positions predict the next token)."""
    x = torch.tensor(windows, dtype=torch.long)
    logits = model(x[:, :-1])
    nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1),
                          reduction="sum")
    return nll.item(), x[:, 1:].numel()


@torch.no_grad()
def full_val_loss(model, val):
    n = (len(val) - 1) // WINDOW
    windows = [val[i * WINDOW:(i + 1) * WINDOW + 1].tolist() for i in range(n)]
    total, count = 0.0, 0
    for i in range(0, n, 8):
        s, c = window_nll(model, windows[i:i + 8])
        total, count = total + s, count + c
    return total / count


@torch.no_grad()
def greedy(model, tok, prompt, n):
    ids = tok.encode(prompt, bos=True)
    out = []
    for _ in range(n):
        if len(ids) >= model.cfg.n_ctx:
            break
        nxt = int(model(torch.tensor([ids]))[0, -1].argmax())
        if nxt == EOS:
            break
        ids.append(nxt)
        out.append(nxt)
    return tok.decode(out) if out else ""


def held_out(val, tok, val_docs):
    """The test windows and the chapters that lie wholly inside them."""
    windows = [val[i * WINDOW:(i + 1) * WINDOW].tolist() for i in range(N_WINDOWS)]
    flat = [t for w in windows for t in w]
    texts, pos = [], 0
    for doc in val_docs:
        ids = tok.encode(doc, bos=True, eos=True)
        if pos + len(ids) > len(flat):
            break
        assert flat[pos:pos + len(ids)] == ids, "validation stream does not match the encoder"
        texts.append(doc)
        pos += len(ids)
    return windows, texts


def windows_ppl(model, windows):
    # Each window is evaluated alone: tokens 1..n-1 predicted from the tokens before them.
    nll, cnt = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(windows), 8):
            x = torch.tensor(windows[i:i + 8])
            logits = model(x)
            nll += F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                   x[:, 1:].reshape(-1), reduction="sum").item()
            cnt += x[:, 1:].numel()
    return math.exp(nll / cnt)


def ctx_windows(val, n):
    return [val[i * n:(i + 1) * n].tolist() for i in range(len(val) // n)]


def cpp_logits(exe, gguf, seqs, path):
    """`kvwarden logits` on seqs: a memory map [sum of lengths][n_vocab] of its output."""
    with open(path + ".json", "w") as f:
        json.dump({"sequences": seqs}, f)
    subprocess.run([exe, "logits", "--model", gguf, "--tokens-file", path + ".json", "--out",
                    path, "--threads", "2"], check=True)
    return np.memmap(path, dtype=np.float32, mode="r").reshape(sum(map(len, seqs)), -1)


def cpp_windows_ppl(exe, gguf, windows):
    nll, cnt, row = 0.0, 0, 0
    with tempfile.TemporaryDirectory() as d:
        logits = cpp_logits(exe, gguf, windows, os.path.join(d, "l.bin"))
        for w in windows:
            l = torch.from_numpy(np.array(logits[row:row + len(w) - 1])).double()
            nll += F.cross_entropy(l, torch.tensor(w[1:]), reduction="sum").item()
            cnt += len(w) - 1
            row += len(w)
    return math.exp(nll / cnt)


def loss_svg(rows, path):
    """A small hand-written SVG: training loss per step, validation loss as dots."""
    w, h, ml, mb = 640, 360, 50, 40
    steps = [r[0] for r in rows]
    losses = [r[3] for r in rows]
    vals = [(r[0], r[4]) for r in rows if r[4] is not None]
    lo, hi = 0.0, max(losses) * 1.05
    sx = lambda s: ml + (w - ml - 10) * s / max(steps)
    sy = lambda v: h - mb - (h - mb - 10) * (v - lo) / (hi - lo)
    pts = " ".join("%.1f,%.1f" % (sx(s), sy(v)) for s, v in zip(steps, losses))
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="11">' % (w, h),
           '<rect width="100%" height="100%" fill="white"/>',
           '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (ml, h - mb, w - 10, h - mb),
           '<line x1="%d" y1="10" x2="%d" y2="%d" stroke="black"/>' % (ml, ml, h - mb)]
    for k in range(0, int(hi) + 1):
        out.append('<text x="%d" y="%.1f" text-anchor="end">%d</text>' % (ml - 4, sy(k) + 4, k))
    for k in range(0, max(steps) + 1, max(1, max(steps) // 5)):
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>' %
                   (sx(k), h - mb + 14, k))
    out.append('<text x="%d" y="%d" text-anchor="middle">step</text>' % ((w + ml) // 2, h - 6))
    out.append('<text x="12" y="%d" transform="rotate(-90 12 %d)" text-anchor="middle">'
               'loss (nats/token)</text>' % (h // 2, h // 2))
    out.append('<polyline fill="none" stroke="steelblue" points="%s"/>' % pts)
    for s, v in vals:
        out.append('<circle cx="%.1f" cy="%.1f" r="4" fill="darkorange"/>' % (sx(s), sy(v)))
    out.append('<text x="%d" y="24" fill="steelblue">train loss (batch)</text>' % (w - 200))
    out.append('<text x="%d" y="40" fill="darkorange">validation loss</text>' % (w - 200))
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def read_log(path):
    rows = []
    with open(path) as f:
        next(f)
        for line in f:
            s, t, lr, tl, vl = line.strip().split(",")
            rows.append((int(s), float(t), float(lr), float(tl), float(vl) if vl else None))
    return rows


def compare_cpp(exe, gguf, model, tok, result):
    ids = tok.encode(PROMPTS[1] + " and to Aaron, saying, Speak unto the children of Israel",
                     bos=True)
    with tempfile.TemporaryDirectory() as d:
        cpp = np.array(cpp_logits(exe, gguf, [ids], os.path.join(d, "l.bin")))
    with torch.no_grad():
        py = model(torch.tensor([ids]))[0].numpy()
    result["logits_max_abs_diff"] = float(np.abs(cpp - py).max())
    result["logits_max_abs"] = float(np.abs(py).max())
    result["cpp_greedy"] = {}
    for p in PROMPTS:
        r = subprocess.run([exe, "generate", "--model", gguf, "--prompt", p, "--max-tokens",
                            str(N_SAMPLE), "--temperature", "0", "--threads", "1"],
                           check=True, capture_output=True, text=True)
        result["cpp_greedy"][p] = r.stdout[:-1] if r.stdout.endswith("\n") else r.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="/tmp/kvw-train")
    ap.add_argument("--gguf", default=os.path.join(ROOT, "models/kvwarden-default.gguf"))
    ap.add_argument("--kvwarden", default="", help="kvwarden binary for the C++ comparison")
    args = ap.parse_args()
    torch.set_num_threads(2)
    import kjv
    model32, step = load_model(args.out)
    model = f16_model(model32)
    tok = Tokenizer.load(os.path.join(args.out, "tokenizer.json"))
    val = torch.load(os.path.join(args.out, "tokens.pt"))["val"]
    _, val_docs = kjv.split_documents()

    windows, texts = held_out(val, tok, val_docs)
    ppl = windows_ppl(model, windows)
    os.makedirs(TEST_DIR, exist_ok=True)
    with open(os.path.join(TEST_DIR, "heldout_tokens.json"), "w") as f:
        f.write('{"sequences": [\n' + ",\n".join(json.dumps(w) for w in windows) + "\n]}\n")
    with open(os.path.join(TEST_DIR, "heldout_text.txt"), "w") as f:
        f.write("".join(t + "\n" for t in texts))
    with open(os.path.join(TEST_DIR, "pytorch_ppl.txt"), "w") as f:
        f.write("%.6f\n" % ppl)
    long = ctx_windows(val, 8192)[:1]
    with open(os.path.join(TEST_DIR, "heldout_8k_tokens.json"), "w") as f:
        f.write('{"sequences": [\n' + json.dumps(long[0]) + "\n]}\n")
    with open(os.path.join(TEST_DIR, "pytorch_ppl_8k.txt"), "w") as f:
        f.write("%.6f\n" % windows_ppl(model, long))

    rows = read_log(os.path.join(args.out, "log.csv"))
    shutil.copy(os.path.join(args.out, "log.csv"), os.path.join(ROOT, "models/kvwarden-default-loss.csv"))
    loss_svg(rows, os.path.join(ROOT, "models/kvwarden-default-loss.svg"))

    result = {"step": step, "train_seconds": rows[-1][1] if rows else 0.0,
              "params": model.n_params(), "heldout_ppl_f16": ppl,
              "heldout_tokens": N_WINDOWS * WINDOW, "heldout_chapters": len(texts)}
    result["val_loss_f32"] = full_val_loss(model32, val)
    result["val_loss_f16"] = full_val_loss(model, val)
    result["val_ppl_f32"] = math.exp(result["val_loss_f32"])
    result["val_ppl_f16"] = math.exp(result["val_loss_f16"])
    result["val_tokens"] = len(val)
    result["ppl_by_ctx"] = {n: {"windows": len(ctx_windows(val, n)),
                                "pytorch_f16": windows_ppl(model, ctx_windows(val, n))}
                            for n in CONTEXTS}
    result["py_greedy"] = {p: greedy(model, tok, p, N_SAMPLE) for p in PROMPTS}
    if args.kvwarden:
        compare_cpp(args.kvwarden, args.gguf, model, tok, result)
        for n in CONTEXTS:
            result["ppl_by_ctx"][n]["kvwarden"] = cpp_windows_ppl(args.kvwarden, args.gguf,
                                                                 ctx_windows(val, n))
        result["greedy_match"] = result["cpp_greedy"] == result["py_greedy"]
    with open(os.path.join(args.out, "eval.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
