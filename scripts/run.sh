#!/usr/bin/env bash
# Installs what is missing, builds Release, writes a small random-weight model with
# `kvwarden make-model` and generates from it; then generates from the small real model
# (stories260K) when ../shared/models is present. (The server arrives with a later issue.)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target kvwarden
KVW=build/apps/kvwarden/kvwarden
mkdir -p build/models
$KVW make-model --out build/models/tiny.gguf --preset tiny --seed 1
echo "== random-weight model (text is random by design):"
$KVW generate --model build/models/tiny.gguf --prompt "once upon a time" --max-tokens 24 --seed 1
REAL=../shared/models/stories260K.gguf
if [ -f "$REAL" ]; then
  echo "== stories260K (real trained weights), greedy:"
  $KVW generate --model "$REAL" --prompt "Once upon a time" --max-tokens 120 --temperature 0
fi
