#!/usr/bin/env bash
# Two `kvwarden serve` replicas behind HAProxy with deploy/haproxy/haproxy.cfg, all on loopback.
# A long stream holds one replica; `kvwarden bench` drives load through the balancer; that
# replica gets SIGTERM mid-run. Passes when: both replicas served requests (their /metrics),
# the bench lost nothing (completed == sent, 0 failed), HAProxy took the draining replica out
# because its /ready check answered 503, the stream in flight on it finished through the
# balancer, and the replica exited 0 having cancelled nothing.
set -u
KVW="$1"
CFG="$2"
MODEL="$3"
WORK="$(mktemp -d)"
PIDS=""
cleanup() {
  for pid in $PIDS; do kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; done
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for f in "$WORK"/*.err; do [ -f "$f" ] && echo "--- $f:" && tail -20 "$f"; done
  exit 1
}
HAPROXY=$(command -v haproxy || echo /usr/sbin/haproxy)
if [ ! -x "$HAPROXY" ]; then
  case ",${KVW_ALLOW_SKIP:-}," in *,haproxy,*) echo "SKIP: no haproxy"; exit 77 ;; esac
  fail "haproxy not found: install it (scripts/setup.sh) or set KVW_ALLOW_SKIP=haproxy"
fi
json() { /usr/bin/python3 -c "import json,sys; print(json.load(open('$1'))$2)"; }
free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# Requests a replica finished, from its /metrics (vLLM's counter, every finish reason).
num_served() {
  curl -s "http://$1/metrics" | awk '/^vllm:request_success_total/ {n += $2} END {print n + 0}'
}
num_running() {
  curl -s "http://$1/metrics" | awk '/^kvwarden_requests\{state="running"\}/ {print $2 + 0}'
}
# start_replica NAME: `kvwarden serve` on a free port; sets PID and ADDR (host:port).
start_replica() {
  # --max-num-seqs 32: a 384 MiB KV pool instead of the default 3 GiB, which each replica
  # pre-faults at start-up (seconds on a loaded CI machine, times two).
  "$KVW" serve --model "$MODEL" --port 0 --threads 1 --drain-timeout 150 --max-num-seqs 32 \
    >"$WORK/$1.out" 2>"$WORK/$1.err" &
  PID=$!
  PIDS="$PIDS $PID"
  for _ in $(seq 1 300); do
    grep -q "kvwarden serving" "$WORK/$1.out" && break
    kill -0 "$PID" 2>/dev/null || fail "$1 exited"
    sleep 0.1
  done
  ADDR=$(grep -o 'http://[^ ]*' "$WORK/$1.out" | head -1 | sed 's|http://||')
  [ -n "$ADDR" ] || fail "no 'kvwarden serving ... on URL' line from $1"
}

start_replica r1
R1_PID=$PID R1=$ADDR
start_replica r2
R2_PID=$PID R2=$ADDR
LB=127.0.0.1:$(free_port)
KVW_LB_BIND=$LB KVW_REPLICA1=$R1 KVW_REPLICA2=$R2 "$HAPROXY" -W -db -f "$CFG" \
  >"$WORK/haproxy.out" 2>"$WORK/haproxy.err" &
PIDS="$PIDS $!"
for _ in $(seq 1 50); do curl -sf "http://$LB/health" >/dev/null && break; sleep 0.1; done
curl -sf "http://$LB/health" >/dev/null || fail "haproxy does not answer on $LB"
echo "replicas r1=$R1 r2=$R2 behind haproxy on $LB"

# Under ASan (KVW_SANITIZED) the server is ~10x slower: 150 tokens keep the same drain time.
STREAM_TOKENS=1000
[ -n "${KVW_SANITIZED:-}" ] && STREAM_TOKENS=150
# The long stream: sixteen choices of 1000 tokens keep a replica draining for longer than
# HAProxy's check interval (1 s) after its SIGTERM.
curl -sN "http://$LB/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "And God said", "max_tokens": '"$STREAM_TOKENS"', "n": 16, "ignore_eos": true, "stream": true}' \
  >"$WORK/stream.out" 2>"$WORK/stream.err" &
STREAM_PID=$!
for _ in $(seq 1 50); do
  [ "$(num_running "$R1")" != 0 ] && VICTIM=r1 && break
  [ "$(num_running "$R2")" != 0 ] && VICTIM=r2 && break
  sleep 0.1
done
[ -n "${VICTIM:-}" ] || fail "the long stream never ran"
if [ "$VICTIM" = r1 ]; then
  V_PID=$R1_PID V=$R1 S=$R2
else
  V_PID=$R2_PID V=$R2 S=$R1
fi

# A constant 60 requests/s keeps the bench running ~4 s however fast the machine is, so most of
# it is still to come when the SIGTERM lands (a closed loop finished before it on a fast CPU),
# and keeps enough in flight that leastconn also picks the replica holding the long stream.
"$KVW" bench --base-url "http://$LB" --pattern constant --request-rate 60 --concurrency 16 \
  --num-requests 240 \
  --input-len fixed:24 --output-len fixed:16 --max-retries 3 --seed 5 --quiet \
  --output-json "$WORK/bench.json" >"$WORK/bench.out" 2>&1 &
BENCH_PID=$!
# SIGTERM once the stream's replica has also finished some bench requests, or 1.5 s into the
# bench's ~4 s, whichever comes first: on a fast idle CPU the survivor answered each request
# before the next arrived, leastconn sent it everything while the victim held the stream, and
# waiting for the victim's third request meant waiting for the stream's end and the bench's.
for _ in $(seq 1 15); do [ "$(num_served "$V")" -ge 3 ] && break; sleep 0.1; done
victim_served=$(num_served "$V")
survivor_before=$(num_served "$S")
kill -TERM "$V_PID"
sigterm_at=$SECONDS
echo "SIGTERM to $VICTIM after it served $victim_served requests (the other: $survivor_before)"

wait "$BENCH_PID"
bench_rc=$?
cat "$WORK/bench.out"
wait "$V_PID"
victim_rc=$?
echo "$VICTIM drained and exited $victim_rc after $((SECONDS - sigterm_at)) s"
wait "$STREAM_PID"
survivor_served=$(num_served "$S")
sent=$(json "$WORK/bench.json" "['num_requests']")
completed=$(json "$WORK/bench.json" "['completed']")
failed=$(json "$WORK/bench.json" "['failed']")
echo "bench: sent $sent, completed $completed, failed $failed," \
  "retries $(json "$WORK/bench.json" "['retries']")"
echo "served: $VICTIM $victim_served before SIGTERM, the other $survivor_before -> $survivor_served"
grep -E "is (DOWN|UP)" "$WORK/haproxy.err"

[ $bench_rc -eq 0 ] || fail "bench exit $bench_rc"
[ "$sent" = 240 ] && [ "$completed" = 240 ] && [ "$failed" = 0 ] || fail "requests lost"
[ "$survivor_served" -gt "$survivor_before" ] || fail "no traffic moved to the other replica"
grep -q "kvwarden/$VICTIM is DOWN.*code: 503" "$WORK/haproxy.err" ||
  fail "haproxy did not see the draining $VICTIM's /ready answer 503"
[ $victim_rc -eq 0 ] || fail "$VICTIM exited $victim_rc"
grep -q "stopped (0 requests cancelled" "$WORK/$VICTIM.err" || fail "$VICTIM cancelled requests"
tail -c 200 "$WORK/stream.out" | grep -q "data: \[DONE\]" || fail "the long stream was cut"
[ "$(grep -c '"finish_reason":"length"' "$WORK/stream.out")" -eq 16 ] ||
  fail "the long stream did not finish its 16 choices"
echo PASS
