#!/usr/bin/env bash
# kvwarden bench with `vllm bench serve`'s flag names against a real `kvwarden serve` (issue 17):
# --host/--port, --dataset-name random|sharegpt, --random-input-len/--random-output-len,
# --num-prompts, --ignore-eos, --max-concurrency, --request-rate, --percentile-metrics,
# --metric-percentiles, --save-result with --result-dir/--result-filename (and vLLM's default
# file name without it). The saved JSON must carry vLLM's field names with values that add up.
set -u
KVW="$1"
WORK="$(mktemp -d)"
PID=""
cleanup() {
  [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  [ -f "$WORK/serve.err" ] && tail -5 "$WORK/serve.err"
  exit 1
}
"$KVW" make-model --out "$WORK/m.gguf" --seed 1 --context 1024 2>/dev/null || fail "make-model"
"$KVW" serve --model "$WORK/m.gguf" --port 0 --threads 1 --max-num-seqs 4 \
  >"$WORK/serve.out" 2>"$WORK/serve.err" &
PID=$!
for _ in $(seq 1 120); do
  grep -q "kvwarden serving" "$WORK/serve.out" && break
  kill -0 "$PID" 2>/dev/null || fail "server exited"
  sleep 0.25
done
URL=$(grep -o 'http://[^ ]*' "$WORK/serve.out" | head -1)
[ -n "$URL" ] || fail "server did not start"

# 1. The random dataset, all at once, at most 3 in flight, percentiles for three metrics; the
#    target as vLLM names it (--host, --port).
PORT=${URL##*:}
"$KVW" bench --host 127.0.0.1 --port "$PORT" --ignore-eos --dataset-name random \
  --random-input-len 32 --random-output-len 8 --num-prompts 10 --max-concurrency 3 \
  --request-rate inf --percentile-metrics ttft,tpot,itl --metric-percentiles 50,99 --seed 2 \
  --quiet --save-result --result-dir "$WORK/results" --result-filename r.json \
  >"$WORK/b1.out" 2>&1 ||
  fail "bench with vLLM flags: $(tail -5 "$WORK/b1.out")"
grep -q "P99 ttft (ms)" "$WORK/b1.out" || fail "no P99 ttft row: $(cat "$WORK/b1.out")"
grep -q "P99 e2el (ms)" "$WORK/b1.out" && fail "E2EL percentiles printed though not selected"
/usr/bin/python3 - "$WORK/results/r.json" <<'PY' || fail "result JSON"
import json, math, sys
r = json.load(open(sys.argv[1]))
def need(cond, msg):
    if not cond:
        print("FAIL:", msg); sys.exit(1)
for k in ["duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
          "request_throughput", "output_throughput", "total_token_throughput",
          "mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p50_ttft_ms", "p99_ttft_ms",
          "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "median_itl_ms",
          "p99_itl_ms", "mean_e2el_ms", "median_e2el_ms", "model_id", "request_rate",
          "burstiness", "max_concurrency", "num_prompts"]:
    need(k in r, f"missing {k}")
need("p99_e2el_ms" not in r, "p99_e2el_ms reported though --percentile-metrics left e2el out")
need(r["completed"] == 10 and r["failed"] == 0, f"completed {r['completed']} failed {r['failed']}")
need(r["total_output_tokens"] == 80, f"total_output_tokens {r['total_output_tokens']} != 10 x 8")
need(300 <= r["total_input_tokens"] <= 340, f"total_input_tokens {r['total_input_tokens']} != ~320")
d = r["duration"]
need(math.isclose(r["request_throughput"], 10 / d, rel_tol=1e-6), "request_throughput")
need(math.isclose(r["output_throughput"], 80 / d, rel_tol=1e-6), "output_throughput")
need(math.isclose(r["total_token_throughput"], (r["total_input_tokens"] + 80) / d, rel_tol=1e-6),
     "total_token_throughput")
need(0 < r["p50_ttft_ms"] <= r["p99_ttft_ms"], "ttft percentiles")
# ITL may be 0: on a loaded machine a response's tokens can arrive in one read.
need(r["mean_itl_ms"] >= 0 and r["p99_itl_ms"] >= r["median_itl_ms"] and
     r["mean_e2el_ms"] >= r["mean_ttft_ms"], "itl / e2el")
need(r["request_rate"] == "inf" and r["max_concurrency"] == 3 and r["num_prompts"] == 10,
     f"context {r['request_rate']} {r['max_concurrency']} {r['num_prompts']}")
print(f"vLLM-named result: {r['completed']} completed in {d:.2f} s, "
      f"{r['output_throughput']:.1f} output tok/s, p99 TTFT {r['p99_ttft_ms']:.1f} ms")
PY

# 2. ShareGPT from a file; --save-result with vLLM's default file name.
cat >"$WORK/sharegpt.json" <<'JSON'
[{"id": "a", "conversations": [{"from": "human", "value": "Tell me a story about a small cat who lives by the sea and likes fish."},
                              {"from": "gpt", "value": "Once upon a time a small cat lived by the sea and ate fish every day."}]},
 {"id": "b", "conversations": [{"from": "human", "value": "What is the capital of France and why is it famous around the world?"},
                              {"from": "gpt", "value": "Paris is the capital of France, famous for art, food and its old streets."}]}]
JSON
"$KVW" bench --base-url "$URL" --dataset-name sharegpt --dataset-path "$WORK/sharegpt.json" \
  --num-prompts 4 --max-concurrency 2 --request-rate inf --seed 1 --quiet --save-result \
  --result-dir "$WORK/default" >"$WORK/b2.out" 2>&1 || fail "sharegpt: $(tail -5 "$WORK/b2.out")"
f=$(ls "$WORK/default")
echo "$f" | grep -Eq '^bench-infqps-concurrency2-m-[0-9]{8}-[0-9]{6}\.json$' ||
  fail "result file '$f' is not vLLM's {label}-{rate}qps-concurrency{N}-{model}-{dt}.json"
/usr/bin/python3 -c "import json, sys; r = json.load(open(sys.argv[1]))
sys.exit(0 if r['completed'] == 4 and r['failed'] == 0 else 1)" \
  "$WORK/default/$f" || fail "sharegpt: not 4 completed"
echo "sharegpt: 4 completed, saved as $f"

# 3. A dataset kvwarden does not have: refused before any request, naming the flag.
"$KVW" bench --base-url "$URL" --dataset-name sonnet --num-prompts 1 >"$WORK/b3.out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q -- "--dataset-name 'sonnet'" "$WORK/b3.out" ||
  fail "--dataset-name sonnet: rc=$rc $(cat "$WORK/b3.out")"
echo PASS
