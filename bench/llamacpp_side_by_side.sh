#!/usr/bin/env bash
# kvwarden and llama.cpp side by side on the same GGUF files, in one run on one machine.
#
#   bench/llamacpp_side_by_side.sh LLAMA_CPP_DIR MODEL.gguf [MODEL.gguf ...]
#
# LLAMA_CPP_DIR is a llama.cpp source checkout outside this repository (never committed here);
# it is built once into LLAMA_CPP_DIR/build (-DGGML_NATIVE=ON) if its tools are missing.
# llama.cpp gets its best configuration on every tool: weights read into memory (`-mmp 0`,
# `--no-mmap`) as kvwarden does, and flash attention both off and on, the better median reported.
# Tests, with llama-bench's names:
#   ppP           llama-bench -p P            vs  kvwarden bench-model -p P
#   tgN           llama-bench -n N            vs  kvwarden bench-model -n N
#   tgN @ dD      llama-batched-bench -npp D -ntg N -npl 1   vs  bench-model -p 0 -n N -d D
#   tgG xS @ d32  llama-batched-bench -npp 32 -ntg G -npl S  vs  bench-model -p 0 -n G -d 32 -s S
#                 (S sequences decoding together: aggregate tokens/s)
# DEPTH=0 or STREAMS=0 leaves that test out.
# Environment: LCPP_BUILD (LLAMA_CPP_DIR/build: llama.cpp's build directory, built with
# -DGGML_NATIVE=ON), THREADS (nproc), REPS (3), PROMPTS (512,2048), GEN (128), DEPTH (4096),
# STREAMS (16), STREAM_GEN (64), KVW (build/apps/kvwarden/kvwarden), DEPTH_FA ("off on": the
# flash-attention settings llama-batched-bench runs the depth test with; "on" alone halves its
# time at 32k, where each setting prefills the whole depth),
# OUT (bench/results/side-by-side-<UTC time>: every raw JSON of the sitting, llama.cpp's system
# info and the table, kept so each figure in the README can be audited),
# LCPP_COMMIT (what to print as the llama.cpp version when LLAMA_CPP_DIR is not a git checkout).
# Prints a markdown table (median of REPS interleaved runs each, ratio = kvwarden / llama.cpp)
# and the machine line of kvwarden's bandwidth and compute probes from the same run.
set -euo pipefail
[ $# -ge 2 ] || { sed -n 2,26p "$0"; exit 2; }
LCPP=$(cd "$1" && pwd)
shift
cd "$(dirname "$0")/.."
THREADS=${THREADS:-$(nproc)}
REPS=${REPS:-3}
PROMPTS=${PROMPTS:-512,2048}
GEN=${GEN:-128}
DEPTH=${DEPTH:-4096}
STREAMS=${STREAMS:-16}
STREAM_GEN=${STREAM_GEN:-64}
DEPTH_FA=${DEPTH_FA:-off on}
KVW=${KVW:-build/apps/kvwarden/kvwarden}
OUT=${OUT:-bench/results/side-by-side-$(date -u +%Y%m%dT%H%MZ)}
mkdir -p "$OUT"

LCPP_BUILD=${LCPP_BUILD:-$LCPP/build}
BIN=$LCPP_BUILD/bin
if [ ! -x "$BIN/llama-bench" ] || [ ! -x "$BIN/llama-batched-bench" ]; then
  echo "building llama.cpp in $LCPP_BUILD ..." >&2
  cmake -S "$LCPP" -B "$LCPP_BUILD" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF >/dev/null
  cmake --build "$LCPP_BUILD" -j"$(nproc)" --target llama-bench llama-batched-bench >/dev/null
fi
# On a CPU that reports AMX, a -DGGML_NATIVE=ON build of llama.cpp d32676d77 crashed at its
# first prompt batch in this VM (AMX tiles; its decode ran at 33 tok/s on a 1.1B Q4_0 file);
# a build with the instruction sets named (AVX-512 F/BW/VL/VNNI/BF16, AVX2, FMA, F16C, no AMX)
# ran every test, decoding at 16 tok/s. Say which one the table is against.
if grep -q "^GGML_NATIVE:BOOL=OFF" "$LCPP_BUILD/CMakeCache.txt" 2>/dev/null; then
  LCPP_FLAGS="GGML_NATIVE=OFF: $(grep -oE '^GGML_(AVX[A-Z0-9_]*|FMA|F16C|AMX_[A-Z0-9]*):BOOL=ON' \
    "$LCPP_BUILD/CMakeCache.txt" | sed 's/:BOOL=ON//' | tr '\n' ' ')"
else
  LCPP_FLAGS="GGML_NATIVE=ON"
fi
echo "llama.cpp build: $LCPP_FLAGS" | tee "$OUT/lcpp_build_flags.txt" >&2
LCPP_COMMIT=${LCPP_COMMIT:-$(git -C "$LCPP" rev-parse --short HEAD 2>/dev/null || echo unknown)}

# Each repetition runs every test on both tools back to back, so a slow spell of a shared
# machine hits both columns alike instead of one tool's whole run.
i=0
for model in "$@"; do
  i=$((i + 1))
  echo "== $model" >&2
  : >"$OUT/$i.lcpp_batched.jsonl"
  for rep in $(seq "$REPS"); do
    probes=--no-probes
    [ "$i" -eq 1 ] && [ "$rep" -eq 1 ] && probes=
    "$BIN/llama-bench" -m "$model" -p "$PROMPTS" -n "$GEN" -t "$THREADS" -r 1 -mmp 0 -fa 0,1 \
      -o json >"$OUT/$i.lcpp_bench.$rep.json" 2>>"$OUT/$i.lcpp_bench.err"
    "$KVW" bench-model -m "$model" -p "$PROMPTS" -n "$GEN" -t "$THREADS" -r 1 $probes \
      --json "$OUT/$i.kvw_1.$rep.json" >/dev/null 2>>"$OUT/$i.kvw.err"
    if [ "$DEPTH" -gt 0 ]; then
      for fa in $DEPTH_FA; do
        "$BIN/llama-batched-bench" -m "$model" -c $((DEPTH + GEN + 16)) -b 2048 -ub 512 \
          -npp "$DEPTH" -ntg "$GEN" -npl 1 -t "$THREADS" -tb "$THREADS" -fa $fa --no-mmap \
          --output-format jsonl 2>/dev/null | grep '^{' >>"$OUT/$i.lcpp_batched.jsonl" ||
          echo "llama-batched-bench @ d$DEPTH -fa $fa printed no result (run $rep)" >&2
      done
      "$KVW" bench-model -m "$model" -p 0 -n "$GEN" -d "$DEPTH" -t "$THREADS" -r 1 --no-probes \
        --json "$OUT/$i.kvw_2.$rep.json" >/dev/null 2>>"$OUT/$i.kvw.err"
    fi
    # An if, not `[ ... ] && ...`: with DEPTH=0 or STREAMS=0 that list's status ended the loop
    # and, under set -e, the script before its table.
    if [ "$STREAMS" -gt 0 ]; then
      for fa in off on; do
        "$BIN/llama-batched-bench" -m "$model" -c $((STREAMS * (32 + STREAM_GEN) + 16)) -b 2048 \
          -ub 512 -npp 32 -ntg "$STREAM_GEN" -npl "$STREAMS" -t "$THREADS" -tb "$THREADS" \
          -fa $fa --no-mmap --output-format jsonl 2>/dev/null |
          grep '^{' >>"$OUT/$i.lcpp_batched.jsonl" ||
          echo "llama-batched-bench x$STREAMS -fa $fa printed no result (run $rep)" >&2
      done
      "$KVW" bench-model -m "$model" -p 0 -n "$STREAM_GEN" -d 32 -s "$STREAMS" -t "$THREADS" \
        -r 1 --no-probes --json "$OUT/$i.kvw_3.$rep.json" >/dev/null 2>>"$OUT/$i.kvw.err"
    fi
  done
done

# llama.cpp's own account of the machine and build, beside the raw JSON.
"$BIN/llama-bench" --list-devices >"$OUT/lcpp_system_info.txt" 2>&1 || true
python3 - "$OUT" "$#" "$LCPP_COMMIT" "$REPS" <<'PY' | tee "$OUT/table.md"
import json, os, statistics, sys
out, n, commit, reps = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
machine = None
shares = []  # (model, type, {prefill test: matmul GOP/s}) for the share of the compute probe
print(f"\nllama.cpp {commit} ({open(out + '/lcpp_build_flags.txt').read().strip()}) vs kvwarden; median of {reps} interleaved runs; "
      "ratio = kvwarden / llama.cpp\n")
print("| model | test | llama.cpp t/s (flash attn) | kvwarden t/s | ratio |")
print("|---|---|---|---|---|")
for i in range(1, n + 1):
    runs = {}  # (test, flash attention) -> samples; each test keeps its better setting
    for rep in range(1, reps + 1):
        for r in json.load(open(f"{out}/{i}.lcpp_bench.{rep}.json")):
            name = f"pp{r['n_prompt']}" if r["n_prompt"] > 0 else f"tg{r['n_gen']}"
            runs.setdefault((name, str(r.get("flash_attn"))), []).extend(r["samples_ts"])
    for line in open(f"{out}/{i}.lcpp_batched.jsonl"):
        r = json.loads(line)
        name = (f"tg{r['tg']} @ d{r['pp']}" if r["pl"] == 1 else
                f"tg{r['tg']} x{r['pl']} @ d{r['pp']}")
        runs.setdefault((name, str(r.get("flash_attn"))), []).append(r["speed_tg"])
        if r["pl"] == 1:  # the depth's own prefill: a prompt of that length from nothing
            runs.setdefault((f"pp{r['pp']} (depth fill)", str(r.get("flash_attn"))),
                            []).append(r["speed_pp"])
    lc, lc_fa = {}, {}
    for (name, fa), v in runs.items():
        if statistics.median(v) > lc.get(name, 0):
            lc[name], lc_fa[name] = statistics.median(v), fa
    ours, gops, model = {}, {}, None
    for part in (1, 2, 3):
        for rep in range(1, reps + 1):
            path = f"{out}/{i}.kvw_{part}.{rep}.json"
            if not os.path.exists(path):  # DEPTH=0 / STREAMS=0 skipped that test
                continue
            rep_json = json.load(open(path))
            if rep_json["machine"]["read_gbs"] > 0:
                machine = machine or rep_json["machine"]
            (model,) = rep_json["models"]
            for r in model["results"]:
                ours.setdefault(r["test"], []).append(r["median_ts"])
                if r["streams"] == 1 and r.get("depth_fill_ts"):
                    ours.setdefault(f"pp{r['n_depth']} (depth fill)", []).extend(r["depth_fill_ts"])
                if r.get("matmul_gops", 0) > 0:
                    gops.setdefault(r["test"], []).append(r["matmul_gops"])
    name = f"{os.path.basename(model['model_filename'])} ({model['model_type']})"
    for test, samples in ours.items():
        kv, theirs = statistics.median(samples), lc.get(test)
        ratio = f"{kv / theirs:.2f}" if theirs else "n/a"
        fa = lc_fa.get(test, "?")
        print(f"| {name} | {test} | {theirs or float('nan'):.2f} ({fa}) | {kv:.2f} | {ratio} |")
    shares.append((name, model["model_type"], {t: statistics.median(g) for t, g in gops.items()}))
if machine:
    m = machine
    print(f"\nmachine: {m['cpu']} [{m['features']}], {m['threads']} threads; read "
          f"{m['read_gbs']:.1f} GB/s, triad {m['triad_gbs']:.1f} GB/s; f32 FMA "
          f"{m['fma_gflops']:.0f} GFLOP/s ({m['fma_kind']}); int8 {m['int8_gops']:.0f} GOP/s "
          f"({m['int8_kind']})")
    # Prefill's matmul work per second against the probe of its kind (float types: FMA).
    for name, wtype, by_test in shares:
        peak = m["fma_gflops"] if wtype in ("f32", "f16", "bf16") else m["int8_gops"]
        cells = ", ".join(f"{t} {g:.0f} GOP/s = {100 * g / peak:.0f}%"
                          for t, g in by_test.items())
        if cells and peak > 0:
            print(f"prefill share of the probe, {name}: {cells}")
PY
