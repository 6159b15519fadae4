#!/usr/bin/env bash
# What sampling costs a server, beside llama.cpp's llama-server on the same files.
#
#   LLAMA_SERVER=/path/to/llama-server bench/sampling_vs_llama_server.sh
#
# For each vocabulary size V in VOCABS it writes a qwen2-shaped GGUF (dim 256, 4 layers, 8 heads,
# 2 KV heads, FFN 768, q8_0, byte-level BPE, V tokens) with `kvwarden make-model`, starts
# `kvwarden serve` on it and, when LLAMA_SERVER names a llama-server binary (built outside this
# repository, never committed here), `llama-server -np 16` on the same file. It then drives
# /v1/completions with `kvwarden bench` (closed loop, 1 and 16 in flight, 64 tokens each,
# ignore_eos, 32-token prompts) in three modes:
#   greedy   temperature 0
#   t1       temperature 1, top_p 1 (OpenAI's defaults)
#   p09      temperature 0.8, top_p 0.9
# Both servers get top_k 0 and min_p 0 explicitly, and greedy also top_p 1 (llama-server's
# defaults are 40, 0.05 and 0.95, and it runs that chain, a sort included, even at temperature 0;
# kvwarden treats 0 as off). Each repetition runs every cell on both servers back to back, so a
# slow spell of a shared machine hits both columns alike. Prints a markdown table of median output
# tokens/s (completed tokens / run time) with the ratios sampled/greedy and kvwarden/llama-server,
# the commit and the CPU's flags, then kvwarden's step time per output token split into forward
# pass and sampling (kvwarden_engine_step_seconds_total before and after each cell).
# Environment: KVW (build-bench/apps/kvwarden/kvwarden, else build/...), LLAMA_SERVER (none),
# VOCABS ("32000 151936 262144"), STREAMS ("1 16"), MODES ("greedy t1 p09"; a rerun of some
# modes into the same OUT keeps the others' reports for the table), REPS (3), ROUNDS (1: requests
# per stream in a cell, at least 2 in all; one round of 16 x 64 tokens lasts ~0.4 s on kvwarden,
# short enough for a neighbour's burst to move a cell 20%), GEN (64), THREADS (nproc),
# OUT (a temp dir; models are kept there and reused), PORT (8461; llama-server PORT+1).
# Not part of ctest: it takes a few minutes and wants a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/.."
KVW=${KVW:-}
if [ -z "$KVW" ]; then
  for k in build-bench/apps/kvwarden/kvwarden build/apps/kvwarden/kvwarden; do
    [ -x "$k" ] && KVW=$k && break
  done
fi
[ -x "${KVW:-}" ] || { echo "no kvwarden binary: build one or set KVW" >&2; exit 2; }
LLAMA_SERVER=${LLAMA_SERVER:-}
VOCABS=${VOCABS:-"32000 151936 262144"}
STREAMS=${STREAMS:-"1 16"}
REPS=${REPS:-3}
ROUNDS=${ROUNDS:-1}
GEN=${GEN:-64}
THREADS=${THREADS:-$(nproc)}
OUT=${OUT:-$(mktemp -d)}
PORT=${PORT:-8461}
LPORT=$((PORT + 1))
mkdir -p "$OUT"

declare -A MODE_BODY=(
  [greedy]='{"temperature": 0, "top_p": 1, "top_k": 0, "min_p": 0}'
  [t1]='{"temperature": 1, "top_p": 1, "top_k": 0, "min_p": 0}'
  [p09]='{"temperature": 0.8, "top_p": 0.9, "top_k": 0, "min_p": 0}'
)
MODES=${MODES:-"greedy t1 p09"}
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

wait_healthy() {  # url seconds
  for _ in $(seq $(($2 * 5))); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$1/health")" = 200 ] && return 0
    sleep 0.2
  done
  echo "no healthy server at $1 after $2 s" >&2
  return 1
}

# kvwarden's engine step time so far, "schedule forward sample" seconds (/metrics).
phases() {  # url
  curl -s "$1/metrics" | awk -F'[{}" ]+' '/^kvwarden_engine_step_seconds_total\{/ {v[$3] = $NF}
    END {print v["schedule"] + 0, v["forward"] + 0, v["sample"] + 0}'
}

# One cell: kvwarden bench against url; writes the JSON report to $4.
drive() {  # url streams mode json
  local n=$(($2 * ROUNDS < 2 ? 2 : $2 * ROUNDS))
  "$KVW" bench --base-url "$1" --pattern closed --concurrency "$2" --num-requests "$n" \
    --input-len fixed:32 --output-len "fixed:$GEN" --extra-body "${MODE_BODY[$3]}" --max-retries 0 --no-metrics --quiet --output-json "$4" >/dev/null 2>>"$OUT/bench.err"
}

for v in $VOCABS; do
  model=$OUT/qwen2-v$v.gguf
  if [ ! -s "$model" ]; then
    echo "== writing $model" >&2
    "$KVW" make-model --out "$model" --arch qwen2 --dim 256 --layers 4 --heads 8 --kv-heads 2 \
      --ffn 768 --n-vocab "$v" --weight-type q8_0 --vocab-type bpe --context 4096 >/dev/null
  fi
  PIDS=()
  "$KVW" serve --model "$model" --port "$PORT" --threads "$THREADS" >"$OUT/kvw-v$v.log" 2>&1 &
  PIDS+=($!)
  wait_healthy "http://127.0.0.1:$PORT" 120
  if [ -n "$LLAMA_SERVER" ]; then
    "$LLAMA_SERVER" -m "$model" --host 127.0.0.1 --port "$LPORT" -np 16 \
      -c $((16 * (64 + GEN + 64))) -t "$THREADS" -tb "$THREADS" --no-webui \
      >"$OUT/lcpp-v$v.log" 2>&1 &
    PIDS+=($!)
    wait_healthy "http://127.0.0.1:$LPORT" 120
  fi
  echo "== V=$v: kvwarden pid ${PIDS[0]}${LLAMA_SERVER:+, llama-server pid ${PIDS[1]:-}}" >&2
  for rep in $(seq "$REPS"); do
    for s in $STREAMS; do
      for m in $MODES; do
        before=$(phases "http://127.0.0.1:$PORT")
        drive "http://127.0.0.1:$PORT" "$s" "$m" "$OUT/kvw.v$v.s$s.$m.$rep.json"
        echo "$before $(phases "http://127.0.0.1:$PORT")" >"$OUT/kvw.v$v.s$s.$m.$rep.phases"
        if [ -n "$LLAMA_SERVER" ]; then
          drive "http://127.0.0.1:$LPORT" "$s" "$m" "$OUT/lcpp.v$v.s$s.$m.$rep.json"
        fi
      done
    done
  done
  cleanup
  PIDS=()
done

COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
DIRTY=$(git status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo "+dirty" || true)
LCPP_VERSION=none
if [ -n "$LLAMA_SERVER" ]; then
  LCPP_VERSION=$("$LLAMA_SERVER" --version 2>&1 | grep -m1 -i version || echo unknown)
fi
python3 - "$OUT" "$VOCABS" "$STREAMS" "$REPS" "$COMMIT$DIRTY" "$LCPP_VERSION" "$GEN" <<'PY'
import json, os, statistics, sys
out, vocabs, streams, reps, commit, lcpp, gen = sys.argv[1:8]
vocabs, streams, reps = vocabs.split(), streams.split(), int(reps)
modes = ["greedy", "t1", "p09"]

def med(tool, v, s, m):
    xs = []
    for r in range(1, reps + 1):
        p = f"{out}/{tool}.v{v}.s{s}.{m}.{r}.json"
        if not os.path.exists(p):
            continue
        j = json.load(open(p))
        if j.get("completed", 0) > 0 and j.get("failed", 0) == 0:
            xs.append(j["output_throughput"])
    return statistics.median(xs) if xs else None

def phase_ms(v, s, m):  # median over runs of kvwarden's forward and sample ms per output token
    fw, sa = [], []
    for r in range(1, reps + 1):
        p, j = f"{out}/kvw.v{v}.s{s}.{m}.{r}.phases", f"{out}/kvw.v{v}.s{s}.{m}.{r}.json"
        if not (os.path.exists(p) and os.path.exists(j)):
            continue
        x = [float(t) for t in open(p).read().split()]
        tokens = json.load(open(j)).get("total_output_tokens", 0)
        if len(x) == 6 and tokens > 0:
            fw.append((x[4] - x[1]) * 1e3 / tokens)
            sa.append((x[5] - x[2]) * 1e3 / tokens)
    return (statistics.median(fw), statistics.median(sa)) if fw else (None, None)

def f(x, fmt="{:.0f}"):
    return "-" if x is None else fmt.format(x)

def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b

flags = set()
for line in open("/proc/cpuinfo"):
    if line.startswith("flags"):
        flags = set(line.split(":", 1)[1].split())
        break
model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print(f"\nkvwarden {commit} vs llama-server ({lcpp}); {model}, {os.cpu_count()} CPUs; "
      + ", ".join(f"{k} {'yes' if k in flags else 'no'}" for k in ("avx2", "avx512f", "avx512_vnni")))
print(f"qwen2-shaped q8_0 files (dim 256, 4 layers), /v1/completions x {gen} tokens, closed loop; "
      f"median output tokens/s of {reps} runs; greedy = temperature 0, t1 = temperature 1 top_p 1, "
      "p09 = temperature 0.8 top_p 0.9 (top_k 0, min_p 0)\n")
print("| vocab | streams | mode | kvwarden tok/s | / greedy | llama-server tok/s | / greedy | kvwarden / llama-server |")
print("|---|---|---|---|---|---|---|---|")
for v in vocabs:
    for s in streams:
        kg, lg = med("kvw", v, s, "greedy"), med("lcpp", v, s, "greedy")
        for m in modes:
            k, l = med("kvw", v, s, m), med("lcpp", v, s, m)
            print(f"| {v} | {s} | {m} | {f(k)} | {f(ratio(k, kg), '{:.2f}')} | {f(l)} | "
                  f"{f(ratio(l, lg), '{:.2f}')} | {f(ratio(k, l), '{:.2f}')} |")
print("\nkvwarden's engine step time per output token (kvwarden_engine_step_seconds_total, "
      "medians), ms: forward / sample")
print("| vocab | streams | greedy | t1 | p09 |")
print("|---|---|---|---|---|")
for v in vocabs:
    for s in streams:
        cells = [phase_ms(v, s, m) for m in modes]
        print(f"| {v} | {s} | " + " | ".join(
            f"{f(a, '{:.3f}')} / {f(b, '{:.3f}')}" for a, b in cells) + " |")
PY
echo "raw reports and server logs: $OUT" >&2
