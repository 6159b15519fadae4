// kernels/x86/avx2.cc: AVX2/FMA/F16C activation quantisation and matmul for float, Q8_0 and
// Q4_0 weights (K-quants live in avx2_kquants.cc), and the packed Q8_0/Q4_0 GEMM without VNNI.
// Compiled with -mavx2 -mfma -mf16c; reached only through the table dispatch.cc picks after
// checking CPUID.
//
// Batch invariance: each (token, row) dot product is one accumulator fed block by block in
// order by the same Ops::fma, then reduced by the same Ops::finish, in every tile shape (see
// matmul_tile.h). Threads split rows only.
#include <cstring>

#include "gguf/quant_blocks.h"
#include "kernels/kernels_internal.h"
#include "kernels/x86/avx2_kernels.h"
#include "kernels/x86/avx2_util.h"
#include "kernels/x86/matmul_tile.h"
#include "kernels/x86/packed_tile.h"

namespace kvw::kernels::avx2 {
namespace {

using x86::MatmulArgs;

template <class T>
KVW_INLINE const T* as(const uint8_t* p) {
  return reinterpret_cast<const T*>(p);
}

// Packs 32 int32 lanes (already within int8 range) into 32 int8 in element order.
KVW_INLINE __m256i pack_i32x32(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_packs_epi32(a, b);
  const __m256i cd = _mm256_packs_epi32(c, d);
  const __m256i q = _mm256_packs_epi16(ab, cd);
  // packs interleave 128-bit lanes: undo it with a dword permutation.
  return _mm256_permutevar8x32_epi32(q, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

KVW_INLINE __m256i round_to_i32(__m256 v, __m256 id) {
  return _mm256_cvtps_epi32(
      _mm256_round_ps(_mm256_mul_ps(v, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

KVW_INLINE float amax_of(const float* x, int n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8)
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
  return x86::hmax(m);
}

// Same arithmetic as ref::quantize_row_q8_0 lane by lane, hence bit-identical output.
void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK8_0; ++b, x += kQK8_0) {
    const float d = amax_of(x, kQK8_0) / 127.0f;
    const __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
    y[b].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    const __m256i q = pack_i32x32(
        round_to_i32(_mm256_loadu_ps(x), id), round_to_i32(_mm256_loadu_ps(x + 8), id),
        round_to_i32(_mm256_loadu_ps(x + 16), id), round_to_i32(_mm256_loadu_ps(x + 24), id));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[b].qs), q);
  }
}

void quantize_row_q8_k(const float* x, BlockQ8_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    const float d = amax_of(x, kQK_K) / 127.0f;
    const __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
    y[b].d = d;
    for (int j = 0; j < kQK_K; j += 32) {
      __m256i q = pack_i32x32(round_to_i32(_mm256_loadu_ps(x + j), id),
                              round_to_i32(_mm256_loadu_ps(x + j + 8), id),
                              round_to_i32(_mm256_loadu_ps(x + j + 16), id),
                              round_to_i32(_mm256_loadu_ps(x + j + 24), id));
      q = _mm256_max_epi8(q, _mm256_set1_epi8(-127));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[b].qs + j), q);
      // Group sums of 16: widen to int16 and add adjacent pairs down to one sum per group.
      const __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), q);
      const __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
      alignas(32) int32_t s[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(s), s32);
      y[b].bsums[j / 16] = (int16_t)(s[0] + s[1] + s[2] + s[3]);
      y[b].bsums[j / 16 + 1] = (int16_t)(s[4] + s[5] + s[6] + s[7]);
    }
  }
}

// Float weights x f32 activations, 8 elements per block; a scalar tail covers n_in % 8.
template <class Loader>
struct FloatOps {
  static constexpr int kBlockElems = 8;
  static constexpr int kBlockBytes = 8 * Loader::kElemBytes;
  static constexpr int kRows = 4;
  static constexpr int kTokens = 3;  // 12 accumulators + weight + activation: 14 of 16 ymm
  using Acc = __m256;
  using W = __m256;
  using X = __m256;
  static KVW_INLINE Acc zero() { return _mm256_setzero_ps(); }
  static KVW_INLINE W load_w(const uint8_t* row, int64_t b) { return Loader::load8(row, 8 * b); }
  static KVW_INLINE X load_x(const uint8_t* x, int64_t b) {
    return _mm256_loadu_ps(as<float>(x) + 8 * b);
  }
  static KVW_INLINE void fma(Acc& acc, W w, X x) { acc = _mm256_fmadd_ps(w, x, acc); }
  static KVW_INLINE float finish(Acc acc, const uint8_t* w, const uint8_t* x, const MatmulArgs& a) {
    float sum = x86::hsum(acc);
    for (int64_t i = a.nb * 8; i < a.n_in; ++i) sum += Loader::load1(w, i) * as<float>(x)[i];
    return sum;
  }
};

struct F32Loader {
  static constexpr int kElemBytes = 4;
  static KVW_INLINE __m256 load8(const uint8_t* row, int64_t i) {
    return _mm256_loadu_ps(as<float>(row) + i);
  }
  static KVW_INLINE float load1(const uint8_t* row, int64_t i) { return as<float>(row)[i]; }
};
struct F16Loader {
  static constexpr int kElemBytes = 2;
  static KVW_INLINE __m256 load8(const uint8_t* row, int64_t i) {
    return x86::load_f16x8(as<uint16_t>(row) + i);
  }
  static KVW_INLINE float load1(const uint8_t* row, int64_t i) {
    return x86::f16_scalar(as<uint16_t>(row)[i]);
  }
};
struct BF16Loader {
  static constexpr int kElemBytes = 2;
  static KVW_INLINE __m256 load8(const uint8_t* row, int64_t i) {
    return x86::load_bf16x8(as<uint16_t>(row) + i);
  }
  static KVW_INLINE float load1(const uint8_t* row, int64_t i) {
    return x86::bf16_scalar(as<uint16_t>(row)[i]);
  }
};

// Q8_0 / Q4_0 weights x Q8_0 activations: exact int32 block dot, then
// acc += (d_w * d_x) * float(dot) per block, as ggml_vec_dot_q8_0_q8_0.
struct QuantW {
  __m256i abs;  // |q| as unsigned bytes
  __m256i q;    // signed quants, supplies the sign
  float d;
};
struct QuantX {
  __m256i q;
  float d;
};

template <class Unpack>
struct Q8Ops {
  static constexpr int kBlockElems = 32;
  static constexpr int kBlockBytes = Unpack::kBlockBytes;
  static constexpr int kRows = 4;
  static constexpr int kTokens = 2;  // 8 accumulators + 2 weight registers + temporaries
  using Acc = __m256;
  using W = QuantW;
  using X = QuantX;
  static KVW_INLINE Acc zero() { return _mm256_setzero_ps(); }
  static KVW_INLINE W load_w(const uint8_t* row, int64_t b) {
    const __m256i q = Unpack::quants(row, b);
    return {_mm256_abs_epi8(q), q, x86::f16_scalar(Unpack::scale(row, b))};
  }
  static KVW_INLINE X load_x(const uint8_t* x, int64_t b) {
    const BlockQ8_0& xb = as<BlockQ8_0>(x)[b];
    return {x86::load_i8x32(xb.qs), x86::f16_scalar(xb.d)};
  }
  static KVW_INLINE void fma(Acc& acc, const W& w, const X& x) {
    const __m256 p = _mm256_cvtepi32_ps(x86::dot_i8x32(w.abs, w.q, x.q));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(w.d * x.d), p, acc);
  }
  static KVW_INLINE float finish(Acc acc, const uint8_t*, const uint8_t*, const MatmulArgs&) {
    return x86::hsum(acc);
  }
};

struct Q8_0Unpack {
  static constexpr int kBlockBytes = sizeof(BlockQ8_0);
  static KVW_INLINE __m256i quants(const uint8_t* row, int64_t b) {
    return x86::load_i8x32(as<BlockQ8_0>(row)[b].qs);
  }
  static KVW_INLINE uint16_t scale(const uint8_t* row, int64_t b) {
    return as<BlockQ8_0>(row)[b].d;
  }
};

// Low nibbles are elements 0..15, high nibbles 16..31; values q - 8.
struct Q4_0Unpack {
  static constexpr int kBlockBytes = sizeof(BlockQ4_0);
  static KVW_INLINE __m256i quants(const uint8_t* row, int64_t b) {
    const __m128i bytes =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(as<BlockQ4_0>(row)[b].qs));
    const __m256i both = _mm256_set_m128i(_mm_srli_epi16(bytes, 4), bytes);
    return _mm256_sub_epi8(_mm256_and_si256(both, _mm256_set1_epi8(0x0F)), _mm256_set1_epi8(8));
  }
  static KVW_INLINE uint16_t scale(const uint8_t* row, int64_t b) {
    return as<BlockQ4_0>(row)[b].d;
  }
};

// Packed GEMM without VNNI: maddubs + madd (packed_tile.h).
struct DotMaddubs {
  static constexpr bool kVnni = false;
};

template <class Ops>
void run_rows(MatmulArgs a, RowRange rows) {
  a.nb = a.n_in / Ops::kBlockElems;
  x86::matmul_rows<Ops>(a, rows.begin, rows.end);
}

}  // namespace

void quantize_act(GgmlType wtype, const float* x, int64_t n_tokens, int64_t n_in, void* dst,
                  int ith, int nth) {
  const RowRange tokens = split_range(n_tokens, ith, nth, 1);
  const int64_t row_bytes = act_row_bytes(wtype, n_in);
  const GgmlType format = act_type(wtype);
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t t = tokens.begin; t < tokens.end; ++t) {
    const float* xt = x + t * n_in;
    uint8_t* yt = out + t * row_bytes;
    if (format == GgmlType::kQ8_0) {
      quantize_row_q8_0(xt, reinterpret_cast<BlockQ8_0*>(yt), n_in);
      write_act_extras(yt, n_in / kQK8_0);
    } else if (format == GgmlType::kQ8_K) {
      quantize_row_q8_k(xt, reinterpret_cast<BlockQ8_K*>(yt), n_in);
    } else {
      std::memcpy(yt, xt, n_in * sizeof(float));
    }
  }
}

// 8 rows x 4 tokens: 4 float + 4 int32 accumulators, the weights, |weights|, one broadcast and
// two constants: 14 of 16 ymm registers.
void matmul_packed(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in, const void* xq,
                   int64_t n_tokens, float* y, int ith, int nth, void* scratch) {
  x86::matmul_packed<DotMaddubs, 4, 3>(wtype, w, n_rows, n_in, xq, n_tokens, y, ith, nth, scratch);
}

void matmul(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in, const void* xq,
            int64_t n_tokens, float* y, int ith, int nth) {
  if (wtype == GgmlType::kMXFP4)
    return matmul_gguf(wtype, w, n_rows, n_in, xq, n_tokens, y, ith, nth);
  if (is_dequant_type(wtype)) {
    return avx2::matmul_dequant(wtype, w, n_rows, n_in, static_cast<const float*>(xq), n_tokens, y,
                                ith, nth);
  }
  const MatmulGeometry g = matmul_geometry(wtype, n_in);
  const RowRange rows = split_range(n_rows, ith, nth, kRowAlign);
  if (rows.begin >= rows.end || n_tokens <= 0) return;
  const MatmulArgs a = {static_cast<const uint8_t*>(w),  g.w_row_bytes, n_rows,   n_in, 0,
                        static_cast<const uint8_t*>(xq), g.x_row_bytes, n_tokens, y};
  MatmulArgs k = a;  // K-quants: blocks are 256-element super-blocks
  k.nb = n_in / kQK_K;
  switch (wtype) {
    case GgmlType::kF32:
      return run_rows<FloatOps<F32Loader>>(a, rows);
    case GgmlType::kF16:
      return run_rows<FloatOps<F16Loader>>(a, rows);
    case GgmlType::kBF16:
      return run_rows<FloatOps<BF16Loader>>(a, rows);
    case GgmlType::kQ8_0:
      return run_rows<Q8Ops<Q8_0Unpack>>(a, rows);
    case GgmlType::kQ4_0:
      return run_rows<Q8Ops<Q4_0Unpack>>(a, rows);
    case GgmlType::kQ4_K:
      return matmul_rows_q4_k(k, rows.begin, rows.end);
    case GgmlType::kQ5_K:
      return matmul_rows_q5_k(k, rows.begin, rows.end);
    case GgmlType::kQ6_K:
      return matmul_rows_q6_k(k, rows.begin, rows.end);
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kIQ4_NL:
      // The matrices left unpacked (fewer than 8 rows; the rest run matmul_packed): scalar,
      // with the packed arithmetic's bits.
      return ref_table().matmul(wtype, w, n_rows, n_in, xq, n_tokens, y, ith, nth);
    case GgmlType::kQ2_K:  // matmul_dequant above
    case GgmlType::kQ3_K:
    case GgmlType::kIQ4_XS:
    case GgmlType::kMXFP4:  // matmul_gguf above
    case GgmlType::kQ8_K:
      break;  // rejected by matmul_geometry
  }
}

}  // namespace kvw::kernels::avx2
