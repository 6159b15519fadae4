#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz/) with clang + ASan/UBSan and runs each for a bounded
# time from its seed corpus. CI runs it with the default; for hours:
#   FUZZ_SECONDS=14400 scripts/fuzz.sh [target...]
# Targets: gguf tokenizer openai_request chat_template (default: all). A crash stops the run
# with the input under build-fuzz/crashes/; copy it into fuzz/regressions/<target>/ so the
# normal build replays it as a test (fuzz_replay_<target>) once fixed.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${FUZZ_SECONDS:-30}
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(gguf tokenizer openai_request chat_template grammar)
cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DKVW_FUZZ=ON -DKVW_BUILD_TESTS=OFF -DKVW_BUILD_APPS=OFF -DKVW_BUILD_BENCH=OFF >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target "${TARGETS[@]/%/_fuzz}"
mkdir -p build-fuzz/crashes
for t in "${TARGETS[@]}"; do
  work=build-fuzz/corpus/$t
  mkdir -p "$work"
  echo "== $t: ${SECONDS_EACH}s"
  "build-fuzz/fuzz/${t}_fuzz" "$work" "fuzz/corpus/$t" -max_total_time="$SECONDS_EACH" \
    -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="build-fuzz/crashes/$t-" 2>&1 |
    grep -E "^(#[0-9]+ +DONE|stat::number_of_executed_units|stat::peak_rss|Done|==[0-9]+==ERROR|SUMMARY)|cov:" |
    tail -4
  status=${PIPESTATUS[0]}
  if [ "$status" -ne 0 ]; then
    echo "fuzz: $t failed (exit $status); inputs in build-fuzz/crashes/" >&2
    exit 1
  fi
done
