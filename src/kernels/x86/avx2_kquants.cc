// kernels/x86/avx2_kquants.cc: AVX2 matmul for Q4_K, Q5_K and Q6_K weights x Q8_K activations.
// Per 256-element super-block the integer dot products are exact (maddubs pairs stay below
// 2^15, see each Ops), followed by a fixed sequence of float ops per (token, row) pair, so the
// results do not depend on tile shape, n_tokens or the thread split (matmul_tile.h).
#include "gguf/quant_blocks.h"
#include "kernels/x86/avx2_kernels.h"
#include "kernels/x86/avx2_util.h"
#include "kernels/x86/matmul_tile.h"

namespace kvw::kernels::avx2 {
namespace {

using x86::MatmulArgs;

// Two accumulator chains per pair: the scale term and the min term.
struct KAcc {
  __m256 v;
  __m256 m;
};

// Q4_K/Q5_K weights with their 6-bit scales/mins unpacked once per row block (ggml's
// get_scale_min_k4 done on 32-bit words: pairs 0..3 sit in the low 6 bits of bytes j and j + 4;
// pairs 4..7 keep their low 4 bits in byte j + 8 and their top 2 bits in bytes j and j + 4).
template <class Block>
struct KW {
  const Block* blk;
  float d;
  float dmin;
  __m256i mins;  // int16 [m0, m0, m1, m1, ..., m7, m7], pairs with Q8_K bsums
  alignas(16) int16_t sc[8];
};

template <class Block>
KVW_INLINE KW<Block> load_kw(const Block* blk) {
  uint32_t u[4];
  __builtin_memcpy(u, blk->scales, 12);
  const uint32_t m03 = u[1] & 0x3f3f3f3fu;
  u[3] = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);  // mins 4..7
  u[1] = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);         // scales 4..7
  u[0] &= 0x3f3f3f3fu;                                                      // scales 0..3
  u[2] = m03;                                                               // mins 0..3
  KW<Block> w;
  w.blk = blk;
  w.d = x86::f16_scalar(blk->d);
  w.dmin = x86::f16_scalar(blk->dmin);
  const __m128i bytes = _mm_set_epi32((int)u[3], (int)u[2], (int)u[1], (int)u[0]);
  _mm_store_si128(reinterpret_cast<__m128i*>(w.sc), _mm_cvtepu8_epi16(bytes));
  w.mins = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(bytes, bytes));
  return w;
}

// Shared Q4_K/Q5_K body: `Quants::get(w, hb, j)` returns the unsigned quants of sub-blocks 2j
// (low) and 2j+1 (high). Products: maddubs(q <= 31, x) pairs <= 2 * 31 * 127 < 2^15.
template <class Block, class Quants>
struct Q45KOps {
  static constexpr int kBlockBytes = sizeof(Block);
  static constexpr int kRows = 2;
  static constexpr int kTokens = 2;
  using Acc = KAcc;
  using W = KW<Block>;
  using X = const BlockQ8_K*;  // read in place: a super-block is 292 bytes
  static KVW_INLINE Acc zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static KVW_INLINE W load_w(const uint8_t* row, int64_t b) {
    return load_kw(reinterpret_cast<const Block*>(row) + b);
  }
  static KVW_INLINE X load_x(const uint8_t* x, int64_t b) {
    return reinterpret_cast<const BlockQ8_K*>(x) + b;
  }
  static KVW_INLINE void fma(Acc& acc, const W& w, X xb) {
    const __m256i hb = Quants::high_bits(w.blk);
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j) {
      __m256i lo, hi;
      Quants::get(w.blk, hb, j, lo, hi);
      const __m256i pl =
          _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x86::load_i8x32(xb->qs + 64 * j)),
                            _mm256_set1_epi16(w.sc[2 * j]));
      const __m256i ph =
          _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x86::load_i8x32(xb->qs + 64 * j + 32)),
                            _mm256_set1_epi16(w.sc[2 * j + 1]));
      sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
    }
    // Min term: m_j * (bsum_2j + bsum_2j+1) in 8 int32 lanes.
    const __m256i mins = _mm256_madd_epi16(x86::load_i8x32(xb->bsums), w.mins);
    acc.v = _mm256_fmadd_ps(_mm256_set1_ps(xb->d * w.d), _mm256_cvtepi32_ps(sumi), acc.v);
    acc.m = _mm256_fmadd_ps(_mm256_set1_ps(xb->d * w.dmin), _mm256_cvtepi32_ps(mins), acc.m);
  }
  static KVW_INLINE float finish(const Acc& acc, const uint8_t*, const uint8_t*,
                                 const MatmulArgs&) {
    return x86::hsum(acc.v) - x86::hsum(acc.m);
  }
};

struct Q4KQuants {
  static KVW_INLINE __m256i high_bits(const BlockQ4_K*) { return _mm256_setzero_si256(); }
  static KVW_INLINE void get(const BlockQ4_K* blk, __m256i, int j, __m256i& lo, __m256i& hi) {
    const __m256i q = x86::load_i8x32(blk->qs + 32 * j);
    lo = _mm256_and_si256(q, _mm256_set1_epi8(0x0F));
    hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), _mm256_set1_epi8(0x0F));
  }
};

// Fifth bit of element 32 * s + l is bit s of qh[l].
struct Q5KQuants {
  static KVW_INLINE __m256i high_bits(const BlockQ5_K* blk) { return x86::load_i8x32(blk->qh); }
  static KVW_INLINE __m256i bit_to_16(__m256i hb, int s) {
    const __m256i mask = _mm256_set1_epi8((char)(1 << s));
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hb, mask), mask),
                            _mm256_set1_epi8(0x10));
  }
  static KVW_INLINE void get(const BlockQ5_K* blk, __m256i hb, int j, __m256i& lo, __m256i& hi) {
    const __m256i q = x86::load_i8x32(blk->qs + 32 * j);
    lo = _mm256_or_si256(_mm256_and_si256(q, _mm256_set1_epi8(0x0F)), bit_to_16(hb, 2 * j));
    hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), _mm256_set1_epi8(0x0F)),
                         bit_to_16(hb, 2 * j + 1));
  }
};

// Q6_K: quants q in 0..63 (value q - 32) and 16 int8 scales. maddubs(q, x) - maddubs(32, x):
// |.| <= 2 * 63 * 127 + 32 * 254 < 2^15.
struct Q6KOps {
  static constexpr int kBlockBytes = sizeof(BlockQ6_K);
  static constexpr int kRows = 2;
  static constexpr int kTokens = 2;
  using Acc = __m256;
  struct W {
    const BlockQ6_K* blk;
    float d;
  };
  using X = const BlockQ8_K*;
  static KVW_INLINE Acc zero() { return _mm256_setzero_ps(); }
  static KVW_INLINE W load_w(const uint8_t* row, int64_t b) {
    const BlockQ6_K* blk = reinterpret_cast<const BlockQ6_K*>(row) + b;
    return {blk, x86::f16_scalar(blk->d)};
  }
  static KVW_INLINE X load_x(const uint8_t* x, int64_t b) {
    return reinterpret_cast<const BlockQ8_K*>(x) + b;
  }
  static KVW_INLINE void fma(Acc& acc, const W& w, X xb) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    const __m256i high2 = _mm256_set1_epi8(0x30);
    __m256i sumi = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = x86::load_i8x32(w.blk->ql + 64 * h);
      const __m256i ql1 = x86::load_i8x32(w.blk->ql + 64 * h + 32);
      const __m256i qh = x86::load_i8x32(w.blk->qh + 32 * h);
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(ql0, low4),
                          _mm256_and_si256(_mm256_slli_epi16(qh, 4), high2)),
          _mm256_or_si256(_mm256_and_si256(ql1, low4),
                          _mm256_and_si256(_mm256_slli_epi16(qh, 2), high2)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                          _mm256_and_si256(qh, high2)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                          _mm256_and_si256(_mm256_srli_epi16(qh, 2), high2)),
      };
      for (int k = 0; k < 4; ++k) {
        const __m256i xq = x86::load_i8x32(xb->qs + 128 * h + 32 * k);
        const __m256i p16 = _mm256_sub_epi16(_mm256_maddubs_epi16(q[k], xq),
                                             _mm256_maddubs_epi16(_mm256_set1_epi8(32), xq));
        const int g = 8 * h + 2 * k;  // 16-element groups g (bytes 0..15) and g + 1
        const __m256i sc = _mm256_set_m128i(_mm_set1_epi16(w.blk->scales[g + 1]),
                                            _mm_set1_epi16(w.blk->scales[g]));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p16, sc));
      }
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(xb->d * w.d), _mm256_cvtepi32_ps(sumi), acc);
  }
  static KVW_INLINE float finish(Acc acc, const uint8_t*, const uint8_t*, const MatmulArgs&) {
    return x86::hsum(acc);
  }
};

}  // namespace

void matmul_rows_q4_k(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  x86::matmul_rows<Q45KOps<BlockQ4_K, Q4KQuants>>(a, row_begin, row_end);
}

void matmul_rows_q5_k(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  x86::matmul_rows<Q45KOps<BlockQ5_K, Q5KQuants>>(a, row_begin, row_end);
}

void matmul_rows_q6_k(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  x86::matmul_rows<Q6KOps>(a, row_begin, row_end);
}

}  // namespace kvw::kernels::avx2
