// kernels/x86/avx512.cc: the "avx512" KernelTable. Specialises the bandwidth-critical matmuls
// (F32, F16, BF16, Q8_0, Q4_0) with 512-bit registers, takes its attention from
// attention_avx512.cc and reuses the AVX2 entries for the rest.
// Compiled with -mavx512f -mavx512bw -mavx512vl (+ AVX2 flags); nothing in this file may run,
// not even the table's static initialiser, unless dispatch.cc saw AVX-512 in CPUID.
//
// Batch invariance as in avx2.cc: one accumulator per (token, row), fed in block order by the
// same Ops::fma, reduced by the same Ops::finish in every tile shape (matmul_tile.h).
#include "gguf/quant_blocks.h"
#include "kernels/kernels_internal.h"
#include "kernels/x86/avx2_kernels.h"
#include "kernels/x86/avx2_util.h"
#include "kernels/x86/matmul_tile.h"

namespace kvw::kernels::avx512 {
namespace {

using x86::MatmulArgs;

template <class T>
KVW_INLINE const T* as(const uint8_t* p) {
  return reinterpret_cast<const T*>(p);
}

struct F32Loader {
  static constexpr int kElemBytes = 4;
  static KVW_INLINE __m512 load16(const uint8_t* row, int64_t i) {
    return _mm512_loadu_ps(as<float>(row) + i);
  }
  static KVW_INLINE float load1(const uint8_t* row, int64_t i) { return as<float>(row)[i]; }
};
struct F16Loader {
  static constexpr int kElemBytes = 2;
  static KVW_INLINE __m512 load16(const uint8_t* row, int64_t i) {
    return _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(as<uint16_t>(row) + i)));
  }
  static KVW_INLINE float load1(const uint8_t* row, int64_t i) {
    return x86::f16_scalar(as<uint16_t>(row)[i]);
  }
};
struct BF16Loader {
  static constexpr int kElemBytes = 2;
  static KVW_INLINE __m512 load16(const uint8_t* row, int64_t i) {
    const __m512i u = _mm512_cvtepu16_epi32(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(as<uint16_t>(row) + i)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
  }
  static KVW_INLINE float load1(const uint8_t* row, int64_t i) {
    return x86::bf16_scalar(as<uint16_t>(row)[i]);
  }
};

// Float weights x f32 activations, 16 elements per block, scalar tail for n_in % 16.
template <class Loader>
struct FloatOps {
  static constexpr int kBlockElems = 16;
  static constexpr int kBlockBytes = 16 * Loader::kElemBytes;
  static constexpr int kRows = 4;
  static constexpr int kTokens = 4;  // 16 of 32 zmm registers as accumulators
  using Acc = __m512;
  using W = __m512;
  using X = __m512;
  static KVW_INLINE Acc zero() { return _mm512_setzero_ps(); }
  static KVW_INLINE W load_w(const uint8_t* row, int64_t b) { return Loader::load16(row, 16 * b); }
  static KVW_INLINE X load_x(const uint8_t* x, int64_t b) {
    return _mm512_loadu_ps(as<float>(x) + 16 * b);
  }
  static KVW_INLINE void fma(Acc& acc, W w, X x) { acc = _mm512_fmadd_ps(w, x, acc); }
  static KVW_INLINE float finish(Acc acc, const uint8_t* w, const uint8_t* x, const MatmulArgs& a) {
    float sum = _mm512_reduce_add_ps(acc);
    for (int64_t i = a.nb * 16; i < a.n_in; ++i) sum += Loader::load1(w, i) * as<float>(x)[i];
    return sum;
  }
};

// Q8_0 / Q4_0 weights x Q8_0 activations, two 32-element blocks per 512-bit step; an odd last
// block is finished with 256-bit ops in finish(). Per block: exact int32 dot, then
// acc += (d_w * d_x) * float(dot), lanes 0..7 for the even block and 8..15 for the odd one.
struct QuantW {
  __m512i abs;
  __m512i q;
  float d0;
  float d1;
};
struct QuantX {
  __m512i q;
  float d0;
  float d1;
};

KVW_INLINE __m512i join(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

KVW_INLINE __m256i q4_0_quants(const BlockQ4_0& blk) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(bytes, 4), bytes);
  return _mm256_sub_epi8(_mm256_and_si256(both, _mm256_set1_epi8(0x0F)), _mm256_set1_epi8(8));
}

struct Q8_0Unpack {
  using Block = BlockQ8_0;
  static KVW_INLINE __m256i quants(const Block& blk) { return x86::load_i8x32(blk.qs); }
};
struct Q4_0Unpack {
  using Block = BlockQ4_0;
  static KVW_INLINE __m256i quants(const Block& blk) { return q4_0_quants(blk); }
};

template <class Unpack>
struct Q8Ops {
  using Block = typename Unpack::Block;
  static constexpr int kBlockElems = 64;
  static constexpr int kBlockBytes = 2 * sizeof(Block);
  static constexpr int kRows = 4;
  static constexpr int kTokens = 4;
  using Acc = __m512;
  using W = QuantW;
  using X = QuantX;
  static KVW_INLINE Acc zero() { return _mm512_setzero_ps(); }
  static KVW_INLINE W load_w(const uint8_t* row, int64_t b) {
    const Block* blk = as<Block>(row) + 2 * b;
    const __m512i q = join(Unpack::quants(blk[0]), Unpack::quants(blk[1]));
    return {_mm512_abs_epi8(q), q, x86::f16_scalar(blk[0].d), x86::f16_scalar(blk[1].d)};
  }
  static KVW_INLINE X load_x(const uint8_t* x, int64_t b) {
    const BlockQ8_0* xb = as<BlockQ8_0>(x) + 2 * b;
    return {join(x86::load_i8x32(xb[0].qs), x86::load_i8x32(xb[1].qs)), x86::f16_scalar(xb[0].d),
            x86::f16_scalar(xb[1].d)};
  }
  static KVW_INLINE void fma(Acc& acc, const W& w, const X& x) {
    // x with the sign of w (w == 0 lanes multiply |w| = 0 anyway).
    const __m512i sx =
        _mm512_mask_sub_epi8(x.q, _mm512_movepi8_mask(w.q), _mm512_setzero_si512(), x.q);
    const __m512i p32 = _mm512_madd_epi16(_mm512_maddubs_epi16(w.abs, sx), _mm512_set1_epi16(1));
    const __m512 d =
        _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(w.d0 * x.d0), _mm512_set1_ps(w.d1 * x.d1));
    acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p32), acc);
  }
  static KVW_INLINE float finish(Acc acc, const uint8_t* w, const uint8_t* x, const MatmulArgs& a) {
    float sum = _mm512_reduce_add_ps(acc);
    if (a.nb * 2 * 32 < a.n_in) {  // odd number of 32-element blocks
      const Block& wb = as<Block>(w)[2 * a.nb];
      const BlockQ8_0& xb = as<BlockQ8_0>(x)[2 * a.nb];
      const __m256i q = Unpack::quants(wb);
      const __m256i dot = x86::dot_i8x32(_mm256_abs_epi8(q), q, x86::load_i8x32(xb.qs));
      const __m256 p = _mm256_mul_ps(_mm256_set1_ps(x86::f16_scalar(wb.d) * x86::f16_scalar(xb.d)),
                                     _mm256_cvtepi32_ps(dot));
      sum += x86::hsum(p);
    }
    return sum;
  }
};

template <class Ops>
void run_rows(MatmulArgs a, RowRange rows) {
  a.nb = a.n_in / Ops::kBlockElems;
  x86::matmul_rows<Ops>(a, rows.begin, rows.end);
}

void matmul(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in, const void* xq,
            int64_t n_tokens, float* y, int ith, int nth) {
  switch (wtype) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_0:
      break;
    case GgmlType::kQ2_K:
    case GgmlType::kQ3_K:
    case GgmlType::kIQ4_XS:
      return matmul_dequant(wtype, w, n_rows, n_in, static_cast<const float*>(xq), n_tokens, y, ith,
                            nth);
    default:  // K-quants; MXFP4 (matmul_gguf)
      return avx2::matmul(wtype, w, n_rows, n_in, xq, n_tokens, y, ith, nth);
  }
  const MatmulGeometry g = matmul_geometry(wtype, n_in);
  const RowRange rows = split_range(n_rows, ith, nth, kRowAlign);
  if (rows.begin >= rows.end || n_tokens <= 0) return;
  const MatmulArgs a = {static_cast<const uint8_t*>(w),  g.w_row_bytes, n_rows,   n_in, 0,
                        static_cast<const uint8_t*>(xq), g.x_row_bytes, n_tokens, y};
  switch (wtype) {
    case GgmlType::kF32:
      return run_rows<FloatOps<F32Loader>>(a, rows);
    case GgmlType::kF16:
      return run_rows<FloatOps<F16Loader>>(a, rows);
    case GgmlType::kBF16:
      return run_rows<FloatOps<BF16Loader>>(a, rows);
    case GgmlType::kQ8_0:
      return run_rows<Q8Ops<Q8_0Unpack>>(a, rows);
    default:
      return run_rows<Q8Ops<Q4_0Unpack>>(a, rows);
  }
}

// Float types on the 512-bit float GEMM, Q8_0 / Q4_0 on the AVX2 packed tiles.
void matmul_packed(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in, const void* xq,
                   int64_t n_tokens, float* y, int ith, int nth, void* scratch) {
  if (is_float_type(wtype)) {
    return matmul_packed_float(wtype, w, n_rows, n_in, static_cast<const float*>(xq), n_tokens, y,
                               ith, nth, scratch);
  }
  avx2::matmul_packed(wtype, w, n_rows, n_in, xq, n_tokens, y, ith, nth, scratch);
}

}  // namespace
}  // namespace kvw::kernels::avx512

namespace kvw::kernels {

const KernelTable& avx512_table() {
  static const KernelTable table = {
      .isa = "avx512",
      .quantize_act = avx2::quantize_act,
      .matmul = avx512::matmul,
      .packs = packs,
      .pack = pack,
      .matmul_packed = avx512::matmul_packed,
      .rmsnorm = avx2::rmsnorm,
      .silu_mul = avx2::silu_mul,
      .gelu_tanh_mul = avx2::gelu_tanh_mul,
      .softcap = avx2::softcap,
      .attention = attention_of<avx512::attention_segment>,
      .attention_segment = avx512::attention_segment,
      .kv_store = avx2::kv_store,
  };
  return table;
}

}  // namespace kvw::kernels
