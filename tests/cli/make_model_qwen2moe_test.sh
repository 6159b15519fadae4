#!/usr/bin/env bash
# kvwarden make-model --arch qwen2moe as a user runs it: the preset and the expert flags write the
# keys and tensors llama.cpp's converter writes for Qwen1.5-MoE (seen through `inspect`); bad
# values give one line on stderr naming the flag, and exit 2. (Generation is the engine's test.)
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
key() { awk -v k="qwen2moe.$2" '$2 == k { print $NF }' "$WORK/$1.txt"; }
has() { grep -q " $2 " "$WORK/$1.txt"; }

mk t --preset qwen2moe-tiny --seed 3
[ "$(key t expert_count)" = 8 ] && [ "$(key t expert_used_count)" = 2 ] ||
  fail "tiny: expert counts"
[ "$(key t expert_feed_forward_length)" = 64 ] &&
  [ "$(key t expert_shared_feed_forward_length)" = 256 ] || fail "tiny: expert widths"
for l in 0 1; do
  for t in attn_q.bias ffn_gate_inp.weight ffn_up_exps.weight ffn_gate_inp_shexp.weight \
    ffn_gate_shexp.weight ffn_up_shexp.weight ffn_down_shexp.weight; do
    has t "blk.$l.$t" || fail "tiny: blk.$l.$t missing"
  done
done
has t blk.0.ffn_gate.weight && fail "tiny: a dense FFN in a qwen2moe file"

# Flags override the preset; --arch qwen2moe from the llama preset needs the expert flags.
mk f --preset qwen2moe-tiny --experts 4 --experts-used 3 --expert-ffn 96 \
  --shared-expert-ffn 160 --weight-type q8_0
[ "$(key f expert_count)" = 4 ] && [ "$(key f expert_used_count)" = 3 ] &&
  [ "$(key f expert_feed_forward_length)" = 96 ] &&
  [ "$(key f expert_shared_feed_forward_length)" = 160 ] || fail "flags: keys"
grep -q " blk.0.ffn_up_shexp.weight *q8_0 " "$WORK/f.txt" || fail "flags: weight type"
grep -q " blk.0.ffn_gate_inp_shexp.weight *f32 " "$WORK/f.txt" || fail "flags: shared gate f32"
mk a --arch qwen2moe --experts 4 --experts-used 2 --expert-ffn 64 --shared-expert-ffn 128
[ "$(key a expert_count)" = 4 ] || fail "--arch qwen2moe: keys"

refuse() {
  local flag="$1"; shift
  "$KVW" make-model --out "$WORK/bad.gguf" "$@" 2>"$WORK/err"; local rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l <"$WORK/err")" -eq 1 ] && grep -q -- "$flag" "$WORK/err" ||
    fail "$*: rc=$rc $(cat "$WORK/err")"
  [ ! -e "$WORK/bad.gguf" ] || fail "$*: wrote a file"
}
refuse --shared-expert-ffn --preset qwen2moe-tiny --shared-expert-ffn 0
refuse --expert-ffn --preset qwen2moe-tiny --expert-ffn 0
refuse --experts-used --preset qwen2moe-tiny --experts-used 9
refuse --experts --arch qwen2moe
refuse --tied --preset qwen2moe-tiny --tied
refuse --shared-expert-ffn --shared-expert-ffn 64  # qwen2moe-only flag on the llama preset
echo "make-model qwen2moe CLI: all checks passed"
