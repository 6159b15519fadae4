#!/usr/bin/env bash
# bench/front_door.sh: the HTTP front door measured from outside (bench/front_door_bench.cc):
# RSS of 10,000 idle keep-alive connections, then open streams in steps with /health latency
# and RSS at each step. Runs against `kvwarden serve` on the default model and, when
# LLAMA_SERVER points to a llama-server binary (built outside this repo), against llama-server
# on the same GGUF, one after the other in the same run.
#   bench/front_door.sh [build-dir]      (default: build)
# Env: IDLE=10000 STREAMS=250,500,1000,2000,4000 MAX_TOKENS=200 MODEL=models/kvwarden-default.gguf
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
MODEL=${MODEL:-models/kvwarden-default.gguf}
IDLE=${IDLE:-10000}
STREAMS=${STREAMS:-250,500,1000,2000,4000}
MAX_TOKENS=${MAX_TOKENS:-200}
ulimit -n "$(ulimit -Hn)"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores," \
  "$(grep -m1 -o -E 'avx512_vnni|avx512f|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')"

run_bench() {  # name pid port
  echo "== $1"
  "$BUILD/bench/front_door_bench" --port "$3" --pid "$2" --idle "$IDLE" --streams "$STREAMS" \
    --max-tokens "$MAX_TOKENS"
}

wait_port() {
  for _ in $(seq 1 200); do
    curl -fs "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  return 1
}

PORT=18471
"$BUILD/apps/kvwarden/kvwarden" serve --model "$MODEL" --port $PORT --max-queue 20000 \
  --max-connections 16000 --max-engine-queue 20000 --keep-alive-timeout 600 >/tmp/kvw_front_door.log 2>&1 &
KVW=$!
trap 'kill $KVW 2>/dev/null || true' EXIT
wait_port $PORT
run_bench "kvwarden serve ($MODEL)" $KVW $PORT
kill -TERM $KVW
wait $KVW || true

if [ -n "${LLAMA_SERVER:-}" ]; then
  PORT=18472
  # -np: parallel slots (kvwarden's default max-num-seqs is 256); requests beyond wait.
  "$LLAMA_SERVER" -m "$MODEL" --port $PORT -np 256 -c $((256 * 256)) --timeout 600 \
    >/tmp/llama_front_door.log 2>&1 &
  LS=$!
  trap 'kill $LS 2>/dev/null || true' EXIT
  wait_port $PORT || { echo "llama-server did not start; see /tmp/llama_front_door.log"; exit 1; }
  run_bench "llama-server ($MODEL)" $LS $PORT
  kill -TERM $LS
  wait $LS || true
fi
