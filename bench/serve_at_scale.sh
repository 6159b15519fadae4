#!/usr/bin/env bash
# One model served under concurrent long sessions on this machine, reported as an operator needs
# it: the start-up budget table (and that `kvwarden plan --engine` prints the same one for the
# file), `kvwarden bench` against the server, decode speed against the bandwidth bound of the
# bytes a decode step reads (active parameters: for MoE, the experts a token uses), and peak RSS
# against the budget.
#
#   bench/serve_at_scale.sh MODEL.gguf [USERS] [PROMPT_TOKENS] [OUTPUT_TOKENS]
#
# USERS sessions (4) of PROMPT_TOKENS (2048) + OUTPUT_TOKENS (64) run at once. Environment:
# KVW (build/apps/kvwarden/kvwarden), THREADS (nproc), KV_DTYPE (f16), OUT (a temp dir).
set -euo pipefail
[ $# -ge 1 ] || { sed -n 2,13p "$0"; exit 2; }
MODEL=$1
USERS=${2:-4}
IN=${3:-2048}
OUTN=${4:-64}
cd "$(dirname "$0")/.."
KVW=${KVW:-build/apps/kvwarden/kvwarden}
THREADS=${THREADS:-$(nproc)}
KV_DTYPE=${KV_DTYPE:-f16}
OUT=${OUT:-$(mktemp -d)}
LEN=$((IN + OUTN + 64))
mkdir -p "$OUT"
flags=(--max-num-seqs "$USERS" --max-model-len "$LEN" --max-queue 100 --request-memory 40MiB
  --max-num-batched-tokens 512 --kv-cache-dtype "$KV_DTYPE")
table() { grep -E "^  (weights|workspace|kv_pool|reserve|request|total|kv:|seq:|decode:) " "$1"; }

start=$(date +%s)
"$KVW" serve --model "$MODEL" --port 0 --threads "$THREADS" "${flags[@]}" \
  >"$OUT/serve.out" 2>"$OUT/serve.err" &
PID=$!
trap 'kill $PID 2>/dev/null || true' EXIT
for _ in $(seq 1 3000); do grep -q "kvwarden serving" "$OUT/serve.out" && break; sleep 0.1; done
grep -q "kvwarden serving" "$OUT/serve.out" || { cat "$OUT/serve.err"; exit 1; }
URL=$(sed -n 's/^kvwarden serving .* on \(http[^ ]*\).*/\1/p' "$OUT/serve.out")
echo "== serve up in $(($(date +%s) - start)) s: $URL"
table "$OUT/serve.err" | tee "$OUT/serve.table"

"$KVW" plan --model "$MODEL" --engine --concurrency "$USERS" --max-model-len "$LEN" \
  --engine-threads "$THREADS" --max-queue 100 --request-memory 40MiB --gpu-memory 80GiB \
  --max-num-batched-tokens 512 --kv-cache-dtype "$KV_DTYPE" >"$OUT/plan.out" 2>&1
awk '/kvwarden CPU engine budget/{on=1; next} on && !/^  /{on=0} on' "$OUT/plan.out" |
  table /dev/stdin >"$OUT/plan.table"
if diff "$OUT/serve.table" "$OUT/plan.table" >/dev/null; then
  echo "== kvwarden plan --engine prints the same table"
else
  echo "== kvwarden plan --engine DIFFERS:"
  diff "$OUT/serve.table" "$OUT/plan.table" || true
fi

echo "== $USERS sessions x $IN prompt + $OUTN output tokens at once"
"$KVW" bench --base-url "$URL" --dataset-name random --random-input-len "$IN" \
  --random-output-len "$OUTN" --num-prompts "$USERS" --max-concurrency "$USERS" \
  --timeout 1800 --drain-timeout 1800 --save-result --result-dir "$OUT" >"$OUT/bench.out" 2>&1 ||
  { cat "$OUT/bench.out"; exit 1; }
grep -v '^\[bench\]' "$OUT/bench.out" | grep -E "requests|duration|throughput|ttft|tpot|e2el|max_server|rss" |
  grep -vE "P9|P50"
echo "== one session alone: $OUTN tokens after a 32-token prompt (decode speed)"
"$KVW" bench --base-url "$URL" --dataset-name random --random-input-len 32 \
  --random-output-len "$OUTN" --num-prompts 2 --max-concurrency 1 >"$OUT/decode.out" 2>&1
grep -iE "itl|tpot|output" "$OUT/decode.out" | head -8

rss_peak=$(awk '/VmHWM/ {print $2}' "/proc/$PID/status")
budget=$(awk '$1 == "total" {print $2, $3}' "$OUT/serve.table")
echo "== peak RSS $((rss_peak / 1024)) MiB; budget table total: ${budget:-see table}"
curl -sf "$URL/metrics" | grep -E "^kvwarden_(kv_blocks|memory)" | head -12 || true
kill $PID 2>/dev/null; wait $PID 2>/dev/null || true
grep -E "^  decode: " "$OUT/serve.table" || true
echo "== the machine's read bandwidth (the decode bound is decode bytes / this), same threads"
"$KVW" bench-model -m models/kvwarden-default.gguf -p 0 -n 16 -r 1 -t "$THREADS" 2>/dev/null |
  grep -iE "read|GB/s" | head -3 || true
echo "results in $OUT"
