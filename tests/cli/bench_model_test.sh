#!/usr/bin/env bash
# kvwarden bench-model as a user runs it: llama-bench's test names for every -p/-n/-d/-s
# combination, a markdown table with the machine's probes, a JSON report whose figures add up,
# and one-line errors for bad flags.
set -u
KVW="$1"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
"$KVW" make-model --out "$WORK/m.gguf" --seed 3 --context 512 2>/dev/null || fail "make-model"
"$KVW" bench-model -m "$WORK/m.gguf" -p 16,40 -n 4 -d 0,24 -s 1,3 -r 2 -t 2 -b 16 \
  --json "$WORK/r.json" >"$WORK/out" 2>"$WORK/err" || fail "bench-model: $(tail -3 "$WORK/err")"
for t in "pp16" "pp40" "tg4" "tg4 x3" "pp16 @ d24" "pp40 @ d24" "tg4 @ d24" "tg4 x3 @ d24"; do
  grep -q "| $t |" "$WORK/out" || fail "no row for $t: $(cat "$WORK/out")"
done
grep -q "tg4 @ d24: .* t/s (its 24-token context prefilled at .* t/s)" "$WORK/err" ||
  fail "no depth prefill rate: $(cat "$WORK/err")"
grep -q "weights: [0-9]* of [0-9]* MiB on 2 MiB pages ([0-9.]*%)" "$WORK/err" ||
  fail "no huge-page line: $(cat "$WORK/err")"
grep -q "^machine: .*read .* GB/s, triad .* GB/s, f32 FMA .* GFLOP/s.*int8 .* GOP/s" "$WORK/out" ||
  fail "no probe line: $(head -1 "$WORK/out")"
/usr/bin/python3 - "$WORK/r.json" <<'PY' || fail "JSON report"
import json, statistics, sys
r = json.load(open(sys.argv[1]))
m = r["machine"]
assert m["threads"] == 2 and m["read_gbs"] > 0 and m["triad_gbs"] > 0, m
assert m["fma_gflops"] > 0 and m["int8_gops"] > 0 and m["fma_gflops_1t"] > 0, m
(model,) = r["models"]
# The weights' memory and its share on 2 MiB pages (issue 29): whole huge pages, never more than
# the memory itself; how many THP grants is not asserted (it may be off).
wb, hb = model["weights_bytes"], model["weights_huge_page_bytes"]
assert wb > 0 and wb % (2 << 20) == 0 and wb >= model["model_size"], model
assert isinstance(hb, int) and 0 <= hb <= wb and hb % (2 << 20) == 0, model
tests = {x["test"]: x for x in model["results"]}
assert len(tests) == 8, list(tests)
for name, x in tests.items():
    assert len(x["samples_ts"]) == 2 and all(s > 0 for s in x["samples_ts"]), x
    assert abs(x["median_ts"] - statistics.median(x["samples_ts"])) < 1e-9 * x["median_ts"], x
    assert abs(x["avg_ts"] - statistics.mean(x["samples_ts"])) < 1e-9 * x["avg_ts"], x
    if x["n_prompt"] > 0:
        want = 2 * model["matmul_macs_per_token"] * x["median_ts"] / 1e9
        assert abs(x["matmul_gops"] - want) < 1e-6 * want, x
        assert x["pct_of_peak"] > 0, x
assert tests["tg4 x3 @ d24"]["streams"] == 3 and tests["tg4 x3 @ d24"]["n_depth"] == 24
assert tests["pp40"]["n_prompt"] == 40 and tests["pp40"]["n_gen"] == 0
# A depth test also times its context's own prefill, once per timed run; depth 0 has none.
for name, x in tests.items():
    fills = x["depth_fill_ts"]
    assert len(fills) == (2 if x["n_depth"] > 0 else 0) and all(f > 0 for f in fills), x
print("bench-model:", ", ".join(f"{k} {v['median_ts']:.0f} t/s" for k, v in tests.items()))
PY
# Bad input: one line naming the flag, exit 2.
"$KVW" bench-model -m "$WORK/m.gguf" -p 1,x --no-probes 2>"$WORK/e1"
[ $? -eq 2 ] && grep -q "comma-separated integers" "$WORK/e1" || fail "bad -p: $(cat "$WORK/e1")"
"$KVW" bench-model -m "$WORK/m.gguf" --kv-cache-dtype int3 --no-probes 2>"$WORK/e2"
[ $? -eq 2 ] && grep -q "kv-cache-dtype" "$WORK/e2" || fail "bad dtype: $(cat "$WORK/e2")"
"$KVW" bench-model -m "$WORK/missing.gguf" --no-probes 2>"$WORK/e3"
[ $? -ne 0 ] && grep -q "missing.gguf" "$WORK/e3" || fail "missing file: $(cat "$WORK/e3")"
echo PASS
