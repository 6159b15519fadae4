#!/usr/bin/env bash
# kvwarden serve with no --model and no limits answers an 8192-token prompt: the default model's
# context (YaRN-extended) and serve's default --max-model-len and KV pool let it through.
# The prompt is the first 8192 held-out tokens (tests/default_model/heldout_8k_tokens.json).
set -u
KVW="$1"
TOKENS="$2"
WORK="$(mktemp -d)"
PID=""
trap '[ -n "$PID" ] && kill $PID 2>/dev/null; rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
command -v curl >/dev/null || { echo "SKIP: no curl"; exit 77; }

"$KVW" serve --port 0 --threads 2 >"$WORK/out" 2>"$WORK/err" &
PID=$!
for _ in $(seq 1 300); do grep -q "kvwarden serving" "$WORK/out" && break; sleep 0.1; done
grep -q "kvwarden serving" "$WORK/out" || fail "serve did not start: $(tail -3 "$WORK/err")"
URL="$(sed -n 's/^kvwarden serving .* on \(http[^ ]*\).*/\1/p' "$WORK/out")"

ids=$(sed -n 2p "$TOKENS")  # line 2 is the one sequence: [1, ...]
printf '{"prompt": %s, "max_tokens": 16, "temperature": 0}' "$ids" >"$WORK/body.json"
code=$(curl -s -o "$WORK/resp.json" -w '%{http_code}' --max-time 240 "$URL/v1/completions" \
  -H 'Content-Type: application/json' --data-binary @"$WORK/body.json")
[ "$code" = 200 ] || fail "HTTP $code: $(head -c 500 "$WORK/resp.json")"
prompt_tokens=$(grep -o '"prompt_tokens":[0-9]*' "$WORK/resp.json" | grep -o '[0-9]*$')
completion_tokens=$(grep -o '"completion_tokens":[0-9]*' "$WORK/resp.json" | grep -o '[0-9]*$')
[ "${prompt_tokens:-0}" -ge 8192 ] || fail "usage.prompt_tokens ${prompt_tokens:-none} < 8192"
[ "${completion_tokens:-0}" -ge 1 ] || fail "no completion tokens: $(head -c 500 "$WORK/resp.json")"
grep -qE '"finish_reason":"(stop|length)"' "$WORK/resp.json" ||
  fail "no finish_reason: $(head -c 500 "$WORK/resp.json")"
echo "prompt_tokens=$prompt_tokens completion_tokens=$completion_tokens"
echo PASS
