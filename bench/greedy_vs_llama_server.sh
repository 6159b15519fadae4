#!/usr/bin/env bash
# Greedy text of kvwarden and llama.cpp's llama-server on the same GGUF files.
#
#   LLAMA_SERVER=/path/to/llama-server bench/greedy_vs_llama_server.sh MODEL.gguf [MODEL.gguf ...]
#
# For each file it starts `kvwarden serve` and `llama-server` (built outside this repository,
# never committed here), asks each for N greedy tokens after each prompt (kvwarden:
# /v1/completions with temperature 0; llama-server: /completion with temperature 0, top_k 1,
# n_predict N, ignore_eos on both) and prints, per prompt, how many leading characters and
# tokens agree (llama-server's token ids vs kvwarden's text re-tokenised by llama-server's
# /tokenize; kvwarden's text gets back the leading space it drops), then both texts when they
# differ. Then, by token id: the prompt's ids from both /tokenize routes, and llama-server's
# greedy ids replayed through `kvwarden logits` (teacher forcing): the first generated position
# where kvwarden's argmax is not llama-server's token is where the two greedy runs part, and the
# gap between the two best logits there, on both sides (llama-server's from n_probs 2), tells a
# near-tie decided by rounding from a real difference. Random-weight make-model files pick
# mostly unused tokens whose text is empty, so only the ids compare them.
# Environment: KVW (build/apps/kvwarden/kvwarden), KVW_ARGS (extra `serve` flags, e.g.
# "--max-num-seqs 4 --max-model-len 2048": the default KV pool of a 150k-vocabulary model may
# not fit a busy machine), N (64), THREADS (2), PORT (8471; llama-server PORT+1), PROMPTS (a
# |-separated list). Not part of ctest: it needs llama-server.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n 2,13p "$0"; exit 2; }
KVW=${KVW:-build/apps/kvwarden/kvwarden}
KVW_ARGS=${KVW_ARGS:-}
LLAMA_SERVER=${LLAMA_SERVER:?set LLAMA_SERVER to a llama-server binary}
N=${N:-64}
THREADS=${THREADS:-2}
PORT=${PORT:-8471}
LPORT=$((PORT + 1))
PROMPTS=${PROMPTS:-"the cat sat on the mat|Once upon a time, in a land far away|And the king said unto"}
WORK=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

wait_up() {  # url
  for _ in $(seq 1500); do
    curl -sf "$1" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "server at $1 did not come up" >&2
  return 1
}

for model in "$@"; do
  echo "== $model"
  # shellcheck disable=SC2086  # KVW_ARGS: extra serve flags, split on spaces
  "$KVW" serve -m "$model" --port "$PORT" -t "$THREADS" $KVW_ARGS >"$WORK/kvw.log" 2>&1 &
  kpid=$!
  "$LLAMA_SERVER" -m "$model" --port "$LPORT" -t "$THREADS" -c 1024 -np 1 \
    >"$WORK/lcpp.log" 2>&1 &
  lpid=$!
  pids=("$kpid" "$lpid")
  wait_up "http://127.0.0.1:$PORT/health" || { tail -3 "$WORK/kvw.log" >&2; exit 1; }
  wait_up "http://127.0.0.1:$LPORT/health"
  IFS='|' read -r -a prompts <<<"$PROMPTS"
  for prompt in "${prompts[@]}"; do
    python3 - "$PORT" "$LPORT" "$prompt" "$N" "$KVW" "$model" "$WORK" <<'PY'
import json, math, os, subprocess, sys, urllib.error, urllib.request
port, lport, prompt, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
kvw, model, work = sys.argv[5], sys.argv[6], sys.argv[7]
def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=600))
k = post(f"http://127.0.0.1:{port}/v1/completions",
         {"prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True})
ktext = k["choices"][0]["text"]
try:
    l = post(f"http://127.0.0.1:{lport}/completion",
             {"prompt": prompt, "n_predict": n, "temperature": 0, "top_k": 1, "ignore_eos": True,
              "return_tokens": True, "cache_prompt": False, "n_probs": 2})
except urllib.error.HTTPError as e:
    # llama-server (2026 master) answers 500 when the text is not valid UTF-8, e.g. a random-weight
    # model that picks byte tokens: nothing to compare then.
    print(f"  prompt {prompt!r}: llama-server error: {e.read().decode()[:160]}")
    sys.exit(0)
ltext, ltok = l["content"], l.get("tokens", [])
# Ids: the prompt as each server tokenises it (no special tokens), then llama-server's greedy ids
# replayed through kvwarden (its prompt with BOS as llama-server evaluated it).
kids = post(f"http://127.0.0.1:{port}/tokenize", {"prompt": prompt, "add_special_tokens": False})["tokens"]
lids = post(f"http://127.0.0.1:{lport}/tokenize", {"content": prompt})["tokens"]
lfull = post(f"http://127.0.0.1:{lport}/tokenize", {"content": prompt, "add_special": True})["tokens"]
seq = lfull + ltok
with open(os.path.join(work, "seq.json"), "w") as fh:
    json.dump({"sequences": [seq]}, fh)
out = os.path.join(work, "logits.bin")
subprocess.run([kvw, "logits", "--model", model, "--tokens-file", os.path.join(work, "seq.json"),
                "--out", out], check=True, capture_output=True)
import array
raw = array.array("f")
with open(out, "rb") as fh:
    raw.frombytes(fh.read())
n_vocab = len(raw) // len(seq)
def top2(pos):
    row = raw[pos * n_vocab:(pos + 1) * n_vocab]
    best = max(range(n_vocab), key=row.__getitem__)
    second = max((i for i in range(n_vocab) if i != best), key=row.__getitem__)
    return best, row[best] - row[second]
div, kgap = None, None
for i, tok in enumerate(ltok):
    best, g = top2(len(lfull) + i - 1)
    if best != tok:
        div, kgap, kbest = i, g, best
        break
lgap = None
probs = l.get("completion_probabilities", [])
if div is not None and div < len(probs):
    p = probs[div]
    top = [t["logprob"] for t in p["top_logprobs"]] if "top_logprobs" in p else \
          [math.log(max(t["prob"], 1e-45)) for t in p.get("probs", [])]
    lgap = top[0] - top[1] if len(top) >= 2 else None
print(f"  prompt {prompt!r}: prompt ids {'same' if kids == lids else 'DIFFER'} "
      f"({len(kids)} kvwarden, {len(lids)} llama-server); greedy ids "
      + ("identical for all %d" % len(ltok) if div is None else
         f"part at generated token {div}/{len(ltok)} (llama-server {ltok[div]}, kvwarden {kbest}; "
         f"top-2 logit gap there: kvwarden {kgap:.4f}, llama-server "
         + (f"{lgap:.4f}" if lgap is not None else "n/a") + ")"))
# kvwarden's text drops the SentencePiece space of the first generated piece; llama-server
# keeps it. Compare the pieces, not that convention.
if ltext.startswith(" ") and not ktext.startswith(" "):
    ktext = " " + ktext
ktok = post(f"http://127.0.0.1:{lport}/tokenize", {"content": ktext})["tokens"]
ltok2 = post(f"http://127.0.0.1:{lport}/tokenize", {"content": ltext})["tokens"]
chars = next((i for i, (a, b) in enumerate(zip(ktext, ltext)) if a != b), min(len(ktext), len(ltext)))
# Compare re-tokenised texts on both sides so that tokenisation differences cancel.
toks = next((i for i, (a, b) in enumerate(zip(ktok, ltok2)) if a != b), min(len(ktok), len(ltok2)))
same = ktext == ltext
print(f"  prompt {prompt!r}: {'IDENTICAL' if same else 'DIFFER'}: chars {chars}/{max(len(ktext), len(ltext))}, "
      f"tokens {toks}/{max(len(ktok), len(ltok2))} (llama-server generated {len(ltok)}; "
      f"prompt-eval {l['timings']['prompt_per_second']:.0f} tok/s, "
      f"decode {l['timings']['predicted_per_second']:.1f} tok/s)")
if not same:
    print(f"    kvwarden:     {ktext!r}")
    print(f"    llama-server: {ltext!r}")
PY
  done
  kill "$kpid" "$lpid" 2>/dev/null || true
  wait "$kpid" "$lpid" 2>/dev/null || true
  pids=()
done
