#!/usr/bin/env bash
# `kvwarden plan --engine` prints the same budget table (request row and per-sequence row
# included) as `kvwarden serve` logs at start-up for the same model and limits: for the given
# model, and for a generated sliding-window model, whose per-sequence KV bytes and sequences at
# full context are capped by the window (blocks behind it are freed). With curl, the windowed
# server also answers a request longer than its window and counts the freed blocks in /metrics.
set -u
KVW="$1"
MODEL="$2"
WORK="$(mktemp -d)"
PID=""
trap '[ -n "$PID" ] && kill $PID 2>/dev/null; rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
table() { grep -E "^  (weights|workspace|kv_pool|reserve|request|total|kv:|kv window:|seq:|decode:) " "$1"; }

# compare NAME MODEL MAX_MODEL_LEN [local_layers_full]: starts serve, leaves it running (PID,
# URL), diffs the tables. With a 4th argument the GPU plan's per-sequence figure is not compared:
# it caps windowed layers of a mixed stack (Gemma) at their window, as vLLM's hybrid allocator
# does, while kvwarden's engine keeps every layer's KV whole.
compare() {
  local name="$1" model="$2" len="$3" local_layers_full="${4:-}"
  "$KVW" serve --model "$model" --port 0 --threads 2 --max-num-seqs 64 --max-model-len "$len" \
    --max-queue 100 --request-memory 40MiB --grammar-cache 24MiB ${EXTRA_FLAGS:-} >"$WORK/$name.out" 2>"$WORK/$name.err" &
  PID=$!
  for _ in $(seq 1 100); do grep -q "kvwarden serving" "$WORK/$name.out" && break; sleep 0.1; done
  grep -q "kvwarden serving" "$WORK/$name.out" || fail "$name: serve did not start: $(cat "$WORK/$name.err")"
  URL="$(sed -n 's/^kvwarden serving .* on \(http[^ ]*\).*/\1/p' "$WORK/$name.out")"
  table "$WORK/$name.err" >"$WORK/$name.serve.table"
  "$KVW" plan --model "$model" --engine --concurrency 64 --max-model-len "$len" \
    --engine-threads 2 --max-queue 100 --request-memory 40MiB --grammar-cache 24MiB --gpu-memory 80GiB \
    --max-num-batched-tokens 2048 ${EXTRA_FLAGS:-} >"$WORK/$name.plan.out" 2>&1 ||
    fail "$name: plan: $(cat "$WORK/$name.plan.out")"
  awk '/kvwarden CPU engine budget/{on=1; next} on && !/^  /{on=0} on' "$WORK/$name.plan.out" |
    table /dev/stdin >"$WORK/$name.plan.table"
  grep -q "request" "$WORK/$name.serve.table" || fail "$name: no request row in serve's table"
  grep -q "seq:" "$WORK/$name.serve.table" || fail "$name: no seq row in serve's table"
  diff "$WORK/$name.serve.table" "$WORK/$name.plan.table" ||
    fail "$name: plan --engine differs from serve's table"
  echo "== $name"
  cat "$WORK/$name.plan.table"
  [ -n "$local_layers_full" ] && return 0
  # The plan's own (GPU) per-sequence figure uses the same window rule: same bytes (f16, tp 1).
  local seq_bytes
  seq_bytes="$(sed -n 's/^  seq: \([0-9]*\) B\/sequence.*/\1/p' "$WORK/$name.serve.table")"
  grep -qE "^KV per sequence .*\($seq_bytes B\) at $len tokens" "$WORK/$name.plan.out" ||
    fail "$name: plan's KV per sequence differs from serve's $seq_bytes B: $(grep 'KV per sequence' "$WORK/$name.plan.out")"
}

stop() { kill "$PID" 2>/dev/null; wait "$PID" 2>/dev/null; PID=""; }

compare default "$MODEL" 256
stop

# Mistral-style: every layer attends to the last 64 positions. At 2048 tokens a sequence holds
# ceil((64 + 15) / 16) = 5 blocks, not 128, so 64 sequences need 320 blocks.
"$KVW" make-model --out "$WORK/swa.gguf" --sliding-window 64 --context 4096 --seed 7 \
  >"$WORK/make.out" 2>&1 || fail "make-model: $(cat "$WORK/make.out")"
compare window "$WORK/swa.gguf" 2048
grep -qE "^  seq: [0-9]+ B/sequence \(5 blocks\) at 2048 tokens, sliding window 64; room for 64 such" \
  "$WORK/window.serve.table" || fail "window: unexpected seq row: $(grep seq: "$WORK/window.serve.table")"
grep -qE "^  kv: .* 320 blocks$" "$WORK/window.serve.table" ||
  fail "window: pool not sized by the window: $(grep kv: "$WORK/window.serve.table")"
if command -v curl >/dev/null; then
  # 300 prompt tokens + 100 generated in a 64-token window: about 20 blocks freed behind it.
  PROMPT="$(for i in $(seq 1 150); do printf 'hello world '; done)"
  curl -sf "$URL/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"prompt\": \"$PROMPT\", \"max_tokens\": 100, \"ignore_eos\": true}" >"$WORK/answer.json" ||
    fail "window: completion failed"
  grep -q '"finish_reason"' "$WORK/answer.json" || fail "window: no answer: $(cat "$WORK/answer.json")"
  FREED="$(curl -sf "$URL/metrics" | sed -n 's/^kvwarden_kv_window_freed_blocks_total \([0-9.e+]*\)$/\1/p')"
  [ -n "$FREED" ] || fail "window: kvwarden_kv_window_freed_blocks_total missing from /metrics"
  awk -v f="$FREED" 'BEGIN { exit !(f + 0 > 0) }' || fail "window: no blocks freed ($FREED)"
  echo "window: $FREED blocks freed behind the window for one request"
fi
stop

# Mixtral-style MoE (8 experts, 2 per token): the same table, whose weights row counts every
# expert and whose decode row counts the experts a token reads; with curl, serve answers.
"$KVW" make-model --out "$WORK/moe.gguf" --preset mixtral-tiny --seed 9 >"$WORK/make.out" 2>&1 ||
  fail "make-model moe: $(cat "$WORK/make.out")"
compare moe "$WORK/moe.gguf" 256
grep -qE "^  decode: .* of weights read per token, 2 of 8 experts$" "$WORK/moe.serve.table" ||
  fail "moe: no decode row: $(cat "$WORK/moe.serve.table")"
if command -v curl >/dev/null; then
  curl -sf "$URL/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": "hello world", "max_tokens": 20, "ignore_eos": true}' >"$WORK/moe.json" ||
    fail "moe: completion failed"
  grep -q '"finish_reason"' "$WORK/moe.json" || fail "moe: no answer: $(cat "$WORK/moe.json")"
fi
stop

# DeepSeek-V3-style MLA + shared experts: the cache row is one latent (kv_lora_rank + rope dims)
# per token and layer, so plan --engine and serve must agree on it; with curl, serve answers.
"$KVW" make-model --out "$WORK/ds.gguf" --preset deepseek-v3-tiny --seed 9 >"$WORK/make.out" 2>&1 ||
  fail "make-model deepseek2: $(cat "$WORK/make.out")"
compare deepseek2 "$WORK/ds.gguf" 256
# 3 layers x (64 + 16) latent x 2 B (f16) = 480 B per token.
grep -qE "^  kv: 480 B/token, " "$WORK/deepseek2.serve.table" ||
  fail "deepseek2: kv row is not one latent per token: $(grep kv: "$WORK/deepseek2.serve.table")"
if command -v curl >/dev/null; then
  curl -sf "$URL/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": "hello world", "max_tokens": 20, "ignore_eos": true}' >"$WORK/ds.json" ||
    fail "deepseek2: completion failed"
  grep -q '"finish_reason"' "$WORK/ds.json" || fail "deepseek2: no answer: $(cat "$WORK/ds.json")"
fi
stop

# Qwen3: heads of 64 while n_embd / n_head is 32 (key_length), per-head Q/K norms: the KV row is
# 2 layers x 2 (K, V) x 2 KV heads x 64 x 2 B (f16) = 1024 B per token, not the 512 that
# n_embd / n_head would give; with curl, serve answers.
"$KVW" make-model --out "$WORK/qwen3.gguf" --preset qwen3-tiny --seed 9 >"$WORK/make.out" 2>&1 ||
  fail "make-model qwen3: $(cat "$WORK/make.out")"
compare qwen3 "$WORK/qwen3.gguf" 256
grep -qE "^  kv: 1024 B/token, " "$WORK/qwen3.serve.table" ||
  fail "qwen3: kv row not sized by key_length: $(grep kv: "$WORK/qwen3.serve.table")"
if command -v curl >/dev/null; then
  curl -sf "$URL/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": "hello world", "max_tokens": 20, "ignore_eos": true}' >"$WORK/q3.json" ||
    fail "qwen3: completion failed"
  grep -q '"finish_reason"' "$WORK/q3.json" || fail "qwen3: no answer: $(cat "$WORK/q3.json")"
fi
stop

# Qwen3-MoE: the same attention, 16 experts of which 4 per token (renormalised), no shared one.
"$KVW" make-model --out "$WORK/qwen3moe.gguf" --preset qwen3moe-tiny --seed 9 >"$WORK/make.out" 2>&1 ||
  fail "make-model qwen3moe: $(cat "$WORK/make.out")"
compare qwen3moe "$WORK/qwen3moe.gguf" 256
grep -qE "^  decode: .* of weights read per token, 4 of 16 experts$" "$WORK/qwen3moe.serve.table" ||
  fail "qwen3moe: no decode row: $(cat "$WORK/qwen3moe.serve.table")"
stop

# Gemma-2 and Gemma-3: windowed local layers (16 tokens) beside global ones. The global layers
# keep every block (256 tokens = 16 blocks per sequence): gemma2-tiny 2 layers x 2 (K, V) x 2 KV
# heads x 64 x 2 B = 1024 B per token, gemma3-tiny 1 x 2 x 1 x 64 x 2 = 256 B; the local layers
# (gemma2 2 of 4: 1024 B, gemma3 5 of 6: 1280 B per token) sit in window slots, 64 sequences x
# (ceil(15 / 16) + 3) + 2048 / 16 = 384 of them, beside 64 x 16 = 1024 blocks. With
# --swa-full the local layers keep every block again (the old 2048 / 1536 B per token). With
# curl, serve answers.
for g in gemma2 gemma3; do
  "$KVW" make-model --out "$WORK/$g.gguf" --preset "$g-tiny" --seed 9 >"$WORK/make.out" 2>&1 ||
    fail "make-model $g: $(cat "$WORK/make.out")"
  compare "$g" "$WORK/$g.gguf" 256 local_layers_full
  want=$([ "$g" = gemma2 ] && echo 1024 || echo 256)
  local_want=$([ "$g" = gemma2 ] && echo 1024 || echo 1280)
  grep -qE "^  kv: $want B/token, .* 1024 blocks$" "$WORK/$g.serve.table" ||
    fail "$g: kv row not $want B/token: $(grep kv: "$WORK/$g.serve.table")"
  grep -qE "^  kv window: [0-9]+ layers windowed to 16 tokens, $local_want B/token, .* 384 window slots" \
    "$WORK/$g.serve.table" || fail "$g: kv window row: $(grep 'kv window' "$WORK/$g.serve.table")"
  grep -qE "^  seq: [0-9]+ B/sequence \(16 blocks\) at 256 tokens;" "$WORK/$g.serve.table" ||
    fail "$g: blocks freed behind a window some layers do not have: $(grep seq: "$WORK/$g.serve.table")"
  if command -v curl >/dev/null; then
    curl -sf "$URL/v1/completions" -H 'Content-Type: application/json' \
      -d '{"prompt": "hello world the cat", "max_tokens": 40, "ignore_eos": true}' \
      >"$WORK/$g.json" || fail "$g: completion failed"
    grep -q '"finish_reason"' "$WORK/$g.json" || fail "$g: no answer: $(cat "$WORK/$g.json")"
  fi
  stop
done
EXTRA_FLAGS=--swa-full compare gemma3full "$WORK/gemma3.gguf" 256 local_layers_full
grep -qE "^  kv: 1536 B/token, " "$WORK/gemma3full.serve.table" ||
  fail "gemma3 --swa-full: kv row: $(grep kv: "$WORK/gemma3full.serve.table")"
grep -q "kv window" "$WORK/gemma3full.serve.table" && fail "gemma3 --swa-full: window slots"
stop
# Phi-3 (fused attn_qkv and ffn_up, LongRoPE, window 16384 longer than the context): 2 layers x 2
# (K, V) x 4 KV heads x 32 x 2 B = 1024 B per token. Phi-4-mini (GQA 6 / 2, tied): 512 B. With
# curl, serve answers.
for preset in phi3-tiny phi4-mini-tiny; do
  "$KVW" make-model --out "$WORK/$preset.gguf" --preset $preset --seed 9 >"$WORK/make.out" 2>&1 ||
    fail "make-model $preset: $(cat "$WORK/make.out")"
  compare "$preset" "$WORK/$preset.gguf" 512
  want=1024
  [ $preset = phi4-mini-tiny ] && want=512
  grep -qE "^  kv: $want B/token, " "$WORK/$preset.serve.table" ||
    fail "$preset: kv row: $(grep kv: "$WORK/$preset.serve.table")"
  if command -v curl >/dev/null; then
    curl -sf "$URL/v1/completions" -H 'Content-Type: application/json' \
      -d '{"prompt": "hello world", "max_tokens": 20, "ignore_eos": true}' >"$WORK/phi.json" ||
      fail "$preset: completion failed"
    grep -q '"finish_reason"' "$WORK/phi.json" || fail "$preset: no answer: $(cat "$WORK/phi.json")"
  fi
  stop
done
# gpt-oss: even layers windowed (16) beside global ones: the 2 global layers keep every block,
# 2 x 2 (K, V) x 2 KV heads x 32 x 2 B = 512 B per token (sinks are weights, not KV), 256 tokens
# = 16 blocks; the windowed ones (another 512 B per token) sit in window slots; 16 MXFP4
# experts of which 4 per token. With curl, serve answers a chat request through
# the file's harmony template.
"$KVW" make-model --out "$WORK/gptoss.gguf" --preset gpt-oss-tiny --seed 9 >"$WORK/make.out" 2>&1 ||
  fail "make-model gpt-oss: $(cat "$WORK/make.out")"
compare gptoss "$WORK/gptoss.gguf" 256 local_layers_full
grep -qE "^  kv: 512 B/token, " "$WORK/gptoss.serve.table" ||
  fail "gpt-oss: kv row: $(grep kv: "$WORK/gptoss.serve.table")"
grep -qE "^  seq: [0-9]+ B/sequence \(16 blocks\) at 256 tokens;" "$WORK/gptoss.serve.table" ||
  fail "gpt-oss: blocks freed behind a window: $(grep seq: "$WORK/gptoss.serve.table")"
grep -qE "^  decode: .* of weights read per token, 4 of 16 experts$" "$WORK/gptoss.serve.table" ||
  fail "gpt-oss: no decode row: $(cat "$WORK/gptoss.serve.table")"
if command -v curl >/dev/null; then
  curl -sf "$URL/v1/chat/completions" -H 'Content-Type: application/json' \
    -d '{"messages": [{"role": "user", "content": "hello world"}], "max_tokens": 20,
         "ignore_eos": true}' >"$WORK/gptoss.json" || fail "gpt-oss: chat completion failed"
  grep -q '"finish_reason"' "$WORK/gptoss.json" || fail "gpt-oss: no answer: $(cat "$WORK/gptoss.json")"
fi
stop
echo PASS
