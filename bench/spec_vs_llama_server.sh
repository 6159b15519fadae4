#!/usr/bin/env bash
# Speculative decoding at batch 1, kvwarden against llama.cpp's llama-server on the same files:
# decode tokens/s and draft acceptance, plain / prompt lookup (n-gram) / draft model, on an
# input-grounded prompt (the answer quotes it) and on free generation.
#
#   LLAMA_SERVER=/path/to/llama-server bench/spec_vs_llama_server.sh TARGET.gguf DRAFT.gguf
#
# Each server runs alone (one at a time, THREADS threads): kvwarden serve with nothing,
# --spec-ngram, then --draft-model DRAFT; llama-server with nothing, --spec-type ngram-simple,
# then --spec-type draft-simple -md DRAFT (both drafting at most K tokens). Each prompt is asked
# for N greedy tokens (ignore_eos) and for 1; decode tok/s = (N - 1) / (t_N - t_1), t_N and t_1
# each the fastest of RUNS whole requests timed at the client (the prompt is cached by both
# servers after the first). Timing whole requests, not streamed chunks, keeps tokens whose text is
# empty or held back (byte tokens of random weights) in the count. Acceptance: kvwarden's
# vllm:spec_decode_* counters over the N-token requests, llama-server's timings
# (draft_n, draft_n_accepted). Outputs are compared with the plain run of the same server.
# Environment: KVW (build/apps/kvwarden/kvwarden), N (128), K (4), THREADS (2), RUNS (3),
# PORT (8491). Not part of ctest: it needs llama-server (built outside this repository).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n 2,18p "$0"; exit 2; }
TARGET=$1
DRAFT=$2
KVW=${KVW:-build/apps/kvwarden/kvwarden}
LLAMA_SERVER=${LLAMA_SERVER:?set LLAMA_SERVER to a llama-server binary}
N=${N:-128}
K=${K:-4}
THREADS=${THREADS:-2}
RUNS=${RUNS:-3}
PORT=${PORT:-8491}
WORK=$(mktemp -d)
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

wait_up() {
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "server did not come up: $(tail -5 "$WORK/server.log")" >&2
  return 1
}

measure() {  # server-kind label
  python3 - "$PORT" "$1" "$2" "$N" "$RUNS" "$WORK" <<'PY'
import json, os, sys, time, urllib.request
port, kind, label, n, runs, work = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
passage = ("In the beginning God created the heaven and the earth. And the earth was without form, "
           "and void; and darkness was upon the face of the deep. And the Spirit of God moved upon "
           "the face of the waters. And God said, Let there be light: and there was light. And God "
           "saw the light, that it was good: and God divided the light from the darkness. And God "
           "called the light Day, and the darkness he called Night. And the evening and the "
           "morning were the first day.")
prompts = {"grounded": passage + "\n\nRepeat the text above word for word.\n\nIn the beginning God",
           "free": "And it came to pass"}
def post(path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=900))
def metrics():
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60).read().decode()
    out = {}
    for line in text.splitlines():
        for key in ("vllm:spec_decode_num_draft_tokens_total", "vllm:spec_decode_num_accepted_tokens_total"):
            if line.startswith(key + " ") or line.startswith(key + "{"):
                out[key] = float(line.split()[-1])
    return out
def timed(path, body):
    t0 = time.perf_counter()
    r = post(path, body)
    return time.perf_counter() - t0, r
def ask(prompt, k):
    """Returns (seconds for the whole request, text, drafted, accepted); checks that k tokens came."""
    if kind == "kvw":
        dt, r = timed("/v1/completions", {"prompt": prompt, "max_tokens": k, "temperature": 0,
                                          "ignore_eos": True})
        got, text, d, a = r["usage"]["completion_tokens"], r["choices"][0]["text"], None, None
    else:
        dt, r = timed("/completion", {"prompt": prompt, "n_predict": k, "temperature": 0,
                                      "top_k": 1, "ignore_eos": True})
        tm = r.get("timings", {})
        got, text, d, a = r.get("tokens_predicted"), r["content"], tm.get("draft_n"), tm.get("draft_n_accepted")
    if got != k:
        raise RuntimeError(f"asked for {k} tokens, got {got}")
    return dt, text, d, a
for name, prompt in prompts.items():
    try:
        t1 = min(ask(prompt, 1)[0] for _ in range(runs + 1))  # the first fills the prompt cache
    except Exception as e:  # e.g. llama-server's 500 on a token that is not valid UTF-8
        print(f"| {kind} | {label} | {name} | failed: {str(e)[:80]} | | |", flush=True)
        continue
    tn, text, drafted, accepted = None, "", 0, 0
    failed = None
    for _ in range(runs):
        m0 = metrics() if kind == "kvw" else {}
        try:
            dt, text, d, a = ask(prompt, n)
        except Exception as e:
            failed = str(e)[:80]
            break
        if kind == "kvw":
            m1 = metrics()
            d = m1.get("vllm:spec_decode_num_draft_tokens_total", 0) - m0.get("vllm:spec_decode_num_draft_tokens_total", 0)
            a = m1.get("vllm:spec_decode_num_accepted_tokens_total", 0) - m0.get("vllm:spec_decode_num_accepted_tokens_total", 0)
        tn = dt if tn is None else min(tn, dt)
        drafted, accepted = drafted + (d or 0), accepted + (a or 0)
    if failed:
        print(f"| {kind} | {label} | {name} | failed: {failed} | | |", flush=True)
        continue
    best = (n - 1) / max(tn - t1, 1e-9)
    ref_path = os.path.join(work, f"{kind}-{name}.plain")
    if label == "plain":
        open(ref_path, "w").write(text)
        same = "-"
    else:
        same = "yes" if os.path.exists(ref_path) and open(ref_path).read() == text else "NO"
    acc = f"{100.0 * accepted / drafted:.1f}%" if drafted else "-"
    print(f"| {kind} | {label} | {name} | {best:.1f} | {acc} ({int(accepted)}/{int(drafted)}) | {same} |", flush=True)
PY
}

run_kvw() {  # label flags...
  local label=$1
  shift
  "$KVW" serve -m "$TARGET" --port "$PORT" -t "$THREADS" --max-num-seqs 1 --spec-max-draft "$K" \
    "$@" >"$WORK/server.log" 2>&1 &
  pid=$!
  wait_up
  measure kvw "$label"
  kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
}

run_lcpp() {  # label flags...
  local label=$1
  shift
  "$LLAMA_SERVER" -m "$TARGET" --port "$PORT" -t "$THREADS" -c 2048 -np 1 "$@" \
    >"$WORK/server.log" 2>&1 &
  pid=$!
  wait_up
  measure lcpp "$label"
  kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
}

echo "target $TARGET, draft $DRAFT, batch 1, $N greedy tokens, k $K, $THREADS threads, best of $RUNS"
echo "| server | speculation | workload | decode tok/s | acceptance | same text as plain |"
echo "|---|---|---|---|---|---|"
run_kvw plain
run_kvw ngram --spec-ngram
run_kvw draft --draft-model "$DRAFT"
run_lcpp plain
run_lcpp ngram --spec-type ngram-simple --spec-draft-n-max "$K"
run_lcpp draft --spec-type draft-simple -md "$DRAFT" --spec-draft-n-max "$K" -td "$THREADS"
