#!/usr/bin/env bash
# kvwarden make-model --arch gemma2 / gemma3 as a user runs it: the presets and the gemma flags
# write the keys and tensors llama.cpp's Gemma converters write (seen through `inspect`); bad
# values give one line on stderr naming the flag, and exit 2. (Numerics are the reference's.)
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
key() { awk -v k="$2" '$2 == k { print $NF }' "$WORK/$1.txt"; }
has() { grep -q " $2 " "$WORK/$1.txt"; }

mk g2 --preset gemma2-tiny --seed 3
[ "$(key g2 gemma2.attention.key_length)" = 64 ] &&
  [ "$(key g2 gemma2.attention.value_length)" = 64 ] || fail "gemma2: key/value length"
[ "$(key g2 gemma2.attn_logit_softcapping)" = 50 ] &&
  [ "$(key g2 gemma2.final_logit_softcapping)" = 30 ] || fail "gemma2: soft-capping keys"
[ "$(key g2 gemma2.attention.sliding_window)" = 16 ] || fail "gemma2: window"
[ "$(key g2 tokenizer.ggml.add_space_prefix)" = false ] || fail "gemma2: add_space_prefix"
has g2 gemma2.rope.freq_base && fail "gemma2: rope.freq_base (the converter writes none)"
has g2 gemma2.rope.dimension_count && fail "gemma2: rope.dimension_count"
has g2 output.weight && fail "gemma2: output.weight (always tied)"
for l in 0 3; do
  for t in attn_norm attn_q attn_output post_attention_norm ffn_norm ffn_gate post_ffw_norm; do
    has g2 "blk.$l.$t.weight" || fail "gemma2: blk.$l.$t.weight missing"
  done
done
has g2 blk.0.attn_q_norm.weight && fail "gemma2: Q norm in a gemma2 file"

mk g3 --preset gemma3-tiny --seed 3 --tied=false --final-softcap 3 --swa-period 3
[ "$(key g3 gemma3.rope.freq_base)" = 1000000 ] &&
  [ "$(key g3 gemma3.rope.freq_base_swa)" = 10000 ] || fail "gemma3: rope bases"
[ "$(key g3 gemma3.final_logit_softcapping)" = 3 ] || fail "gemma3: final cap"
[ "$(key g3 gemma3.attention.sliding_window_pattern)" = 3 ] || fail "gemma3: period"
has g3 gemma3.attn_logit_softcapping && fail "gemma3: attention soft-capping key"
has g3 output.weight || fail "gemma3: --tied=false wrote no output.weight"
for t in attn_q_norm attn_k_norm post_attention_norm post_ffw_norm; do
  has g3 "blk.5.$t.weight" || fail "gemma3: blk.5.$t.weight missing"
done
mk g3b --preset gemma3-tiny --sliding-window 0
has g3b gemma3.attention.sliding_window && fail "gemma3 without a window wrote the key"

refuse() {
  local flag="$1"; shift
  "$KVW" make-model --out "$WORK/bad.gguf" "$@" 2>"$WORK/err"; local rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l <"$WORK/err")" -eq 1 ] && grep -q -- "$flag" "$WORK/err" ||
    fail "$*: rc=$rc $(cat "$WORK/err")"
  [ ! -e "$WORK/bad.gguf" ] || fail "$*: wrote a file"
}
refuse --tied=false --preset gemma2-tiny --tied=false
refuse --sliding-window --preset gemma2-tiny --sliding-window 0
refuse --attn-softcap --preset gemma2-tiny --attn-softcap 0
refuse --attn-softcap --preset gemma3-tiny --attn-softcap 50
refuse --experts --preset gemma3-tiny --experts 4 --experts-used 2
refuse --final-softcap --final-softcap 30  # a gemma-only flag on the llama preset
echo "make-model gemma CLI: all checks passed"
