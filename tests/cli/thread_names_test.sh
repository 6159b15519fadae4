#!/usr/bin/env bash
# Every thread kvwarden serve starts carries a name (kvw-io-N, kvw-engine, kvw-fwd-N,
# kvw-http, kvw-monitor), so `top -H` and profilers show who burns the CPU. Read from
# /proc/<pid>/task/*/comm after one completion has run.
set -u
KVW="$1"
MODEL="$2"
WORK="$(mktemp -d)"
PID=
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$KVW" serve --model "$MODEL" --port 0 --threads 2 --io-threads 2 --max-num-seqs 4 \
  >"$WORK/out" 2>"$WORK/err" &
PID=$!
for _ in $(seq 1 300); do grep -q "kvwarden serving" "$WORK/out" && break; sleep 0.1; done
grep -q "kvwarden serving" "$WORK/out" || fail "serve did not start: $(tail -3 "$WORK/err")"
URL="$(sed -n 's/^kvwarden serving .* on \(http[^ ]*\).*/\1/p' "$WORK/out")"
# python3 (installed by setup.sh) as the client: curl is not guaranteed on a fresh machine.
python3 - "$URL" <<'PY' || fail "completion failed"
import json, sys, urllib.request
url = sys.argv[1]
model = json.load(urllib.request.urlopen(url + "/v1/models"))["data"][0]["id"]
req = urllib.request.Request(url + "/v1/completions", method="POST",
                             data=json.dumps({"model": model, "prompt": "Once upon a time",
                                              "max_tokens": 4}).encode(),
                             headers={"Content-Type": "application/json"})
assert urllib.request.urlopen(req).status == 200
PY
names="$(cat /proc/$PID/task/*/comm | sort)"
for want in kvw-io-0 kvw-io-1 kvw-engine kvw-fwd-1 kvw-http kvw-monitor; do
  grep -qx "$want" <<<"$names" || fail "no thread named $want; threads: $(echo $names)"
done
unnamed="$(grep -vc '^kvw' <<<"$names")"
# The main thread keeps the binary's name; every other one is ours.
[ "$unnamed" -le 1 ] || fail "$unnamed threads without a kvw- name: $(echo $names)"
echo PASS
