#!/usr/bin/env bash
# llama-server's RoPE overrides on every command that loads or plans a model: generate's text
# changes under --rope-scaling yarn --rope-scale 4 and vLLM's JSON form gives the same text as
# the flags; serve's and plan's default --max-model-len follow the stretched context (4096 x 4),
# plan's launch lines carry the override; a JSON key we would ignore is refused naming it.
set -u
KVW="$1"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

M="$WORK/m.gguf"
"$KVW" make-model --out "$M" --context 4096 >/dev/null || fail "make-model"
P="Once upon a time there was a little girl named Lily. She loved to play outside in the park"
gen() { "$KVW" generate --model "$M" --prompt "$P" --max-tokens 24 --temperature 0 "$@" 2>/dev/null; }
plain="$(gen)"
flags="$(gen --rope-scaling yarn --rope-scale 4 --yarn-orig-ctx 4096)"
json="$(gen --rope-scaling '{"rope_type":"yarn","factor":4,"original_max_position_embeddings":4096}')"
[ -n "$plain" ] && [ -n "$flags" ] || fail "generate printed nothing"
[ "$plain" != "$flags" ] || fail "--rope-scaling yarn --rope-scale 4 did not change the text"
[ "$flags" = "$json" ] || fail "the JSON form differs from the flags: '$json' vs '$flags'"
[ "$(gen --rope-freq-base 500)" != "$plain" ] || fail "--rope-freq-base did not change the text"

"$KVW" generate --model "$M" --prompt x --rope-scaling '{"rope_type":"yarn","beta_fast":3}' \
  2>"$WORK/err" >/dev/null
rc=$?
[ $rc -eq 2 ] && grep -q -- '--rope-scaling: unsupported key "beta_fast"' "$WORK/err" ||
  fail "an unsupported key: rc=$rc $(cat "$WORK/err")"

serve_len() {  # extra flags; prints serve's max_model_len
  timeout 60 "$KVW" serve --model "$M" --port 0 "$@" >"$WORK/out" 2>"$WORK/serve.err" &
  local pid=$!
  for _ in $(seq 1 300); do grep -q "kvwarden serving" "$WORK/out" && break; sleep 0.1; done
  kill $pid 2>/dev/null
  wait $pid 2>/dev/null
  sed -n 's/.*max_model_len \([0-9]*\).*/\1/p' "$WORK/serve.err" | head -1
}
[ "$(serve_len)" = 4096 ] || fail "serve without an override: max_model_len $(serve_len)"
got="$(serve_len --rope-scaling yarn --rope-scale 4)"
[ "$got" = 16384 ] || fail "serve --rope-scaling yarn --rope-scale 4: max_model_len '$got'"

"$KVW" plan --model "$M" --gpu-memory 24GiB --engine --rope-scaling yarn --rope-scale 4 \
  >"$WORK/plan" 2>&1 || fail "plan: $(cat "$WORK/plan")"
grep -q "budget (KV pool for 1 x 4096 tokens and one of 16384," "$WORK/plan" || fail "plan --engine: $(head -3 "$WORK/plan")"
grep -q "vllm serve .*--max-model-len 16384 .*--hf-overrides '{\"rope_parameters\": {\"factor\":4.0,\"original_max_position_embeddings\":4096,\"rope_type\":\"yarn\"}}'" "$WORK/plan" ||
  fail "plan's vLLM line: $(grep 'vllm serve' "$WORK/plan")"
"$KVW" bench-model --help | grep -q -- "--rope-scaling" || fail "bench-model has no --rope-scaling"
echo PASS
