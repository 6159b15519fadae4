#!/usr/bin/env bash
# KV events against a real `kvwarden serve` (issue 17): a Python ZeroMQ subscriber
# (kv_events_subscriber.py: python3-zmq, python3-msgpack) rebuilds the set of cached block hashes
# from the stream while a workload with prefix hits, evictions and preemptions runs on a small
# KV pool; it must equal /debug/kv's, also for a subscriber that joins late and catches up
# through the replay socket. Then a server with hwm 1 and a 2-event queue and a subscriber that
# never reads: every request completes and kvwarden_kv_events_dropped_total rises.
set -u
KVW="$1"
SUBSCRIBER="$2"
WORK="$(mktemp -d)"
PID=""
cleanup() {
  [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  [ -f "$WORK/serve.err" ] && tail -20 "$WORK/serve.err"
  exit 1
}
if ! /usr/bin/python3 -c "import zmq, msgpack" 2>/dev/null; then
  case ",${KVW_ALLOW_SKIP:-}," in
    *,python3-zmq,*) echo "SKIP: python3-zmq/python3-msgpack missing (KVW_ALLOW_SKIP)"; exit 0 ;;
  esac
  fail "python3-zmq and python3-msgpack are needed (apt-get install python3-zmq python3-msgpack)"
fi
# start_server ARGS...: starts `kvwarden serve` on free ports; sets PID, URL, PUB, REPLAY.
start_server() {
  "$KVW" serve --model "$WORK/m.gguf" --port 0 --threads 1 "$@" >"$WORK/serve.out" \
    2>"$WORK/serve.err" &
  PID=$!
  for _ in $(seq 1 120); do
    grep -q "kvwarden serving" "$WORK/serve.out" && break
    kill -0 "$PID" 2>/dev/null || fail "server exited"
    sleep 0.25
  done
  URL=$(grep -o 'http://[^ ]*' "$WORK/serve.out" | head -1)
  PUB=$(grep -o 'KV events on [^ ]*' "$WORK/serve.err" | awk '{print $4}')
  REPLAY=$(grep -o 'replay on [^ ]*' "$WORK/serve.err" | awk '{print $3}')
  [ -n "$URL" ] || fail "no URL in the start-up output"
  echo "server at $URL, KV events on ${PUB:-none}, replay on ${REPLAY:-none}"
}
stop_server() { kill "$PID" && wait "$PID" 2>/dev/null; PID=""; }

"$KVW" make-model --out "$WORK/m.gguf" --seed 1 --context 1024 2>/dev/null || fail "make-model"
"$KVW" serve --help | grep -q -- "--kv-events-config" || fail "no --kv-events-config in --help"
# A key vLLM does not have: refused at start-up, one line naming it, exit 2.
timeout 30 "$KVW" serve --model "$WORK/m.gguf" --port 0 \
  --kv-events-config '{"enable_kv_cache_events": true, "port": 5557}' 2>"$WORK/bad.err"
rc=$?
[ $rc -eq 2 ] && grep -q 'unknown key "port"' "$WORK/bad.err" ||
  fail "bad --kv-events-config: rc=$rc $(cat "$WORK/bad.err")"

# A KV pool of 40 blocks (640 tokens) for 8 running sequences of up to ~180 tokens, with a
# 1 MiB swap tier: the budget is what serve needs with its default pool, less that pool, plus
# 40 blocks. The workload's 48 prompts then fill the pool (evictions), outgrow it while decoding
# (preemptions to the swap tier and back) and share two system prefixes (prefix hits).
FLAGS=(--max-num-seqs 8 --max-model-len 256 --swap-space 1MiB --swap-path "$WORK/swap")
start_server "${FLAGS[@]}"
row_bytes() {  # row_bytes NAME: bytes of a row of serve's budget table
  grep -oE "^  $1 .*\(([0-9]+) B\)" "$WORK/serve.err" | grep -oE "[0-9]+ B" | tr -d ' B'
}
budget=$(($(row_bytes total) - $(row_bytes kv_pool) + 40 * $(grep -oE "[0-9]+ B/block" \
  "$WORK/serve.err" | tr -d ' B/block')))
stop_server
FLAGS+=(--memory-budget "$budget")

start_server "${FLAGS[@]}" --kv-events-config \
  '{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://127.0.0.1:*",
    "replay_endpoint": "tcp://127.0.0.1:*", "buffer_steps": 100000, "topic": "kv@test@m"}'
grep -q "40 KV blocks" "$WORK/serve.err" || fail "budget $budget did not give 40 KV blocks"
[ -n "$PUB" ] && [ -n "$REPLAY" ] || fail "no KV events endpoints in the start-up log"
/usr/bin/python3 "$SUBSCRIBER" mirror "$URL" "$PUB" "$REPLAY" || fail "mirror"
stop_server

start_server "${FLAGS[@]}" --kv-events-config \
  '{"enable_kv_cache_events": true, "endpoint": "tcp://127.0.0.1:*", "hwm": 1,
    "max_queue_size": 2}'
[ -n "$PUB" ] || fail "no KV events endpoint in the start-up log"
/usr/bin/python3 "$SUBSCRIBER" stall "$URL" "$PUB" || fail "stall"
stop_server
echo PASS
