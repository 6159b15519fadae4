// kernels/x86/avx2_dequant.cc: matmul_dequant (kernels/dequant_matmul.cc) for Q2_K, Q3_K and
// IQ4_XS in AVX2, bit for bit (unpacked 32 elements at a time by x86/lowbit_unpack.h). Compiled
// with -mavx2 -mfma -mf16c -ffp-contract=off; every x86 table's matmul routes these types here.
//
// Why it is bit-identical to the scalar kernel: a weight is the same float expression
// (d * level, minus the min for Q2_K) with the fp16 scale converted exactly by F16C,
// and each of the 32 lanes accumulates one FMA (std::fma in the scalar kernel) per element
// i, i + 32, ... in order: a block's elements 8k..8k+7 go to register k (lanes 8k..8k+7). The
// lanes are then reduced with the scalar kernel's tree.
// 2 tokens x 4 accumulators + 4 weight registers + a load: 13 of 16 ymm registers.
#include <immintrin.h>

#include "gguf/quant_blocks.h"
#include "kernels/kernels_internal.h"
#include "kernels/x86/lowbit_unpack.h"

namespace kvw::kernels::avx2 {
namespace {

constexpr int kLanes = 32;
constexpr int64_t kPrefetchBytes = 1024;
constexpr int kTileTokens = 2;

// Bytes (as int8) to 4 x 8 floats, elements 0-7, 8-15, 16-23, 24-31.
inline void to_floats_i8(__m256i q, __m256 out[4]) {
  const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  out[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo));
  out[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)));
  out[2] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi));
  out[3] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)));
}

float reduce_lanes(const __m256 a[4]) {
  alignas(32) float acc[kLanes];
  for (int k = 0; k < 4; ++k) _mm256_store_ps(acc + 8 * k, a[k]);
  for (int width = kLanes / 2; width >= 1; width /= 2) {
    for (int k = 0; k < width; ++k) acc[k] = acc[k] + acc[k + width];
  }
  return acc[0];
}

// Row r against NT tokens starting at t0.
template <GgmlType T, int NT>
void row_tile(const uint8_t* row, int64_t nb, const float* x, int64_t n_in, int64_t t0,
              int64_t n_rows, int64_t r, float* y) {
  __m256 acc[NT][4];
  for (int t = 0; t < NT; ++t) {
    for (int k = 0; k < 4; ++k) acc[t][k] = _mm256_setzero_ps();
  }
  static_assert(x86::is_superblock_lowbit(T));
  constexpr int64_t kBlockBytes = x86::lowbit_bytes_per_32<T>();
  x86::LowbitScales sc;  // the current super-block's
  for (int64_t b = 0; b < nb; ++b) {
    // One row is read a block at a time with a long dependent chain per block, so the core does
    // not run ahead far enough to overlap DRAM misses: decode spent ~55% of its time on the first
    // load of each block until this prefetch, kPrefetchBytes ahead (a prefetch never faults).
    _mm_prefetch(reinterpret_cast<const char*>(row) + b * kBlockBytes + kPrefetchBytes,
                 _MM_HINT_T0);
    __m256 w[4];
    const uint8_t* blk = row + b / 8 * x86::superblock_bytes<T>();
    const int c = static_cast<int>(b % 8);
    if (c == 0) x86::lowbit_scales<T>(blk, sc);
    to_floats_i8(x86::lowbit_levels<T>(blk, c), w);
    for (int k = 0; k < 4; ++k) {
      w[k] = _mm256_mul_ps(w[k], _mm256_set1_ps(sc.d[2 * c + k / 2]));
      if constexpr (T == GgmlType::kQ2_K) {
        w[k] = _mm256_sub_ps(w[k], _mm256_set1_ps(sc.m[2 * c + k / 2]));
      }
    }
    for (int t = 0; t < NT; ++t) {
      const float* xt = x + (t0 + t) * n_in + b * 32;
      for (int k = 0; k < 4; ++k) {
        acc[t][k] = _mm256_fmadd_ps(w[k], _mm256_loadu_ps(xt + 8 * k), acc[t][k]);
      }
    }
  }
  for (int t = 0; t < NT; ++t) y[(t0 + t) * n_rows + r] = reduce_lanes(acc[t]);
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
    if (t0 < n_tokens) row_tile<T, 1>(row, nb, x, n_in, t0, n_rows, r, y);
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

}  // namespace kvw::kernels::avx2
