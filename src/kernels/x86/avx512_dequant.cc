// kernels/x86/avx512_dequant.cc: matmul_dequant (kernels/dequant_matmul.cc) for Q2_K, Q3_K and
// IQ4_XS in AVX-512, bit for bit (unpacked 32 elements at a time by x86/lowbit_unpack.h). Compiled
// with the AVX-512 flags and -ffp-contract=off; the avx512 and avx512vnni tables' matmul routes
// these types here (the AVX2 tables: avx2_dequant.cc).
//
// Why it is bit-identical to the scalar kernel: a weight is the same float expression
// (d * level, minus the min for Q2_K) with the fp16 scale converted exactly by F16C,
// and each of the 32 lanes of two zmm accumulators adds w * x as one FMA (std::fma there) for
// elements i, i + 32, ... in order: a block's elements 0-15 to register 0, 16-31 to register 1.
// The lanes are then reduced with the scalar kernel's tree. 8 tokens x 2
// accumulators + 2 weight registers; x is a memory operand of the multiply.
#include <immintrin.h>

#include "gguf/quant_blocks.h"
#include "kernels/kernels_internal.h"
#include "kernels/x86/lowbit_unpack.h"

namespace kvw::kernels::avx512 {
namespace {

constexpr int kLanes = 32;
constexpr int64_t kPrefetchBytes = 1024;
constexpr int kTileTokens = 8;

inline __m512 to_floats(__m128i q) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q));
}

float reduce_lanes(const __m512 a[2]) {
  alignas(64) float acc[kLanes];
  _mm512_store_ps(acc, a[0]);
  _mm512_store_ps(acc + 16, a[1]);
  for (int width = kLanes / 2; width >= 1; width /= 2) {
    for (int k = 0; k < width; ++k) acc[k] = acc[k] + acc[k + width];
  }
  return acc[0];
}

// Row r against NT tokens starting at t0.
template <GgmlType T, int NT>
void row_tile(const uint8_t* row, int64_t nb, const float* x, int64_t n_in, int64_t t0,
              int64_t n_rows, int64_t r, float* y) {
  __m512 acc[NT][2];
  for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = _mm512_setzero_ps();
  static_assert(x86::is_superblock_lowbit(T));
  constexpr int64_t kBlockBytes = x86::lowbit_bytes_per_32<T>();
  x86::LowbitScales sc;  // the current super-block's
  for (int64_t b = 0; b < nb; ++b) {
    // One row is read a block at a time with a long dependent chain per block, so the core does
    // not run ahead far enough to overlap DRAM misses: decode spent ~55% of its time on the first
    // load of each block until this prefetch, kPrefetchBytes ahead (a prefetch never faults).
    _mm_prefetch(reinterpret_cast<const char*>(row) + b * kBlockBytes + kPrefetchBytes,
                 _MM_HINT_T0);
    __m512 w[2];
    const uint8_t* blk = row + b / 8 * x86::superblock_bytes<T>();
    const int c = static_cast<int>(b % 8);
    if (c == 0) x86::lowbit_scales<T>(blk, sc);
    const __m256i q = x86::lowbit_levels<T>(blk, c);
    const __m128i lv[2] = {_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1)};
    for (int k = 0; k < 2; ++k) {
      w[k] = _mm512_mul_ps(to_floats(lv[k]), _mm512_set1_ps(sc.d[2 * c + k]));
      if constexpr (T == GgmlType::kQ2_K) {
        w[k] = _mm512_sub_ps(w[k], _mm512_set1_ps(sc.m[2 * c + k]));
      }
    }
    for (int t = 0; t < NT; ++t) {
      const float* xt = x + (t0 + t) * n_in + b * 32;
      acc[t][0] = _mm512_fmadd_ps(w[0], _mm512_loadu_ps(xt), acc[t][0]);
      acc[t][1] = _mm512_fmadd_ps(w[1], _mm512_loadu_ps(xt + 16), acc[t][1]);
    }
  }
  for (int t = 0; t < NT; ++t) y[(t0 + t) * n_rows + r] = reduce_lanes(acc[t]);
}

template <GgmlType T, int NT>
void tail_tile(const uint8_t* row, int64_t nb, const float* x, int64_t n_in, int64_t t0,
               int64_t n_rows, int64_t r, float* y, int64_t left) {
  if constexpr (NT > 0) {
    if (left == NT) return row_tile<T, NT>(row, nb, x, n_in, t0, n_rows, r, y);
    tail_tile<T, NT - 1>(row, nb, x, n_in, t0, n_rows, r, y, left);
  }
}

template <GgmlType T>
void rows(const uint8_t* w, int64_t row_bytes, int64_t n_rows, int64_t n_in, const float* x,
          int64_t n_tokens, float* y, RowRange range) {
  const int64_t nb = n_in / 32;
  for (int64_t r = range.begin; r < range.end; ++r) {
    const uint8_t* row = w + r * row_bytes;
    int64_t t0 = 0;
    for (; t0 + kTileTokens <= n_tokens; t0 += kTileTokens) {
      row_tile<T, kTileTokens>(row, nb, x, n_in, t0, n_rows, r, y);
    }
    tail_tile<T, kTileTokens - 1>(row, nb, x, n_in, t0, n_rows, r, y, n_tokens - t0);
  }
}

}  // namespace

void matmul_dequant(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in, const float* x,
                    int64_t n_tokens, float* y, int ith, int nth) {
  const MatmulGeometry g = matmul_geometry(wtype, n_in);
  const RowRange range = split_range(n_rows, ith, nth, kRowAlign);
  const auto* w8 = static_cast<const uint8_t*>(w);
  switch (wtype) {
    case GgmlType::kQ2_K:
      return rows<GgmlType::kQ2_K>(w8, g.w_row_bytes, n_rows, n_in, x, n_tokens, y, range);
    case GgmlType::kQ3_K:
      return rows<GgmlType::kQ3_K>(w8, g.w_row_bytes, n_rows, n_in, x, n_tokens, y, range);
    case GgmlType::kIQ4_XS:
      return rows<GgmlType::kIQ4_XS>(w8, g.w_row_bytes, n_rows, n_in, x, n_tokens, y, range);
    default:
      // The generic kernel CHECKs the type.
      return kvw::kernels::matmul_dequant(wtype, w, n_rows, n_in, x, n_tokens, y, ith, nth);
  }
}

}  // namespace kvw::kernels::avx512
