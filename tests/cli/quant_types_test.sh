#!/usr/bin/env bash
# Model files whose matrices are Q2_K, Q3_K, IQ4_XS or MXFP4 (the types real files carry that
# kvwarden added last) load and generate as a user runs them: make-model writes each type
# (inspect shows it), generate gives the same greedy text twice and on every kernel table the
# CPU has (the dequantised matmul is bit-identical across KVW_ISA tables), and a file with a
# type kvwarden lacks is refused with one line naming the tensor and the type number.
set -u
KVW="$1"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

isas=(ref)
flags=$(grep -o -w 'avx2\|avx512f\|avx512bw\|avx512vl\|fma\|f16c' /proc/cpuinfo | sort -u | tr '\n' ' ')
has() { case " $flags " in *" $1 "*) return 0 ;; esac; return 1; }
has avx2 && has fma && has f16c && isas+=(avx2)
has avx512f && has avx512bw && has avx512vl && has fma && has f16c && isas+=(avx512)

for t in q2_K q3_K iq4_xs mxfp4; do
  # Rows of 256 (and head_dim 64 x 4 heads = 256): whole super-blocks for the K-quants.
  "$KVW" make-model --out "$WORK/$t.gguf" --dim 256 --ffn 512 --heads 4 --kv-heads 2 \
    --weight-type "$t" --seed 5 2>"$WORK/err" || fail "make-model $t: $(cat "$WORK/err")"
  "$KVW" inspect "$WORK/$t.gguf" | grep -q " blk.0.ffn_down.weight *$t " ||
    fail "$t: inspect does not show the type"
  want=""
  for isa in "${isas[@]}"; do
    got=$(KVW_ISA=$isa "$KVW" generate -m "$WORK/$t.gguf" -p "the cat" -n 24 --temperature 0 \
      2>"$WORK/err") || fail "$t on $isa: $(cat "$WORK/err")"
    [ -n "$got" ] || fail "$t on $isa: no text"
    grep -q "decode: 24 tokens" "$WORK/err" || fail "$t on $isa: $(cat "$WORK/err")"
    [ -z "$want" ] && want=$got
    [ "$got" = "$want" ] || fail "$t: $isa text differs from ${isas[0]}'s"
  done
  echo "$t: ${isas[*]} agree: $(printf %s "$want" | head -c 60)"
done

# A type kvwarden lacks (IQ2_XXS, 16): patch the first tensor's type field of a q8_0 file.
"$KVW" make-model --out "$WORK/bad.gguf" --weight-type q8_0 --seed 5 2>/dev/null || fail "make-model"
python3 - "$WORK/bad.gguf" <<'PY' || fail "patching the type"
import struct, sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
# Header: magic, version, n_tensors (u64), n_kv (u64); then n_kv key/values; then tensor infos.
n_tensors, n_kv = struct.unpack_from("<QQ", b, 8)
off = 24
def skip_str(o):
    (n,) = struct.unpack_from("<Q", b, o)
    return o + 8 + n
sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
def skip_val(o, t):
    if t == 8:
        return skip_str(o)
    if t == 9:
        et, n = struct.unpack_from("<IQ", b, o)
        o += 12
        for _ in range(n):
            o = skip_val(o, et)
        return o
    return o + sizes[t]
for _ in range(n_kv):
    off = skip_str(off)
    (t,) = struct.unpack_from("<I", b, off)
    off = skip_val(off + 4, t)
name_end = skip_str(off)
name = bytes(b[off + 8:name_end]).decode()
(n_dims,) = struct.unpack_from("<I", b, name_end)
type_off = name_end + 4 + 8 * n_dims
struct.pack_into("<I", b, type_off, 16)
open(p, "wb").write(b)
print(name)
PY
"$KVW" generate -m "$WORK/bad.gguf" -p hi -n 4 2>"$WORK/err"; rc=$?
[ $rc -eq 1 ] && [ "$(wc -l <"$WORK/err")" -eq 1 ] && grep -q "unknown type 16" "$WORK/err" &&
  grep -q "tensor '" "$WORK/err" || fail "unknown type: rc=$rc $(cat "$WORK/err")"
echo "quant types CLI: all checks passed"
