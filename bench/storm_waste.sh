#!/usr/bin/env bash
# Issue 34: where the engine's work goes in a retry storm, in counts (not rates, so CPU noise
# from other work on the machine does not change them).
#
#   bench/storm_waste.sh OUT [DURATION [QUIET]] [-- more kvwarden serve flags]
#
# Runs bench/scenarios/retry_storm.json (DURATION s, 150, after a QUIET s quiet phase, 30) in the
# layout of bench/storms_pinned.sh (server on SERVER_CPUS with --threads equal to their count,
# the client on CLIENT_CPUS), scrapes the server's /metrics every 2 s into OUT/scrape.txt, stamps
# each bench line with the time into OUT/bench.txt, and prints bench/storm_waste.py's split of the
# forward tokens of each phase: for requests that completed, that were cancelled (client left,
# queue-wait limit), recomputed after preemption, with the output tokens per forward token and
# the completed requests' mix, and the server's CPU by thread kind. Environment: KVW, SERVER_CPUS (0), CLIENT_CPUS (1), PORT (8493).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: bench/storm_waste.sh OUT [DURATION [QUIET]] [-- serve flags]}
shift
DURATION=150 QUIET=30
[ $# -gt 0 ] && [ "$1" != -- ] && DURATION=$1 && shift
[ $# -gt 0 ] && [ "$1" != -- ] && QUIET=$1 && shift
[ "${1:-}" = -- ] && shift
KVW=${KVW:-build/apps/kvwarden/kvwarden}
SERVER_CPUS=${SERVER_CPUS:-0}
CLIENT_CPUS=${CLIENT_CPUS:-1}
PORT=${PORT:-8493}
THREADS=$(taskset -c "$SERVER_CPUS" nproc)
mkdir -p "$OUT"
MODEL=$OUT/storm.gguf
[ -s "$MODEL" ] || "$KVW" make-model --out "$MODEL" --context 16384 >/dev/null
taskset -c "$SERVER_CPUS" "$KVW" serve --model "$MODEL" --port "$PORT" --threads "$THREADS" \
  --max-num-seqs 16 --max-queue 16 "$@" >"$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 300); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/health")" = 200 ] && break
  sleep 0.2
done
(while kill -0 $SERVER 2>/dev/null; do
  echo "T $(date +%s.%N)"
  curl -s "http://127.0.0.1:$PORT/metrics" | grep -E \
    '^kvwarden_(forward|recomputed|generation_tokens|prompt_tokens|prefix_cache_hits|preemptions)' || true
  # The server's CPU ticks by thread kind (engine, io, the rest), so a phase's tokens can be put
  # against the CPU the server got, which on a busy machine is not the whole core.
  declare -A ticks=([engine]=0 [io]=0 [other]=0)
  for t in /proc/$SERVER/task/*; do  # utime + stime: fields 14 and 15 (no spaces in our names)
    read -r -a st <"$t/stat" 2>/dev/null || continue
    case ${st[1]} in "(kvw-engine)") k=engine ;; "(kvw-io-"*) k=io ;; *) k=other ;; esac
    ticks[$k]=$((ticks[$k] + st[13] + st[14]))
  done
  for k in engine io other; do echo "cpu_ticks_$k ${ticks[$k]}"; done
  sleep 2
done) >"$OUT/scrape.txt" 2>/dev/null &
taskset -c "$CLIENT_CPUS" "$KVW" bench --scenario bench/scenarios/retry_storm.json \
  --base-url "http://127.0.0.1:$PORT" --server-pid $SERVER --duration "$DURATION" \
  --quiet-phase "$QUIET" --output-json "$OUT/retry.json" 2>&1 |
  while IFS= read -r line; do echo "$(date +%s.%N) $line"; done >"$OUT/bench.txt" || true
kill $SERVER
wait $SERVER 2>/dev/null || true
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/bench.txt"
python3 bench/storm_waste.py "$OUT"
