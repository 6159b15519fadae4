#!/usr/bin/env bash
# kvwarden bench against a real `kvwarden serve` with a generated model: a closed-loop run whose
# numbers must add up (every request completed, ignore_eos honoured so output tokens are exact,
# prompt lengths from /tokenize, /metrics scraped), then the shipped extreme-values scenario.
set -u
KVW="$1"
SCENARIOS="$2"
WORK="$(mktemp -d)"
SERVER_PID=""
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; echo "--- server stderr:"; tail -20 "$WORK/serve.err"; exit 1; }
json() { /usr/bin/python3 -c "import json,sys; print(json.load(open('$1'))$2)"; }

"$KVW" make-model --out "$WORK/m.gguf" --seed 1 --context 1024 2>/dev/null || fail "make-model"
"$KVW" serve --model "$WORK/m.gguf" --port 0 --threads 1 >"$WORK/serve.out" 2>"$WORK/serve.err" &
SERVER_PID=$!
for _ in $(seq 1 120); do
  grep -q "kvwarden serving" "$WORK/serve.out" && break
  kill -0 "$SERVER_PID" 2>/dev/null || fail "server exited"
  sleep 0.5
done
URL=$(grep -o 'http://[^ ]*' "$WORK/serve.out" | head -1)
[ -n "$URL" ] || fail "no 'kvwarden serving ... on URL' line"
echo "server at $URL"

"$KVW" bench --base-url "$URL" --pattern closed --concurrency 4 --num-requests 12 \
  --input-len fixed:24 --output-len fixed:8 --seed 3 --quiet \
  --output-json "$WORK/r.json" --output-html "$WORK/r.html" >"$WORK/bench.out" 2>&1
rc=$?
cat "$WORK/bench.out"
[ $rc -eq 0 ] || fail "bench exit $rc"
[ "$(json "$WORK/r.json" "['completed']")" = "12" ] || fail "completed != 12"
[ "$(json "$WORK/r.json" "['total_output_tokens']")" = "96" ] || fail "output tokens != 12 x 8 (ignore_eos)"
[ "$(json "$WORK/r.json" "['server_alive_after']")" = "1" ] || fail "server not alive after"
grep -q "<svg" "$WORK/r.html" || fail "no chart in the HTML report"
echo "tokenizer: $(json "$WORK/r.json" "['tokenizer']"), metrics: $(json "$WORK/r.json" "['server_metrics_available']")"
echo "mean TTFT $(json "$WORK/r.json" "['mean_ttft_ms']") ms, mean ITL $(json "$WORK/r.json" "['mean_itl_ms']") ms"

"$KVW" bench --scenario "$SCENARIOS/extreme_values.json" --base-url "$URL" --num-requests 18 \
  --input-len fixed:32 --output-len fixed:4 --quiet --output-json "$WORK/x.json" \
  --output-html "$WORK/x.html" >"$WORK/x.out" 2>&1
rc=$?
grep -E "PASS|FAIL|errors|^[0-9]{3} " "$WORK/x.out"
[ $rc -eq 0 ] || fail "extreme-values scenario exit $rc"
kill -0 "$SERVER_PID" 2>/dev/null || fail "server died"

# The leak check, short: 45 s of Poisson load after 15 s of warm-up; RSS must grow < 1 MB/min
# (the README gives the 11-minute command).
"$KVW" bench --scenario "$SCENARIOS/leak_check.json" --base-url "$URL" --duration 60 \
  --warmup 15 --request-rate 4 --input-len uniform:32:900 --quiet --output-json "$WORK/l.json" \
  --output-html "$WORK/l.html" >"$WORK/l.out" 2>&1
rc=$?
grep -E "PASS|FAIL|rss|errors" "$WORK/l.out"
echo "leak check: RSS slope $(json "$WORK/l.json" "['server_rss_growth_mb_per_min']") MB/min"
[ $rc -eq 0 ] || fail "leak-check scenario exit $rc"
kill -0 "$SERVER_PID" 2>/dev/null || fail "server died"
echo "PASS"
