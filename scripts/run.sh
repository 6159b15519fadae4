#!/usr/bin/env bash
# Installs what is missing (Debian 12, apt), builds Release, starts `kvwarden serve` on the
# embedded default model (models/kvwarden-default.gguf) and prints a working curl.
# KVW_PORT / KVW_HOST change where it listens; extra arguments go to `kvwarden serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target kvwarden
KVW=build/apps/kvwarden/kvwarden
HOST=${KVW_HOST:-127.0.0.1}
PORT=${KVW_PORT:-8000}
LOG=build/serve.log

"$KVW" serve --host "$HOST" --port "$PORT" "$@" >"$LOG" 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null' EXIT INT TERM
for _ in $(seq 1 120); do
  grep -q "kvwarden serving" "$LOG" && break
  kill -0 "$SERVER" 2>/dev/null || { cat "$LOG"; exit 1; }
  sleep 0.5
done
cat "$LOG"

# Sampled, not greedy (a model this small loops under greedy decoding); the seed makes the
# answer repeatable, and the README quotes it.
BODY='{"prompt": "And God said", "max_tokens": 40, "temperature": 0.7, "top_p": 0.9, "frequency_penalty": 0.5, "seed": 1}'
CURL=(curl -s "http://$HOST:$PORT/v1/completions" -H 'Content-Type: application/json' -d "$BODY")
echo
echo "== try it:"
echo "curl -s http://$HOST:$PORT/v1/completions -H 'Content-Type: application/json' -d '$BODY'"

echo "== its answer:"
"${CURL[@]}"
echo
echo
echo "== dashboard: http://$HOST:$PORT/dashboard   metrics: http://$HOST:$PORT/metrics"
echo "== serving until Ctrl-C (log: $LOG)"
tail -n 0 -f "$LOG" &
wait "$SERVER"
