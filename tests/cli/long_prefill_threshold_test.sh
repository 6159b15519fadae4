#!/usr/bin/env bash
# kvwarden serve --long-prefill-token-threshold N splits a long prompt's prefill into chunks of
# N tokens: a ~600-token prompt with 1 output token takes 2 engine steps at the default (512)
# and at least 600/64 at 64 (kvwarden_step_duration_seconds_count counts the steps). A negative
# value is refused naming the flag.
set -u
KVW="$1"
MODEL="$2"
WORK="$(mktemp -d)"
PID=
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

steps_for() {  # extra serve flags... ; prints the steps one long completion took
  "$KVW" serve --model "$MODEL" --port 0 --threads 1 "$@" >"$WORK/out" 2>"$WORK/err" &
  PID=$!
  for _ in $(seq 1 300); do grep -q "kvwarden serving" "$WORK/out" && break; sleep 0.1; done
  grep -q "kvwarden serving" "$WORK/out" || fail "serve $* did not start: $(tail -3 "$WORK/err")"
  URL="$(sed -n 's/^kvwarden serving .* on \(http[^ ]*\).*/\1/p' "$WORK/out")"
  python3 - "$URL" <<'PY' || fail "completion failed"
import json, re, sys, urllib.request
url = sys.argv[1]
def post(path, body):
    req = urllib.request.Request(url + path, method="POST", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req))
prompt = " ".join(["Once upon a time there was a little girl named Lily."] * 50)
n = len(post("/tokenize", {"prompt": prompt})["tokens"])
assert 520 <= n <= 1000, n  # more than one default chunk, within the context
out = post("/v1/completions", {"prompt": prompt, "max_tokens": 1})
assert out["usage"]["prompt_tokens"] == n, out["usage"]
text = urllib.request.urlopen(url + "/metrics").read().decode()
print(n, int(float(re.search(r"(?m)^kvwarden_step_duration_seconds_count (\S+)", text).group(1))))
PY
  kill "$PID"
  wait "$PID" 2>/dev/null
  PID=
}

read -r n default < <(steps_for)
read -r _ small < <(steps_for --long-prefill-token-threshold 64)
echo "prompt $n tokens: $default steps at the default, $small at 64"
[ "$default" -eq $(((n + 511) / 512)) ] || fail "default: $default steps for $n prompt tokens"
[ "$small" -ge $(((n + 63) / 64)) ] || fail "threshold 64: $small steps for $n prompt tokens"

timeout 30 "$KVW" serve --model "$MODEL" --port 0 --long-prefill-token-threshold -1 2>"$WORK/err"
rc=$?
[ $rc -ne 0 ] && grep -q -- "--long-prefill-token-threshold" "$WORK/err" ||
  fail "a negative threshold: rc=$rc $(cat "$WORK/err")"
echo PASS
