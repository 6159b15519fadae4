#!/usr/bin/env bash
# tools/cuda_device_check.sh: everything the CUDA backend's GPU check does, in one run on a
# machine with nvcc and a GPU but none of the project's dependencies: print the GPU and the
# toolchain, build src/kernels/cuda and its test with nvcc directly (sm_90a) and, in parallel,
# through its stand-alone CMake project, then run the correctness test + benchmark, the small
# correctness test under compute-sanitizer memcheck and ctest of the CMake build.
#   usage: tools/cuda_device_check.sh [ROOT]   ROOT holds src/ and tests/ (default: this repo)
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
(timeout 240 cmake -S "$ROOT/src/kernels/cuda" -B "$B/cmake" -DCMAKE_BUILD_TYPE=Release &&
  timeout 240 cmake --build "$B/cmake" -j 8) >"$OUT/cmake.log" 2>&1 &
CMAKE_PID=$!

echo "== nvcc build ($(date -u +%T))"
FLAGS=(-std=c++20 -O3 -lineinfo "$ARCH" -Xcompiler=-Wall,-Wextra -I"$ROOT/src")
build() {  # $1: extra define or empty
  local extra=${1:-}
  timeout 200 nvcc "${FLAGS[@]}" $extra -Xptxas -v -c "$ROOT/src/kernels/cuda/cuda_matmul.cu" \
    -o "$B/cuda_matmul.o" &
  local lib=$!
  timeout 200 nvcc "${FLAGS[@]}" $extra -c "$ROOT/tests/kernels/cuda/cuda_matmul_test.cu" \
    -o "$B/test.o"
  local test_rc=$?
  wait $lib
  local lib_rc=$?
  [ $test_rc -eq 0 ] && [ $lib_rc -eq 0 ] || return 1
  nvcc "${FLAGS[@]}" "$B/cuda_matmul.o" "$B/test.o" -o "$B/cuda_matmul_test"
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

echo "== test + benchmark ($(date -u +%T))"
timeout 200 "$B/cuda_matmul_test" >"$OUT/test.log" 2>&1
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

echo "== cmake stand-alone build + ctest ($(date -u +%T))"
if wait $CMAKE_PID; then
  timeout 60 ctest --test-dir "$B/cmake" --output-on-failure >>"$OUT/cmake.log" 2>&1
  echo "ctest exit code $?: $(grep -E 'tests passed|tests failed' "$OUT/cmake.log")"
else
  echo "cmake build FAILED:"
  grep -E "Error|error" "$OUT/cmake.log" | head -10
fi
echo "== done ($(date -u +%T))"
exit $TEST_RC
