#!/usr/bin/env bash
# kvwarden serve opens (and parses) the model file once from flags to "kvwarden serving": the
# flags' defaults, the engine's budget plan, the weights and the tokenizer all read that one
# open file. Counted with strace; skipped (77) where strace is missing or cannot trace.
set -u
KVW="$1"
MODEL="$2"
WORK="$(mktemp -d)"
PID=
trap '[ -n "$PID" ] && kill "$(pgrep -P $PID)" 2>/dev/null; rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
command -v strace >/dev/null && command -v pgrep >/dev/null || { echo "SKIP: no strace"; exit 77; }
strace -f -qq -e trace=open,openat -o "$WORK/trace" true 2>/dev/null ||
  { echo "SKIP: strace cannot trace here"; exit 77; }

for extra in "" "--max-model-len 256"; do
  # shellcheck disable=SC2086  # $extra is two words or none
  strace -f -qq -e trace=open,openat -o "$WORK/trace" "$KVW" serve --model "$MODEL" --port 0 \
    --threads 1 --max-num-seqs 4 $extra >"$WORK/out" 2>"$WORK/err" &
  PID=$!
  for _ in $(seq 1 300); do grep -q "kvwarden serving" "$WORK/out" && break; sleep 0.1; done
  grep -q "kvwarden serving" "$WORK/out" || fail "serve did not start: $(cat "$WORK/err")"
  n=$(grep -c -F "\"$MODEL\"" "$WORK/trace")
  kill "$(pgrep -P $PID)"  # serve itself: strace ignores the signal, serve drains and exits
  wait $PID
  PID=
  [ "$n" -eq 1 ] || fail "serve ${extra:-(default --max-model-len)} opened $MODEL $n times: $(grep -F "$MODEL" "$WORK/trace")"
done
echo PASS
