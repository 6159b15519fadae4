#!/usr/bin/env bash
# kvwarden make-model --arch deepseek2 as a user runs it: the presets and the layout and routing
# flags write the keys and tensors llama.cpp's converters write (seen through `inspect`), and
# generate runs them; bad values give one line on stderr naming the flag, and exit 2.
set -u
KVW="$1"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
mk() {
  "$KVW" make-model --out "$WORK/$1.gguf" "${@:2}" 2>"$WORK/err" ||
    fail "make-model ${*:2}: $(cat "$WORK/err")"
  "$KVW" inspect "$WORK/$1.gguf" >"$WORK/$1.txt" || fail "inspect $1"
}
key() { awk -v k="deepseek2.$2" '$2 == k { print $NF }' "$WORK/$1.txt"; }
has() { grep -q " $2 " "$WORK/$1.txt"; }

mk v2 --preset deepseek-v2-lite-tiny --seed 3
[ "$(key v2 attention.kv_lora_rank)" = 64 ] || fail "v2: kv_lora_rank"
[ -z "$(key v2 attention.q_lora_rank)" ] || fail "v2: q_lora_rank written with rank 0"
[ "$(key v2 attention.key_length)" = 48 ] && [ "$(key v2 attention.value_length)" = 32 ] ||
  fail "v2: per-head key/value lengths"
[ "$(key v2 expert_gating_func)" = 1 ] && [ "$(key v2 expert_shared_count)" = 2 ] ||
  fail "v2: gating $(key v2 expert_gating_func), shared $(key v2 expert_shared_count)"
has v2 blk.0.attn_kv_b.weight && has v2 blk.0.attn_q.weight && has v2 blk.1.ffn_up_shexp.weight ||
  fail "v2: tensors"
has v2 blk.0.attn_k_b.weight && fail "v2: split tensors in a kv_b file"

mk v3 --preset deepseek-v3-tiny --seed 3
[ "$(key v3 attention.q_lora_rank)" = 48 ] && [ "$(key v3 attention.key_length_mla)" = 48 ] ||
  fail "v3: q_lora_rank / key_length_mla"
[ "$(key v3 attention.head_count_kv)" = 1 ] || fail "v3: head_count_kv"
[ "$(key v3 expert_gating_func)" = 2 ] && [ "$(key v3 expert_group_count)" = 4 ] &&
  [ "$(key v3 expert_group_used_count)" = 2 ] && [ "$(key v3 expert_weights_norm)" = true ] ||
  fail "v3: routing keys"
[ "$(key v3 rope.scaling.type)" = '"yarn"' ] &&
  [ -n "$(key v3 rope.scaling.yarn_log_multiplier)" ] ||
  fail "v3: yarn keys"
has v3 blk.0.attn_k_b.weight && has v3 blk.0.attn_v_b.weight && has v3 blk.1.exp_probs_b.bias &&
  has v3 blk.0.attn_q_a.weight || fail "v3: tensors"
has v3 blk.0.attn_kv_b.weight && fail "v3: attn_kv_b in a split file"

# Flags override a preset.
mk v2s --preset deepseek-v2-lite-tiny --mla-layout split --gating sigmoid \
  --expert-weights-norm true --q-lora-rank 32 --weight-type q8_0
has v2s blk.0.attn_k_b.weight && has v2s blk.0.attn_q_b.weight || fail "v2s: tensors"
[ "$(key v2s expert_gating_func)" = 2 ] && [ "$(key v2s expert_weights_norm)" = true ] ||
  fail "v2s: routing keys"
grep -q " blk.0.attn_kv_a_mqa.weight *q8_0 " "$WORK/v2s.txt" || fail "v2s: weight type"

# Bad values: exit 2, one line naming the flag.
refuse() {
  local flag="$1"; shift
  "$KVW" make-model --out "$WORK/bad.gguf" "$@" 2>"$WORK/err"; local rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l <"$WORK/err")" -eq 1 ] && grep -q -- "$flag" "$WORK/err" ||
    fail "$*: rc=$rc $(cat "$WORK/err")"
  [ ! -e "$WORK/bad.gguf" ] || fail "$*: wrote a file"
}
refuse --mla-layout --preset deepseek-v2-lite-tiny --mla-layout kvb
refuse --gating --preset deepseek-v2-lite-tiny --gating relu
refuse --kv-lora-rank --preset deepseek-v2-lite-tiny --kv-lora-rank 0
refuse --qk-rope-dim --preset deepseek-v2-lite-tiny --qk-rope-dim 15
refuse --expert-groups --preset deepseek-v3-tiny --expert-groups 3
refuse --yarn-log-multiplier --preset deepseek-v3-tiny --yarn-log-multiplier 0
refuse --q-lora-rank --preset deepseek-v3-tiny --weight-type q8_0
refuse --kv-lora-rank --kv-lora-rank 64  # deepseek2-only flag on the llama preset
refuse --preset --preset deepseek-v4
# generate runs both shapes: the same greedy text twice (batch-invariant engine), 12 tokens.
for m in v2 v3; do
  a=$("$KVW" generate -m "$WORK/$m.gguf" -p "the cat" -n 12 --temperature 0 2>"$WORK/err") ||
    fail "generate $m: $(cat "$WORK/err")"
  b=$("$KVW" generate -m "$WORK/$m.gguf" -p "the cat" -n 12 --temperature 0 2>/dev/null)
  [ -n "$a" ] && [ "$a" = "$b" ] || fail "generate $m: '$a' then '$b'"
done
echo "make-model deepseek2 CLI: all checks passed"
