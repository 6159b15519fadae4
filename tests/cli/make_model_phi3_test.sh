#!/usr/bin/env bash
# kvwarden make-model --arch phi3 as a user runs it: the presets and flags write the keys and
# tensors convert_hf_to_gguf.py's Phi3 class writes (seen through `inspect`): fused attn_qkv and
# gate/up ffn_up, original_context_length and sliding_window always, LongRoPE factors and
# attn_factor with --longrope, --rope-dim for partial rotary; bad values give one line on stderr
# naming the flag, and exit 2. (Generation is the engine's test; the vocabulary's <|endoftext|>,
# which llama.cpp needs in a model named phi3, is checked in tests/reference/phi3_cases.py.)
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
key() { awk -v k="phi3.$2" '$2 == k { print $NF }' "$WORK/$1.txt"; }
has() { grep -q " $2 " "$WORK/$1.txt"; }

mk t --preset phi3-tiny --seed 3
[ "$(key t context_length)" = 8192 ] && [ "$(key t rope.scaling.original_context_length)" = 256 ] ||
  fail "tiny: contexts"
[ "$(key t rope.dimension_count)" = 32 ] && [ "$(key t attention.sliding_window)" = 16384 ] ||
  fail "tiny: rope dims / window"
# sqrt(1 + ln(8192 / 256) / ln(256)) = 1.2747549
[ "$(key t rope.scaling.attn_factor)" = 1.27475488 ] || fail "tiny: attn_factor $(key t rope.scaling.attn_factor)"
has t rope.scaling.type && fail "tiny: phi3 files carry no rope.scaling.type"
grep -qE " rope_factors_long.weight +f32 +\[16\] " "$WORK/t.txt" &&
  grep -qE " rope_factors_short.weight +f32 +\[16\] " "$WORK/t.txt" || fail "tiny: LongRoPE factors"
for l in 0 1; do
  grep -qE " blk.$l.attn_qkv.weight +f32 +\[128, 384\] " "$WORK/t.txt" || fail "tiny: blk.$l.attn_qkv"
  grep -qE " blk.$l.ffn_up.weight +f32 +\[128, 512\] " "$WORK/t.txt" || fail "tiny: blk.$l.ffn_up"
  has t "blk.$l.attn_q.weight" && fail "tiny: separate attn_q"
  has t "blk.$l.ffn_gate.weight" && fail "tiny: separate ffn_gate"
done
has t output.weight || fail "tiny: untied"

# Phi-4-mini: partial rotary, GQA, tied, no window (0 written).
mk p --preset phi4-mini-tiny --seed 3
[ "$(key p rope.dimension_count)" = 24 ] && [ "$(key p attention.head_count_kv)" = 2 ] &&
  [ "$(key p attention.sliding_window)" = 0 ] || fail "phi4-mini: keys"
has p output.weight && fail "phi4-mini: tied file has output.weight"
grep -qE " blk.0.attn_qkv.weight +f32 +\[192, 320\] " "$WORK/p.txt" || fail "phi4-mini: attn_qkv rows 192 + 2 x 64"

# Without --longrope: no factors and no attn_factor; the keys are still written.
mk n --arch phi3 --longrope=false --rope-orig-ctx 128 --weight-type q5_0
has n rope_factors_long.weight && fail "no longrope: factors written"
has n rope.scaling.attn_factor && fail "no longrope: attn_factor written"
[ "$(key n rope.scaling.original_context_length)" = 128 ] || fail "no longrope: original context"
grep -qE " blk.0.attn_qkv.weight +q5_0 " "$WORK/n.txt" || fail "q5_0 weight type"

refuse() {
  local flag="$1"; shift
  "$KVW" make-model --out "$WORK/bad.gguf" "$@" 2>"$WORK/err"; local rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l <"$WORK/err")" -eq 1 ] && grep -q -- "$flag" "$WORK/err" ||
    fail "$*: rc=$rc $(cat "$WORK/err")"
  [ ! -e "$WORK/bad.gguf" ] || fail "$*: wrote a file"
}
refuse --rope-dim --preset phi3-tiny --rope-dim 34
refuse --rope-scaling --preset phi3-tiny --rope-scaling yarn --rope-scale 4
refuse --rope-orig-ctx --preset phi3-tiny --rope-orig-ctx 9000
refuse --head-dim --preset phi3-tiny --head-dim 64
refuse --longrope --longrope  # phi3-only flag on the llama preset
echo "make-model phi3 CLI: all checks passed"
