#!/usr/bin/env bash
# Issue 34's storms with the server and the load generator on separate cores.
#
#   bench/storms_pinned.sh [refusal|retry|llama-retry]...   (default: refusal retry)
#
# On a small machine the load generator competes with the server for the same cores, and then a
# storm "costs" the server whatever the client burns. Here the server runs under `taskset` on
# SERVER_CPUS with --threads equal to their count, and every client on CLIENT_CPUS, so the ratios
# measure what refusals cost the server itself. The quiet capacity is measured in the same layout.
#   refusal      bench/refusal_storm.py against the default model (--max-num-seqs 16
#                --max-queue 16 --max-model-len 4096): 32 fillers keep admission full, then quiet,
#                storm (RATE/s of PROMPT_KB KB prompts, each too long for the context) and quiet
#                windows of WINDOW s.
#   retry        `kvwarden bench --scenario bench/scenarios/retry_storm.json` (DURATION s after a
#                QUIET s quiet phase) against a 16,384-context make-model file, same admission.
#   llama-retry  the same scenario against LLAMA_SERVER (llama.cpp's, built outside this repo,
#                never committed) with -np 16 on the same file and cores; it has no admission
#                limit, so it queues instead of refusing.
# Environment: KVW (build/apps/kvwarden/kvwarden), LLAMA_SERVER, SERVER_CPUS (0), CLIENT_CPUS
# (1), RATE (300), PROMPT_KB (30), WINDOW (20), CYCLES (1: quiet/storm pairs before the last
# quiet window; e.g. CYCLES=8 WINDOW=6 averages out the fillers' drift), WARMUP (60), FILL_TOKENS (1500:3500; 4000:4000
# keeps admission full with no gap for 2 minutes, so every storm request is a door refusal),
# KEEP_ALIVE (unset; 1: storm senders reuse their connections), SERVE_ARGS (more `kvwarden serve`
# flags for both storms, e.g. "--refusal-hold 0" to turn the door's holds off), DURATION (600; 180 for a short run), QUIET (180), OUT (a
# temp dir: logs and JSON reports), PORT (8471). Not part of ctest: it wants a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/.."
KVW=${KVW:-build/apps/kvwarden/kvwarden}
[ -x "$KVW" ] || { echo "no kvwarden binary at $KVW: build one or set KVW" >&2; exit 2; }
SERVER_CPUS=${SERVER_CPUS:-0}
CLIENT_CPUS=${CLIENT_CPUS:-1}
THREADS=$(taskset -c "$SERVER_CPUS" nproc)
OUT=${OUT:-$(mktemp -d)}
PORT=${PORT:-8471}
mkdir -p "$OUT"
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
stop_server() { kill "$1"; wait "$1" 2>/dev/null || true; }
client() { taskset -c "$CLIENT_CPUS" "$@"; }
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-);" \
  "flags: $(grep -o -w 'avx2\|avx512f\|avx512_vnni' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "server on cpus $SERVER_CPUS ($THREADS threads), clients on cpus $CLIENT_CPUS; $(git rev-parse --short HEAD)"

storm_model() {
  local m=$OUT/storm.gguf
  [ -s "$m" ] || "$KVW" make-model --out "$m" --context 16384 >/dev/null
  echo "$m"
}

run_refusal() {
  taskset -c "$SERVER_CPUS" "$KVW" serve --port "$PORT" --threads "$THREADS" --max-num-seqs 16 \
    --max-queue 16 --max-model-len 4096 ${SERVE_ARGS:-} >"$OUT/refusal-server.log" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  wait_healthy "http://127.0.0.1:$PORT" 120
  client python3 bench/refusal_storm.py --url "http://127.0.0.1:$PORT" --rate "${RATE:-300}" \
    --prompt-kb "${PROMPT_KB:-30}" --window "${WINDOW:-20}" --cycles "${CYCLES:-1}" --warmup "${WARMUP:-60}" --fill 32 \
    --fill-tokens "${FILL_TOKENS:-1500:3500}" ${KEEP_ALIVE:+--keep-alive} |
    tee "$OUT/refusal.md"
  stop_server "$pid"
}

run_retry() {  # name server-command...
  local name=$1
  shift
  taskset -c "$SERVER_CPUS" "$@" >"$OUT/$name-server.log" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  wait_healthy "http://127.0.0.1:$PORT" 300
  client "$KVW" bench --scenario bench/scenarios/retry_storm.json --base-url "http://127.0.0.1:$PORT" \
    --server-pid "$pid" --duration "${DURATION:-600}" --quiet-phase "${QUIET:-180}" \
    --output-json "$OUT/$name.json" 2>&1 | tail -40 | tee "$OUT/$name.txt"
  stop_server "$pid"
}

for what in "${@:-refusal retry}"; do
  for w in $what; do
    case $w in
      refusal) run_refusal ;;
      retry)
        run_retry retry "$KVW" serve --model "$(storm_model)" --port "$PORT" --threads "$THREADS" \
          --max-num-seqs 16 --max-queue 16 ${SERVE_ARGS:-}
        ;;
      llama-retry)
        [ -x "${LLAMA_SERVER:-}" ] || { echo "set LLAMA_SERVER to a llama-server binary" >&2; exit 2; }
        run_retry llama-retry "$LLAMA_SERVER" -m "$(storm_model)" --port "$PORT" -t "$THREADS" \
          -np 16 -c $((16 * 16384)) --no-mmap
        ;;
      *) echo "unknown storm '$w' (refusal, retry, llama-retry)" >&2; exit 2 ;;
    esac
  done
done
echo "reports in $OUT"
