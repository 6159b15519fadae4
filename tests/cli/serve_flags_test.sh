#!/usr/bin/env bash
# kvwarden serve refuses a KV cache dtype the CPU engine cannot store (fp8) with one line naming
# the flag and exit 2, while kvwarden plan still plans an fp8 cache for GPUs.
set -u
KVW="$1"
MODEL="$2"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

for flag in --kv-cache-dtype --kv-dtype; do
  timeout 30 "$KVW" serve --model "$MODEL" --port 0 "$flag" fp8 >"$WORK/out" 2>"$WORK/err"; rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l <"$WORK/err")" -eq 1 ] && grep -q -- "--kv-cache-dtype fp8" "$WORK/err" ||
    fail "serve $flag fp8: rc=$rc $(cat "$WORK/err")"
  grep -q "kvwarden serving" "$WORK/out" && fail "serve $flag fp8 started"
done
timeout 30 "$KVW" serve --model "$MODEL" --port 0 --kv-cache-dtype int3 2>"$WORK/err"; rc=$?
[ $rc -eq 2 ] && grep -q -- "--kv-cache-dtype: unknown KV cache dtype 'int3'" "$WORK/err" ||
  fail "serve --kv-cache-dtype int3: rc=$rc $(cat "$WORK/err")"

"$KVW" plan --model llama-3-8b --gpu-memory 80GiB --kv-cache-dtype fp8 >"$WORK/plan" 2>&1 ||
  fail "plan fp8: $(cat "$WORK/plan")"
grep -q "KV cache fp8" "$WORK/plan" || fail "plan does not say fp8: $(cat "$WORK/plan")"
echo PASS
