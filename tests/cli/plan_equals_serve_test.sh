#!/usr/bin/env bash
# `kvwarden plan --engine` prints the same budget table (request row included) as
# `kvwarden serve` logs at start-up for the same model and limits.
set -u
KVW="$1"
MODEL="$2"
WORK="$(mktemp -d)"
trap 'kill $PID 2>/dev/null; rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$KVW" serve --model "$MODEL" --port 0 --threads 2 --max-num-seqs 64 --max-model-len 256 \
  --max-queue 100 --request-memory 40MiB >"$WORK/out" 2>"$WORK/err" &
PID=$!
for _ in $(seq 1 100); do grep -q "kvwarden serving" "$WORK/out" && break; sleep 0.1; done
grep -q "kvwarden serving" "$WORK/out" || fail "serve did not start: $(cat "$WORK/err")"
table() { grep -E "^  (weights|workspace|kv_pool|reserve|request|total|kv:) " "$1"; }
table "$WORK/err" >"$WORK/serve.table"
"$KVW" plan --model "$MODEL" --engine --concurrency 64 --max-model-len 256 --engine-threads 2 \
  --max-queue 100 --request-memory 40MiB --gpu-memory 80GiB --max-num-batched-tokens 2048 \
  >"$WORK/plan.out" 2>&1 || fail "plan: $(cat "$WORK/plan.out")"
awk '/kvwarden CPU engine budget/{on=1; next} on && !/^  /{on=0} on' "$WORK/plan.out" |
  table /dev/stdin >"$WORK/plan.table"
grep -q "request" "$WORK/serve.table" || fail "no request row in serve's table"
diff "$WORK/serve.table" "$WORK/plan.table" || fail "plan --engine differs from serve's table"
cat "$WORK/plan.table"
echo PASS
