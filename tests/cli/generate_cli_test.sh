#!/usr/bin/env bash
# kvwarden generate / make-model / inspect as a user runs them: greedy text from the real model,
# determinism for a fixed seed, and one-line errors with the right exit codes.
set -u
KVW="$1"
MODELS="${KVW_TEST_MODELS:-$(dirname "$0")/../models}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# Random-weight model: same seed, same text; a summary line on stderr.
"$KVW" make-model --out "$WORK/m.gguf" --seed 3 2>/dev/null || fail "make-model"
"$KVW" inspect "$WORK/m.gguf" | grep -q "token_embd.weight" || fail "inspect lists tensors"
a=$("$KVW" generate -m "$WORK/m.gguf" -p "the cat" -n 16 --seed 9 2>"$WORK/err")
b=$("$KVW" generate -m "$WORK/m.gguf" -p "the cat" -n 16 --seed 9 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] || fail "same seed gave different text"
grep -q "decode: 16 tokens" "$WORK/err" || fail "summary line: $(cat "$WORK/err")"

# Bad input: one line on stderr naming the problem, exit 2 (flags) or 1 (model).
"$KVW" generate -m "$WORK/m.gguf" -p hi --bogus 2>"$WORK/err"; rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$WORK/err")" -eq 1 ] && grep -q -- "--bogus" "$WORK/err" ||
  fail "bad flag: rc=$rc $(cat "$WORK/err")"
"$KVW" generate -m "$WORK/m.gguf" -p hi --top-p 2 2>"$WORK/err"; rc=$?
[ $rc -eq 2 ] && grep -q -- "--top-p" "$WORK/err" || fail "bad value: rc=$rc"
head -c 500 "$WORK/m.gguf" >"$WORK/cut.gguf"
"$KVW" generate -m "$WORK/cut.gguf" -p hi 2>"$WORK/err"; rc=$?
[ $rc -eq 1 ] && [ "$(wc -l <"$WORK/err")" -eq 1 ] && grep -q "cut.gguf" "$WORK/err" ||
  fail "truncated model: rc=$rc $(cat "$WORK/err")"

# No --model: the default model, or one clear line when it cannot be found.
KVW_DEFAULT_MODEL="$WORK/missing.gguf" "$KVW" generate -p hi 2>"$WORK/err"; rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$WORK/err")" -eq 1 ] && grep -q "default model.*$WORK/missing.gguf" "$WORK/err" ||
  fail "missing default model: rc=$rc $(cat "$WORK/err")"
a=$(KVW_DEFAULT_MODEL="$WORK/m.gguf" "$KVW" generate -p "the cat" -n 16 --seed 9 2>/dev/null)
[ "$a" = "$b" ] || fail "KVW_DEFAULT_MODEL was not used as the default model"

# Real weights: the greedy story.
[ -f "$MODELS/stories260K.gguf" ] || fail "no $MODELS/stories260K.gguf (tests/models)"
if true; then
  out=$("$KVW" generate -m "$MODELS/stories260K.gguf" -p "Once upon a time" -n 40 \
    --temperature 0 2>/dev/null)
  case "$out" in
    *"there was a little girl named Lily. She loved to play outside in the park."*) ;;
    *) fail "stories260K greedy text: $out" ;;
  esac
  out=$("$KVW" generate -m "$MODELS/stories260K.gguf" -p "Once upon a time" -n 40 \
    --temperature 0 --stop "park" 2>/dev/null)
  case "$out" in
    *park*) fail "--stop did not cut before 'park': $out" ;;
    *"play outside in the"*) ;;
    *) fail "--stop cut too much: $out" ;;
  esac
fi
echo "generate CLI: all checks passed"
