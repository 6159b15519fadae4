#!/usr/bin/env bash
# kvwarden make-model --from as a user runs it: stories260K (a trained llama file) rewritten as
# phi3 and qwen2 generates the llama file's greedy text, its keys and tokenizer come along under
# the new architecture, and files or flags it cannot take give one line on stderr (exit 2 for
# flags, 1 for a file it cannot rewrite, naming the file).
set -u
KVW="$1"
SRC="$KVW_TEST_MODELS/stories260K.gguf"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
gen() {
  "$KVW" generate --model "$1" --prompt "Once upon a time" --temperature 0 --max-tokens 40 \
    2>"$WORK/gen_err" || fail "generate $1: $(cat "$WORK/gen_err")"
}

want="$(gen "$SRC")"
[ -n "$want" ] || fail "no text from the llama file"
for arch in phi3 qwen2; do
  "$KVW" make-model --from "$SRC" --arch "$arch" --out "$WORK/$arch.gguf" 2>"$WORK/err" ||
    fail "make-model --from --arch $arch: $(cat "$WORK/err")"
  "$KVW" inspect "$WORK/$arch.gguf" >"$WORK/$arch.txt" || fail "inspect $arch"
  grep -qE "general.architecture +.*$arch" "$WORK/$arch.txt" || fail "$arch: architecture"
  grep -q " $arch.block_count " "$WORK/$arch.txt" || fail "$arch: keys not renamed"
  grep -q " llama\." "$WORK/$arch.txt" && fail "$arch: llama keys left"
  grep -q " tokenizer.ggml.tokens " "$WORK/$arch.txt" || fail "$arch: no tokenizer"
  [ "$(gen "$WORK/$arch.gguf")" = "$want" ] || fail "$arch: greedy text differs"
done
grep -q " blk.0.attn_qkv.weight " "$WORK/phi3.txt" || fail "phi3: no attn_qkv"
grep -q " blk.0.attn_q.bias " "$WORK/qwen2.txt" || fail "qwen2: no attn_q.bias"

refused() {  # expected exit code, stderr text, then the make-model arguments
  local code="$1" text="$2"
  shift 2
  "$KVW" make-model "$@" 2>"$WORK/err"
  local rc=$?
  [ "$rc" = "$code" ] || fail "make-model $*: exit $rc, expected $code"
  grep -qF -- "$text" "$WORK/err" || fail "make-model $*: stderr '$(cat "$WORK/err")'"
  [ "$(wc -l <"$WORK/err")" = 1 ] || fail "make-model $*: more than one line"
}
refused 2 "--dim draws a new model" --from "$SRC" --arch phi3 --dim 128 --out "$WORK/x.gguf"
refused 2 "--from needs --arch" --from "$SRC" --out "$WORK/x.gguf"
refused 1 "$WORK/phi3.gguf: cannot rewrite as qwen2: --from needs a llama file, found 'phi3'" \
  --from "$WORK/phi3.gguf" --arch qwen2 --out "$WORK/x.gguf"
refused 1 "phi3, qwen2 or llama, not 'gemma2'" --from "$SRC" --arch gemma2 --out "$WORK/x.gguf"
"$KVW" make-model --preset mixtral-tiny --out "$WORK/moe.gguf" 2>/dev/null || fail "mixtral-tiny"
refused 1 "it has experts" --from "$WORK/moe.gguf" --arch phi3 --out "$WORK/x.gguf"
echo PASS
