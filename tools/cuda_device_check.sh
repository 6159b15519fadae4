#!/usr/bin/env bash
# tools/cuda_device_check.sh: everything the CUDA backend's GPU check does, in one run on a
# machine with nvcc and a GPU but none of the project's dependencies: print the GPU and the
# toolchain, build src/kernels/cuda and its two tests (matmul, attention) with nvcc directly
# (sm_90a) and, in parallel, through its stand-alone CMake project, then run each correctness
# test + benchmark, the small correctness tests under compute-sanitizer memcheck (and the
# attention test's tiny subset under racecheck) and ctest of the CMake build.
#   usage: tools/cuda_device_check.sh [ROOT]   ROOT holds src/ and tests/ (default: this repo)
# KVW_CUDA_MATMUL_ARGS / KVW_CUDA_ATTN_ARGS: arguments of the two full runs (default none: all
# checks and the benchmark; e.g. --quick or --no-bench to save device time).
# Logs go to $OUT (default /tmp/kvw-cuda-out); the console gets the summaries.
set -u
ROOT=$(cd "${1:-$(dirname "$0")/..}" && pwd)
OUT=${OUT:-/tmp/kvw-cuda-out}
B=/tmp/kvw-cuda-build
mkdir -p "$OUT" "$B"
ARCH=${KVW_CUDA_GENCODE:--gencode=arch=compute_90a,code=sm_90a}

echo "== facts ($(date -u +%T))"
{
  nvidia-smi
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem \
    --format=csv
  nvcc --version
  g++ --version | head -1
  cmake --version | head -1
} >"$OUT/facts.log" 2>&1
grep -E "NVIDIA H|Driver Version|release|^name|, [0-9]+ MiB" "$OUT/facts.log" | head -8

# The stand-alone CMake build runs beside the nvcc build (16 cores; both are compile-bound).
# A fresh folder: a warm machine keeps /tmp, and a cache of another source tree stops CMake.
rm -rf "$B/cmake"
(timeout 240 cmake -S "$ROOT/src/kernels/cuda" -B "$B/cmake" -DCMAKE_BUILD_TYPE=Release &&
  timeout 240 cmake --build "$B/cmake" -j 8) >"$OUT/cmake.log" 2>&1 &
CMAKE_PID=$!

echo "== nvcc build ($(date -u +%T))"
FLAGS=(-std=c++20 -O3 -lineinfo "$ARCH" -Xcompiler=-Wall,-Wextra -I"$ROOT/src")
build() {  # $1: extra define or empty
  local extra=${1:-}
  local pids=() rc=0
  timeout 200 nvcc "${FLAGS[@]}" $extra -Xptxas -v -c "$ROOT/src/kernels/cuda/cuda_matmul.cu" \
    -o "$B/cuda_matmul.o" &
  pids+=($!)
  timeout 200 nvcc "${FLAGS[@]}" -Xptxas -v -c "$ROOT/src/kernels/cuda/cuda_attention.cu" \
    -o "$B/cuda_attention.o" &
  pids+=($!)
  timeout 200 nvcc "${FLAGS[@]}" $extra -c "$ROOT/tests/kernels/cuda/cuda_attention_test.cu" \
    -o "$B/attn_test.o" &
  pids+=($!)
  timeout 200 nvcc "${FLAGS[@]}" $extra -c "$ROOT/tests/kernels/cuda/cuda_matmul_test.cu" \
    -o "$B/test.o" || rc=1
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  [ $rc -eq 0 ] || return 1
  nvcc "${FLAGS[@]}" "$B/cuda_matmul.o" "$B/cuda_attention.o" "$B/test.o" \
    -o "$B/cuda_matmul_test" &&
    nvcc "${FLAGS[@]}" "$B/cuda_matmul.o" "$B/cuda_attention.o" "$B/attn_test.o" \
      -o "$B/cuda_attention_test"
}
SECONDS=0
if ! build >"$OUT/build.log" 2>&1; then
  echo "nvcc build FAILED ($SECONDS s):"
  grep -E "error|fatal" "$OUT/build.log" | head -20
  echo "retrying with -DKVW_CUDA_PLAIN_LOADS"
  if ! build -DKVW_CUDA_PLAIN_LOADS >>"$OUT/build.log" 2>&1; then
    grep -E "error|fatal" "$OUT/build.log" | tail -20
    wait $CMAKE_PID
    tail -20 "$OUT/cmake.log"
    exit 1
  fi
fi
echo "nvcc build ok in $SECONDS s; warnings: $(grep -c -i warning "$OUT/build.log")"
# Registers per kernel (ptxas -v) as a histogram, and any spills.
echo "registers: $(grep -oE 'Used [0-9]+ registers' "$OUT/build.log" | awk '{print $2}' | sort -n |
  uniq -c | awk '{printf "%s x%s, ", $2, $1}')"
grep -B2 -E "[1-9][0-9]* bytes spill stores" "$OUT/build.log" | grep -oE "(_Z[A-Za-z0-9_]+|[0-9]+ bytes spill stores)" |
  paste - - | head -5
cuobjdump --dump-sass "$B/cuda_matmul.o" >"$B/sass.txt" 2>&1
gzip -c "$B/sass.txt" >"$OUT/sass.txt.gz"
# Issue order in the main loop of two kernels (Q8_0 and F16, 1 token, 4 rows per warp): the
# weight loads (LDG.E.NA) should come before the first PRMT / HADD2 that uses them.
for k in E8ELi1ELi4E E1ELi1ELi4E; do
  awk -v k="$k" '/Function :/ {p = index($0, k) > 0} p' "$B/sass.txt" |
    grep -oE "(LDG[.A-Z0-9_]*|PRMT|HADD2.F32|SHFL.BFLY|FFMA|BRA)" | uniq -c | head -14 | tr '\n' ' '
  echo
done
echo "sass opcodes (whole object): $(grep -oE '(LDG|I2F|F2F|HADD2|PRMT|FFMA|SHFL)[.A-Z0-9_]*' "$B/sass.txt" |
  sort | uniq -c | sort -rn | awk '{printf "%s %s; ", $2, $1}')"

# Attention kernels: registers and spills per (head_dim, group) instantiation.
awk '/Compiling entry function/ {n = $0; sub(/.*attn_/, "", n); sub(/_kernel/, "", n);
  sub(/EPK.*/, "", n); sub(/ILi/, " d", n); sub(/ELi/, " g", n); sub(/EE.*/, "", n)}
  /spill stores/ && n != "" {s = $5 "B spill"} /Used [0-9]+ registers/ && n != "" {
  printf "%s: %s regs, %s; ", n, $5, s; n = ""}' "$OUT/build.log" | sed 's/ptxas info *: //g'
echo

echo "== attention test + benchmark ($(date -u +%T))"
timeout 240 "$B/cuda_attention_test" ${KVW_CUDA_ATTN_ARGS:-} >"$OUT/attn_test.log" 2>&1
ATTN_RC=$?
grep -E "^FAIL|^FATAL" "$OUT/attn_test.log" | head -20
grep -E "^device:|passed, .* failed" "$OUT/attn_test.log"
awk '/^copy bandwidth/,0' "$OUT/attn_test.log"
echo "attention test exit code $ATTN_RC"

echo "== matmul test + benchmark ($(date -u +%T))"
timeout 200 "$B/cuda_matmul_test" ${KVW_CUDA_MATMUL_ARGS:-} >"$OUT/test.log" 2>&1
TEST_RC=$?
grep -E "^FAIL|^FATAL" "$OUT/test.log" | head -20
grep -E "^device:|passed, .* failed|^PASS errors" "$OUT/test.log"
awk '/^copy bandwidth/,0' "$OUT/test.log"
echo "test exit code $TEST_RC"

# The same test built with other kernel flags (KVW_CUDA_COMPARE_FLAGS, e.g.
# "-DKVW_CUDA_PLAIN_LOADS" or "-DKVW_CUDA_LOADS_AHEAD=4"), for an A/B in the same run.
if [ -n "${KVW_CUDA_COMPARE_FLAGS:-}" ]; then
  echo "== variant $KVW_CUDA_COMPARE_FLAGS ($(date -u +%T))"
  if nvcc "${FLAGS[@]}" $KVW_CUDA_COMPARE_FLAGS -c "$ROOT/src/kernels/cuda/cuda_matmul.cu" \
    -o "$B/variant.o" >>"$OUT/build.log" 2>&1 &&
    nvcc "${FLAGS[@]}" "$B/variant.o" "$B/test.o" -o "$B/cuda_matmul_test_variant" >>"$OUT/build.log" 2>&1; then
    timeout 120 "$B/cuda_matmul_test_variant" >"$OUT/test_variant.log" 2>&1
    echo "variant exit code $?: $(grep -E 'passed, ' "$OUT/test_variant.log")"
    grep -E "^copy|^goal|^(q8_0|f16) +(32000x2048|5632x2048)" "$OUT/test_variant.log"
  fi
fi

echo "== compute-sanitizer memcheck --quick ($(date -u +%T))"
# --report-api-errors no: the test's deliberate 1 PiB cudaMalloc failure is not a memory error.
timeout 120 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 \
  "$B/cuda_matmul_test" --quick \
  >"$OUT/sanitizer.log" 2>&1
echo "sanitizer exit code $? ($(grep -E 'ERROR SUMMARY|passed, ' "$OUT/sanitizer.log" | tr '\n' ' '))"
grep -m5 -E "Invalid|out of bounds|Error" "$OUT/sanitizer.log"
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/cuda_attention_test" --quick \
  >"$OUT/attn_sanitizer.log" 2>&1
echo "attention memcheck exit code $? ($(grep -E 'ERROR SUMMARY|passed, ' "$OUT/attn_sanitizer.log" | tr '\n' ' '))"
grep -m5 -E "Invalid|out of bounds|Error" "$OUT/attn_sanitizer.log"
echo "== compute-sanitizer racecheck attention --tiny ($(date -u +%T))"
timeout 90 compute-sanitizer --tool racecheck --error-exitcode 9 "$B/cuda_attention_test" --tiny \
  >"$OUT/attn_racecheck.log" 2>&1
echo "attention racecheck exit code $? ($(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY|passed, ' "$OUT/attn_racecheck.log" | tr '\n' ' '))"
grep -m5 -E "hazard|Error" "$OUT/attn_racecheck.log"

echo "== cmake stand-alone build + ctest ($(date -u +%T))"
if wait $CMAKE_PID; then
  timeout 60 ctest --test-dir "$B/cmake" --output-on-failure >>"$OUT/cmake.log" 2>&1
  echo "ctest exit code $?: $(grep -E 'tests passed|tests failed' "$OUT/cmake.log")"
else
  echo "cmake build FAILED:"
  grep -E "Error|error" "$OUT/cmake.log" | head -10
fi
echo "== done ($(date -u +%T))"
[ $TEST_RC -eq 0 ] && exit $ATTN_RC
exit $TEST_RC
