#!/usr/bin/env bash
# Server CPU per door refusal (bench/refusal_cost.py) against `kvwarden serve` on the default
# model, the server pinned to SERVER_CPUS and the client to CLIENT_CPUS:
#   bench/refusal_cost.sh [kvwarden-binary]        (default: build/apps/kvwarden/kvwarden)
# Environment: REQUESTS (5000), PROMPT_KB (30), MODE (keep-alive,new-connection), SERVER_CPUS
# (0), CLIENT_CPUS (1), SERVER_ARGS (more serve flags, e.g. --io-threads 1), PORT (8473),
# PERF (a file: perf record -g of the server's I/O threads during the run), STRACE (a file:
# strace -c of the server's I/O threads; the CPU figures are then meaningless).
# Not part of ctest: it wants a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/.."
KVW=${1:-build/apps/kvwarden/kvwarden}
PORT=${PORT:-8473}
SERVER_CPUS=${SERVER_CPUS:-0}
CLIENT_CPUS=${CLIENT_CPUS:-1}
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-); $(nproc) cpus; load $(cut -d' ' -f1-3 /proc/loadavg)"
# A breaker that sheds after a few completions (p95 over a 1 ms SLA) and stays shedding: every
# completion is then refused at the door while the engine idles.
taskset -c "$SERVER_CPUS" "$KVW" serve --port "$PORT" --threads 1 --latency-sla 0.001 \
  --breaker-latency-seconds 0.2 --breaker-recover-seconds 100000 --breaker-tick-ms 50 ${SERVER_ARGS:-} >/tmp/kvw_refusal_cost.log 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 600); do
  curl -fs "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
  sleep 0.1
done
# The I/O threads (kvw-io-N) answer every refusal; the tracers look at them alone.
IO_TIDS=$(for t in /proc/$SERVER/task/*; do if grep -q "^kvw-io" "$t/comm"; then echo "${t##*/}"; fi; done)
TRACER=
if [ -n "${PERF:-}" ]; then
  perf record -g -o "$PERF" -t "$(echo $IO_TIDS | tr ' ' ',')" >/dev/null 2>&1 &
  TRACER=$!
elif [ -n "${STRACE:-}" ]; then
  strace -c -o "$STRACE" $(printf -- '-p %s ' $IO_TIDS) &
  TRACER=$!
fi
taskset -c "$CLIENT_CPUS" python3 bench/refusal_cost.py --url "http://127.0.0.1:$PORT" --pid "$SERVER" \
  --requests "${REQUESTS:-5000}" --prompt-kb "${PROMPT_KB:-30}" --mode "${MODE:-keep-alive,new-connection}"
if [ -n "$TRACER" ]; then
  kill -INT "$TRACER"
  wait "$TRACER" || true
fi
