#!/usr/bin/env bash
# --draft-model through the binary: `plan --engine --draft-model` prints the same budget table
# (draft weights, workspace and KV rows included) as `serve --draft-model` logs at start-up; a
# draft with another vocabulary is refused at start-up naming both files; vLLM's
# --speculative-config {"model": FILE} is the same as --draft-model. With curl: a request moves
# vllm:spec_decode_* and one with "speculative": false does not.
set -u
KVW="$1"
MODEL="$2"
WORK="$(mktemp -d)"
PID=""
trap '[ -n "$PID" ] && kill $PID 2>/dev/null; rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
table() { grep -E "^  (weights|workspace|kv_pool|reserve|request|draft_wts|draft_work|draft_kv|total|kv:|seq:|spec:|draft catch-up:) " "$1"; }
# The same file drafts for itself (same vocabulary by construction; every draft is accepted).
DRAFT="$MODEL"

start() {  # name flags...
  local name="$1"
  shift
  "$KVW" serve --model "$MODEL" --port 0 --threads 2 --max-num-seqs 8 --max-model-len 512 \
    --max-queue 16 --request-memory 40MiB "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" &
  PID=$!
  for _ in $(seq 1 200); do grep -q "kvwarden serving" "$WORK/$name.out" && break; sleep 0.1; done
  grep -q "kvwarden serving" "$WORK/$name.out" || fail "$name: serve did not start: $(tail -5 "$WORK/$name.err")"
  URL="$(sed -n 's/^kvwarden serving .* on \(http[^ ]*\).*/\1/p' "$WORK/$name.out")"
}
stop() { kill "$PID" 2>/dev/null; wait "$PID" 2>/dev/null; PID=""; }

start draft --draft-model "$DRAFT" --spec-max-draft 3
table "$WORK/draft.err" >"$WORK/serve.table"
for row in draft_wts draft_work draft_kv spec:; do
  grep -q "^  $row" "$WORK/serve.table" || fail "no $row row in serve's table: $(cat "$WORK/serve.table")"
done
"$KVW" plan --model "$MODEL" --engine --concurrency 8 --max-model-len 512 --engine-threads 2 \
  --max-queue 16 --request-memory 40MiB --gpu-memory 80GiB --max-num-batched-tokens 2048 \
  --draft-model "$DRAFT" --spec-max-draft 3 >"$WORK/plan.out" 2>&1 || fail "plan: $(cat "$WORK/plan.out")"
awk '/kvwarden CPU engine budget/{on=1; next} on && !/^  /{on=0} on' "$WORK/plan.out" |
  table /dev/stdin >"$WORK/plan.table"
diff "$WORK/serve.table" "$WORK/plan.table" || fail "plan --engine --draft-model differs from serve's table"
cat "$WORK/plan.table"

if command -v curl >/dev/null; then
  drafts() { curl -sf "$URL/metrics" | sed -n 's/^vllm:spec_decode_num_draft_tokens_total\({[^}]*}\)\{0,1\} \([0-9.e+]*\)$/\2/p' | head -1; }
  ask() {  # extra JSON fields
    curl -sf "$URL/v1/completions" -H 'Content-Type: application/json' \
      -d "{\"prompt\": \"And it came to pass\", \"max_tokens\": 24, \"temperature\": 0, \"ignore_eos\": true $1}" \
      >"$WORK/answer.json" || fail "completion failed: $1"
    grep -q '"finish_reason"' "$WORK/answer.json" || fail "no answer: $(cat "$WORK/answer.json")"
  }
  D0="$(drafts)"
  [ -n "$D0" ] || fail "vllm:spec_decode_num_draft_tokens_total missing from /metrics"
  ask ', "speculative": false'
  OPT_OUT="$(cat "$WORK/answer.json" | sed -n 's/.*"text": *"\([^"]*\)".*/\1/p')"
  D1="$(drafts)"
  awk -v a="$D0" -v b="$D1" 'BEGIN { exit !(a + 0 == b + 0) }' || fail "opted-out request drafted ($D0 -> $D1)"
  ask ''
  SPEC="$(cat "$WORK/answer.json" | sed -n 's/.*"text": *"\([^"]*\)".*/\1/p')"
  D2="$(drafts)"
  awk -v a="$D1" -v b="$D2" 'BEGIN { exit !(b + 0 > a + 0) }' || fail "default request did not draft ($D1 -> $D2)"
  [ "$OPT_OUT" = "$SPEC" ] || fail "speculative and opted-out greedy texts differ: '$OPT_OUT' vs '$SPEC'"
  curl -s "$URL/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": "x", "speculative": "no"}' | grep -q '"param": *"speculative"' ||
    fail "a non-boolean speculative is not refused naming the field"
  echo "drafted tokens: $D0 -> $D1 (opted out) -> $D2; greedy text identical"
fi
stop

# vLLM's JSON form: the same table.
start json --speculative-config "{\"model\": \"$DRAFT\", \"num_speculative_tokens\": 3}"
table "$WORK/json.err" | diff "$WORK/serve.table" - || fail "--speculative-config model differs from --draft-model"
stop

# Another vocabulary: refused at start-up, naming both files.
"$KVW" make-model --out "$WORK/other.gguf" --seed 3 >"$WORK/make.out" 2>&1 || fail "make-model: $(cat "$WORK/make.out")"
"$KVW" serve --model "$MODEL" --port 0 --draft-model "$WORK/other.gguf" >"$WORK/bad.out" 2>&1 &&
  fail "serve started with a draft of another vocabulary"
grep -q "vocabularies differ" "$WORK/bad.out" || fail "no vocabulary message: $(tail -3 "$WORK/bad.out")"
grep -qF "$MODEL" "$WORK/bad.out" && grep -qF "$WORK/other.gguf" "$WORK/bad.out" ||
  fail "the refusal does not name both files: $(tail -3 "$WORK/bad.out")"
echo "PASS"
