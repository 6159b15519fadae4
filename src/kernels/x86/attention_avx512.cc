// kernels/x86/attention_avx512.cc: paged flash attention of the AVX-512 tables. The same
// algorithm as avx2_ops.cc (chunks of kAttnChunk = 16 positions, each K/V row decoded once per
// tile of queries and query heads, online softmax per (query, head)), with a chunk's 16 scores in
// one register: eight (query, head) pairs are scored at once and four or eight pairs with the same
// range accumulate V together (eight, a decode's whole GQA group, in one pass over each V row), so
// the FMA units, not FMA latency, bound the loops. Each pair's arithmetic is the same whatever
// pairs it is grouped with, so a query's result is the same bits in any tile (the AVX2 table's bits
// may differ: it sums in another order). Prefill tiles take several chunks per step where every
// pair attends them in full (attend_step): the same arithmetic with fewer loads and stores of q
// and output rows. Decode tiles (attend_decode, attention_decode_avx512.cc) keep the same
// arithmetic in the transposed layout: pairs in the lanes, one register per position. Compiled with
// -mavx512f -mavx512bw -mavx512vl; runs only after dispatch.cc saw AVX-512.
#include <algorithm>
#include <cstring>

// GCC 12 warns that the _mm512_undefined_ps() operand inside the intrinsics' headers is used
// uninitialized once softmax_pairs<8> folds its constant rows; it is a false positive.
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/x86/attention_avx512_util.h"

namespace kvw::kernels::avx512 {
namespace {

using x86::kv_row;

constexpr int kScoreBatch = 8;

// exp256 of avx2_util.h on 16 lanes (same reduction and polynomial).
KVW_INLINE __m512 exp512(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.3f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  // p * 2^n in one uop instead of four (convert, add the bias, shift, multiply); n is in
  // [-126, 127], so both round the same real product once: the same bits.
  return _mm512_scalef_ps(p, n);
}

// tanh512 / softcap512: avx2_util.h's tanh256 / softcap256 on 16 lanes (same formula).
KVW_INLINE __m512 softcap512(__m512 x, __m512 cap, __m512 inv_cap) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 y = _mm512_mul_ps(x, inv_cap);
  const __m512 t = exp512(_mm512_mul_ps(_mm512_abs_ps(y), _mm512_set1_ps(-2.0f)));
  const __m512 th = _mm512_div_ps(_mm512_sub_ps(one, t), _mm512_add_ps(one, t));
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(y), _mm512_set1_epi32(INT32_MIN));
  return _mm512_mul_ps(cap, _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(th), sign)));
}

// Scores of N pairs against one chunk, lane p = position p: fma(q[d], k[d], acc) over d in order.
template <int N>
KVW_INLINE void score_pairs(const ChunkPair* pairs, const float* kt, int32_t hd, float* out) {
  __m512 acc[N];
  for (int n = 0; n < N; ++n) acc[n] = _mm512_setzero_ps();
  for (int32_t d = 0; d < hd; ++d) {
    const __m512 k = _mm512_loadu_ps(kt + d * kAttnChunk);
    for (int n = 0; n < N; ++n) acc[n] = _mm512_fmadd_ps(_mm512_set1_ps(pairs[n].q[d]), k, acc[n]);
  }
  for (int n = 0; n < N; ++n) _mm512_storeu_ps(out + n * kAttnChunk, acc[n]);
}

// score_pairs against two chunks (kt0, kt1) at once: each lane's arithmetic is the same, and each
// q[d] is broadcast once for 32 positions instead of 16 (16 accumulators at N = 8).
template <int N>
KVW_INLINE void score_pairs2(const ChunkPair* pairs, const float* kt0, const float* kt1, int32_t hd,
                             float* out0, float* out1) {
  __m512 acc0[N], acc1[N];
  for (int n = 0; n < N; ++n) acc0[n] = acc1[n] = _mm512_setzero_ps();
  for (int32_t d = 0; d < hd; ++d) {
    const __m512 k0 = _mm512_loadu_ps(kt0 + d * kAttnChunk);
    const __m512 k1 = _mm512_loadu_ps(kt1 + d * kAttnChunk);
    for (int n = 0; n < N; ++n) {
      const __m512 q = _mm512_set1_ps(pairs[n].q[d]);
      acc0[n] = _mm512_fmadd_ps(q, k0, acc0[n]);
      acc1[n] = _mm512_fmadd_ps(q, k1, acc1[n]);
    }
  }
  for (int n = 0; n < N; ++n) {
    _mm512_storeu_ps(out0 + n * kAttnChunk, acc0[n]);
    _mm512_storeu_ps(out1 + n * kAttnChunk, acc1[n]);
  }
}

// PV of pairs [0, np) over G consecutive chunks (pv[g], cs[g], vrow[g]: chunk g's weights,
// rescales and V rows): pairs with the same lanes go together, 8 at a time, else at most 4.
template <int G>
void accumulate_runs(VRows rows, const ChunkPair* pairs, int np, float (*const* pv)[kAttnChunk],
                     const float* const* cs, const void* const* const* vrow, int32_t hd) {
  for (int k = 0; k < np;) {
    int run = x86::same_range_run(pairs, k, np, kAccBatch);
    if (run < kAccBatch) run = run < 4 ? run : 4;
    float* out[kAccBatch];
    AccChunk ch[G];
    for (int n = 0; n < run; ++n) out[n] = pairs[k + n].out;
    for (int g = 0; g < G; ++g) ch[g] = {cs[g] + k, pv[g][k], vrow[g]};
    const int a = pairs[k].qa, b = pairs[k].qb;
    switch (run) {
      case 8:
        accumulate_any<8, G>(rows, out, ch, a, b, hd);
        break;
      case 4:
        accumulate_any<4, G>(rows, out, ch, a, b, hd);
        break;
      case 3:
        accumulate_any<3, G>(rows, out, ch, a, b, hd);
        break;
      case 2:
        accumulate_any<2, G>(rows, out, ch, a, b, hd);
        break;
      default:
        accumulate_any<1, G>(rows, out, ch, a, b, hd);
        break;
    }
    k += run;
  }
}

// In-register transpose of 16 x 16 floats: r[i] row i in, r[j] column j out.
KVW_INLINE void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  __m512 u[16];  // u[4j + c], 128-bit lane L: column 4L + c of rows 4j..4j+3
  for (int j = 0; j < 4; ++j) {
    const __m512d a = _mm512_castps_pd(t[4 * j]), b = _mm512_castps_pd(t[4 * j + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * j + 2]), d = _mm512_castps_pd(t[4 * j + 3]);
    u[4 * j + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    u[4 * j + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    u[4 * j + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    u[4 * j + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int c = 0; c < 4; ++c) {  // 4 x 4 transpose of 128-bit lanes across u[c], u[4 + c], ...
    const __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);
    const __m512 v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);
    const __m512 v2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
    const __m512 v3 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
    r[c] = _mm512_shuffle_f32x4(v0, v2, 0x88);
    r[8 + c] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
    r[4 + c] = _mm512_shuffle_f32x4(v1, v3, 0x88);
    r[12 + c] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
  }
}

// The lines of a later prefill step's rows, prefetched into L2 a few at a time between the
// current step's score batches. Not L1, which the q and output rows stream through; not at once:
// a burst of a step's 128 lines (f16, hd 64) stalled on the L1 fill buffers for most of what the
// step's own loads had waited on L3 (14% of its time; busy machine, perf cpu-clock).
class StepPrefetch {
 public:
  void add(const uint8_t* p, int64_t n) {
    if (n_ == kMaxSpans) return;  // more than a step of 16-row blocks has: dropped, not wrong
    at_[n_] = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63};
    end_[n_++] = reinterpret_cast<uintptr_t>(p) + (uintptr_t)n;
  }
  // Up to `lines` more lines; lines < 0: all that are left.
  void issue(int lines) {
    for (; i_ < n_ && lines != 0; ++i_) {
      for (; at_[i_] < end_[i_] && lines != 0; at_[i_] += 64, --lines) prefetch_line<true>(at_[i_]);
      if (at_[i_] < end_[i_]) return;
    }
  }

 private:
  static constexpr int kMaxSpans = 32;
  uintptr_t at_[kMaxSpans], end_[kMaxSpans];
  int n_ = 0, i_ = 0;
};

// K rows of positions [la, lb) of the chunk at c0, transposed into kt [hd][16]. F16, F32 and
// INT8 caches with head_dim % 16 == 0 go 16 x 16 at a time in registers (lanes outside [la, lb)
// hold zeros); other cases decode each row and store it column-wise. INT8 rows go in as their
// integers, and the rows' scales come back in k_scales (lanes = positions, 0 outside [la, lb)):
// the scores take them with the softmax scale, one multiply per chunk instead of one per 16
// elements. Returns whether it did so.
bool load_kt(const KvLayerView& kv, const uint32_t* block_table, const ChunkRows& cr, int64_t c0,
             int la, int lb, int32_t kv_head, float* kt, float* row, float* k_scales) {
  const int32_t hd = kv.head_dim;
  const bool direct =
      (kv.dtype == KvDtype::kF16 || kv.dtype == KvDtype::kF32 || kv.dtype == KvDtype::kInt8) &&
      hd % 16 == 0;
  if (!direct) {
    std::memset(kt, 0, sizeof(float) * hd * kAttnChunk);
    for (int p = la; p < lb; ++p) {
      const float* k = kv_row(kv, false, block_table, c0 + p, kv_head, row);
      for (int32_t d = 0; d < hd; ++d) kt[d * kAttnChunk + p] = k[d];
    }
    return false;
  }
  const bool f16 = kv.dtype == KvDtype::kF16, int8 = kv.dtype == KvDtype::kInt8;
  const int64_t elem = (int64_t)kv_elem_bytes(kv.dtype);
  const uint8_t* rows[kAttnChunk];
  for (int p = 0; p < kAttnChunk; ++p) {
    if (p >= la && p < lb) rows[p] = row_ptr(kv.k, cr, p, hd * elem);
    if (int8) k_scales[p] = p >= la && p < lb ? row_scale(kv.k_scale, cr, p) : 0.0f;
  }
  for (int32_t d0 = 0; d0 < hd; d0 += 16) {
    __m512 r[16];
    for (int p = 0; p < kAttnChunk; ++p) {
      if (p < la || p >= lb) {
        r[p] = _mm512_setzero_ps();
      } else if (f16) {
        r[p] = _mm512_cvtph_ps(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[p] + 2 * (int64_t)d0)));
      } else if (int8) {
        r[p] = _mm512_cvtepi32_ps(
            _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[p] + d0))));
      } else {
        r[p] = _mm512_loadu_ps(reinterpret_cast<const float*>(rows[p]) + d0);
      }
    }
    transpose16(r);
    for (int d = 0; d < 16; ++d) _mm512_storeu_ps(kt + (d0 + d) * kAttnChunk, r[d]);
  }
  return int8;
}

// A V row decoded to f32 in dst: F16 exactly, INT8 as its integers (its scale goes into the
// weights). 16 at a time from the row's address (kv_row's per-row division cost ~20 cycles).
template <VRows kV>
void v_row_to_f32(const void* src, float* dst, int32_t n) {
  for (int32_t j = 0; j < n; j += 16) {
    const __mmask16 m = n - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - j)) - 1);
    _mm512_mask_storeu_ps(dst + j, m, load_v<kV>(src, j, m));
  }
}

// V rows of positions [la, lb) of the chunk for accumulate: the cache's own rows (F32, or F16 /
// INT8 read in place) or rows decoded into vbuf ([kAttnChunk][hd]); INT8 rows' scales into vs
// (0 outside [la, lb)).
void load_v_rows(const KvLayerView& kv, const uint32_t* block_table, const ChunkRows& cr,
                 int64_t c0, int la, int lb, int32_t kv_head, VRows v_rows, float* vbuf,
                 const void** vrow, float* vs) {
  const int32_t hd = kv.head_dim;
  const int64_t row_bytes = hd * (int64_t)kv_elem_bytes(kv.dtype);
  for (int p = 0; p < kAttnChunk; ++p) {
    if (kv.dtype == KvDtype::kInt8) vs[p] = p >= la && p < lb ? row_scale(kv.v_scale, cr, p) : 0.0f;
    if (p < la || p >= lb) continue;
    const uint8_t* src = row_ptr(kv.v, cr, p, row_bytes);
    float* dst = vbuf + p * hd;
    vrow[p] = dst;
    if (v_rows != VRows::kF32 || kv.dtype == KvDtype::kF32) {
      vrow[p] = src;
    } else if (kv.dtype == KvDtype::kF16) {
      v_row_to_f32<VRows::kF16>(src, dst, hd);
    } else if (kv.dtype == KvDtype::kInt8) {
      v_row_to_f32<VRows::kInt8>(src, dst, hd);
    } else {
      vrow[p] = kv_row(kv, true, block_table, c0 + p, kv_head, dst);
    }
  }
}

// Online softmax of up to 16 pairs' chunk scores (s, [16 pairs][16 positions]): scaled and
// masked to the pair's lanes, the chunk max and the sum of the weights of all 16 pairs come from
// one transpose each (16 pairs in the lanes of one register), so no pair waits out a horizontal
// reduction or a scalar exp. Writes the weights over s and each pair's rescale of its previous
// state to cs. Lane i of every step is pair i's own arithmetic: the bits do not depend on which
// pairs share the call.
// With softcap > 0 each score is soft-capped after the scale, before the mask.
// kRows = 8 serves n <= 8 (a decode's GQA group): rows 8..15 are compile-time constants, so the
// compiler folds the shuffles of the transposes that only move them (same lanes, same bits).
template <int kRows>
void softmax_pairs(const ChunkPair* pairs, int n, __m512 scale, float softcap,
                   float (*s)[kAttnChunk], float* cs) {
  n = n < kRows ? n : kRows;
  const __m512 neg_inf = _mm512_set1_ps(-__builtin_inff());
  alignas(64) float m_old[kAttnChunk], l_old[kAttnChunk], m_new[kAttnChunk];
  __mmask16 valid[kAttnChunk];
  __m512 r[kAttnChunk];
  const __m512 cap = _mm512_set1_ps(softcap);
  const __m512 inv_cap = _mm512_set1_ps(softcap > 0.0f ? 1.0f / softcap : 0.0f);
  for (int i = 0; i < kAttnChunk; ++i) {
    // Lanes past n: an empty pair with state (0, 0), whose results are dropped.
    const bool live = i < kRows && i < n;
    valid[i] = live ? (__mmask16)(((1u << pairs[i].qb) - 1) & ~((1u << pairs[i].qa) - 1)) : 0;
    m_old[i] = live ? pairs[i].st->m : 0.0f;
    l_old[i] = live ? pairs[i].st->l : 0.0f;
    if (!live) {
      r[i] = neg_inf;
    } else if (softcap > 0.0f) {
      const __m512 x = softcap512(_mm512_mul_ps(_mm512_load_ps(s[i]), scale), cap, inv_cap);
      r[i] = _mm512_mask_mov_ps(neg_inf, valid[i], x);
    } else {
      r[i] = _mm512_mask_mul_ps(neg_inf, valid[i], _mm512_load_ps(s[i]), scale);
    }
    if (live) _mm512_store_ps(s[i], r[i]);
  }
  transpose16(r);
  // A tree, not a chain: the max is exact in any order, and the chunk's softmax is on the
  // critical path of the next chunk (its state), so 4 dependent steps instead of 15.
  for (int w = kAttnChunk / 2; w > 0; w /= 2) {
    for (int p = 0; p < w; ++p) r[p] = _mm512_max_ps(r[p], r[p + w]);
  }
  const __m512 mx = r[0];
  const __m512 mo = _mm512_load_ps(m_old);
  const __m512 m = _mm512_max_ps(mo, mx);
  // exp512 clamps: a first chunk (m_old = -inf) gets a rescale of ~1e-38 instead of 0, applied
  // to a state and an output that are still exact zeros.
  const __m512 rescale =
      _mm512_maskz_mov_ps((__mmask16)((1u << n) - 1), exp512(_mm512_sub_ps(mo, m)));
  _mm512_storeu_ps(cs, rescale);
  _mm512_store_ps(m_new, m);
  for (int i = 0; i < kAttnChunk; ++i) {
    // Pairs past n have no lanes: their zeros skip the exp (half the work of a decode's 8 heads).
    const bool live = i < kRows && i < n;
    r[i] =
        live ? _mm512_maskz_mov_ps(
                   valid[i], exp512(_mm512_sub_ps(_mm512_load_ps(s[i]), _mm512_set1_ps(m_new[i]))))
             : _mm512_setzero_ps();
    if (live) _mm512_store_ps(s[i], r[i]);
  }
  transpose16(r);
  __m512 sum = r[0];
  for (int p = 1; p < kAttnChunk; ++p) sum = _mm512_add_ps(sum, r[p]);
  alignas(64) float l_new[kAttnChunk];
  _mm512_store_ps(l_new, _mm512_add_ps(_mm512_mul_ps(_mm512_load_ps(l_old), rescale), sum));
  for (int i = 0; i < n; ++i) *pairs[i].st = {m_new[i], l_new[i]};
}

// The chunk at c0, positions [la, lb): K transposed into kt, V rows for accumulate into vrow
// (and vs, INT8 V scales); under bf16_dot K as bf16 pairs and V as bf16 pair rows in vbuf. Returns
// the scores' multiplier: the softmax scale, times each position's K scale for INT8 rows.
__m512 load_chunk(const TileWork& t, int64_t c0, int la, int lb, float* kt, float* vbuf,
                  const void** vrow, float* vs) {
  ChunkRows cr;
  chunk_rows(*t.kv, t.block_table, c0, la, lb, t.kv_head, &cr);
  alignas(64) float ks[kAttnChunk];  // INT8 K rows' scales when load_kt left them out
  const __m512 scale = _mm512_set1_ps(t.scores.scale);
  const bool k_scaled = load_kt(*t.kv, t.block_table, cr, c0, la, lb, t.kv_head, kt, t.row, ks);
  if (t.scores.bf16_dot) bf16_pair_kt(kt, t.kv->head_dim);
  load_v_rows(*t.kv, t.block_table, cr, c0, la, lb, t.kv_head, t.v_rows, vbuf, vrow, vs);
  if (t.scores.bf16_dot) {
    bf16_v_pairs(t.v_rows, vrow, la, lb, t.kv->head_dim, reinterpret_cast<uint32_t*>(vbuf));
  }
  return k_scaled ? _mm512_mul_ps(_mm512_load_ps(ks), scale) : scale;
}

void score_all(const ChunkPair* pairs, int np, const float* kt, int32_t hd,
               float (*pv)[kAttnChunk]) {
  int k = 0;
  for (; k + kScoreBatch <= np; k += kScoreBatch)
    score_pairs<kScoreBatch>(pairs + k, kt, hd, pv[k]);
  for (; k + 2 <= np; k += 2) score_pairs<2>(pairs + k, kt, hd, pv[k]);
  for (; k < np; ++k) score_pairs<1>(pairs + k, kt, hd, pv[k]);
}

// Softmax of a chunk's scores for all pairs, 16 at a time; INT8 V scales (vs, nullable) go into
// the weights.
void softmax_all(const ChunkPair* pairs, int np, __m512 kmul, float softcap,
                 float (*pv)[kAttnChunk], float* cs, const float* vs) {
  for (int k = 0; k < np; k += kAttnChunk) {
    if (np - k <= 8) {
      softmax_pairs<8>(pairs + k, np - k, kmul, softcap, pv + k, cs + k);
    } else {
      softmax_pairs<kAttnChunk>(pairs + k, np - k, kmul, softcap, pv + k, cs + k);
    }
  }
  if (vs == nullptr) return;
  const __m512 v = _mm512_load_ps(vs);
  for (int k = 0; k < np; ++k) _mm512_store_ps(pv[k], _mm512_mul_ps(_mm512_load_ps(pv[k]), v));
}

constexpr int kMaxPairs = kMaxTile * kMaxGroup;
// A step scores, softmaxes and accumulates this many pairs before the next ones: their q and
// output rows (16 KB at hd 64) and the step's K and V (16 KB) fit L1 together. Prefill tile at
// depth 8192 (busy machine, CPU time, medians of 3): 32 pairs 100.6 GFLOP/s, 16: 102.1, all 128
// at once: 97.1.
constexpr int kPhasePairs = 32;

// G chunks from c0 that every pair attends in full (all lanes) as one step, prefetching the next
// step's rows below hi: each q[d] broadcast once for two chunks' scores, and each output row
// loaded and stored once for the G chunks' V (the largest costs beside the FMAs of a prefill
// tile, whose 128 q and output rows, 64 KB, do not stay in L1). The same per-pair arithmetic as
// G one-chunk steps. Prefill tile at depth 8192 (busy machine, CPU time): 66 GFLOP/s one chunk
// at a time, 89 with G = 2.
template <int G>
void attend_step(const TileWork& t, int64_t c0, int64_t hi, const ChunkPair* pairs, int np,
                 float (*pv)[kMaxPairs][kAttnChunk], float (*cs)[kMaxPairs]) {
  static_assert(G % 2 == 0, "scores go two chunks at a time");
  StepPrefetch pf;  // the next step's rows, below hi
  const int64_t next = c0 + G * kAttnChunk;
  if (next < hi) {
    for_each_row_span(*t.kv, t.block_table, next, 0,
                      (int)(std::min(hi, next + G * kAttnChunk) - next), t.kv_head,
                      [&pf](const uint8_t* p, int64_t n) { pf.add(p, n); });
  }
  const int32_t hd = t.kv->head_dim;
  const int64_t kt_floats = hd * kAttnChunk;
  const void* vrow[G][kAttnChunk];
  alignas(64) float vs[G][kAttnChunk];
  __m512 kmul[G];
  for (int g = 0; g < G; ++g) {
    kmul[g] = load_chunk(t, c0 + g * kAttnChunk, 0, kAttnChunk, t.kt + g * kt_floats,
                         t.vbuf + g * kt_floats, vrow[g], vs[g]);
  }
  const bool fold_v = t.kv->dtype == KvDtype::kInt8;
  const void* const* v[G];
  for (int g = 0; g < G; ++g) v[g] = vrow[g];
  for (int k0 = 0; k0 < np; k0 += kPhasePairs) {
    const int n = std::min(kPhasePairs, np - k0);
    const ChunkPair* ps = pairs + k0;
    for (int g = 0; g < G; g += 2) {
      const float* kt0 = t.kt + g * kt_floats;
      const float* kt1 = kt0 + kt_floats;
      float(*s0)[kAttnChunk] = pv[g] + k0;
      float(*s1)[kAttnChunk] = pv[g + 1] + k0;
      if (t.scores.bf16_dot) {
        score_all2_bf16(ps, n, kt0, kt1, hd, s0, s1);
        pf.issue(n / kScoreBatch * kScoreBatch);
        continue;
      }
      int k = 0;
      for (; k + kScoreBatch <= n; k += kScoreBatch) {
        score_pairs2<kScoreBatch>(ps + k, kt0, kt1, hd, s0[k], s1[k]);
        pf.issue(kScoreBatch);
      }
      for (; k + 2 <= n; k += 2) score_pairs2<2>(ps + k, kt0, kt1, hd, s0[k], s1[k]);
      for (; k < n; ++k) score_pairs2<1>(ps + k, kt0, kt1, hd, s0[k], s1[k]);
    }
    float(*w[G])[kAttnChunk];
    const float* c[G];
    for (int g = 0; g < G; ++g) {
      softmax_all(ps, n, kmul[g], t.scores.softcap, pv[g] + k0, cs[g] + k0,
                  fold_v ? vs[g] : nullptr);
      w[g] = pv[g] + k0;
      c[g] = cs[g] + k0;
    }
    if (t.scores.bf16_dot) {
      const uint32_t* vp[G];
      for (int g = 0; g < G; ++g) vp[g] = reinterpret_cast<const uint32_t*>(t.vbuf + g * kt_floats);
      bf16_pv_step(ps, n, G, w, c, vp, hd);
    } else {
      accumulate_runs<G>(VRows::kF32, ps, n, w, c, v, hd);
    }
  }
  pf.issue(-1);
}

// Queries [0, nq) x query heads [h0, h0 + ng) of KV head kv_head (see the file comment).
// Unnormalised: each pair's state goes to ml[query][head][2] (heads of n_heads) instead.
void attend_tile(const AttnQuery* queries, int nq, int32_t h0, int ng, int32_t kv_head,
                 const KvLayerView& kv, const uint32_t* block_table, AttnScores scores, float* ml,
                 int32_t n_heads, float* scratch) {
  const int32_t hd = kv.head_dim;
  // A tile of few pairs (decode) reads F16 and INT8 V rows in place, converting per use; a large
  // tile converts each row once into vbuf. Either way the same exact f32 values. INT8 V rows are
  // their integers in both, and each pair's weights take the rows' scales: 1 multiply per pair
  // and chunk instead of 1 per 16 elements of every row and pair.
  // Under bf16_dot every tile reads them in place once per chunk, into bf16 pair rows.
  const bool in_place = nq * ng <= 16;
  const bool read_v = in_place || scores.bf16_dot;
  const VRows v_rows = !read_v                                         ? VRows::kF32
                       : kv.dtype == KvDtype::kF16                     ? VRows::kF16
                       : kv.dtype == KvDtype::kInt8                    ? VRows::kInt8
                       : kv.dtype == KvDtype::kBF16 && scores.bf16_dot ? VRows::kBF16
                                                                       : VRows::kF32;
  const int64_t step_floats = (int64_t)kAttnStepChunks * hd * kAttnChunk;
  const TileWork t = {&kv,
                      block_table,
                      kv_head,
                      scores,
                      v_rows,
                      scratch,
                      scratch + step_floats,
                      scratch + 2 * step_floats};
  SoftmaxState st[kMaxTile][kMaxGroup];
  // pairs: this chunk's; full: those of a chunk every query attends in full (built once).
  ChunkPair pairs[kMaxPairs], full[kMaxPairs];
  int n_full = -1;
  // Scores, then weights, per pair, and each pair's rescale of its state, for a step's chunks.
  // softmax_pairs reads and writes 16 pairs at a time from a multiple of 16, which the pair
  // count's bound is.
  static_assert(kMaxPairs % kAttnChunk == 0);
  alignas(64) float pv[kAttnStepChunks][kMaxPairs][kAttnChunk];
  float cs[kAttnStepChunks][kMaxPairs];
  // [lo, hi): positions some query attends; [begin_max, end_min): those all of them attend.
  int64_t lo = queries[0].pos_begin, hi = queries[0].pos_end;
  int64_t begin_max = lo, end_min = hi;
  for (int i = 0; i < nq; ++i) {
    lo = std::min(lo, queries[i].pos_begin);
    hi = std::max(hi, queries[i].pos_end);
    begin_max = std::max(begin_max, queries[i].pos_begin);
    end_min = std::min(end_min, queries[i].pos_end);
    for (int g = 0; g < ng; ++g) {
      st[i][g] = {-__builtin_inff(), 0.0f};
      std::memset(queries[i].out + (int64_t)(h0 + g) * hd, 0, hd * sizeof(float));
    }
  }
  const bool decode = in_place && nq == 1 && ng <= kDecodeLanes && hd % 16 == 0;
  const bool decoded = decode && attend_decode_tile(t, queries, h0, ng, st);
  constexpr int64_t kAhead = kPrefetchChunks * kAttnChunk;
  const int64_t first = lo / kAttnChunk * kAttnChunk;
  for (int64_t c0 = decoded ? hi : first; c0 < hi;) {
    // Large tiles (prefill) take kAttnStepChunks chunks at once where every pair attends them
    // in full; decode keeps the one-chunk step, which reads V in place and prefetches.
    if (!in_place && begin_max <= c0 && c0 + kAttnStepChunks * kAttnChunk <= end_min) {
      if (n_full < 0) n_full = x86::chunk_pairs(queries, nq, h0, ng, hd, c0, st, full);
      attend_step<kAttnStepChunks>(t, c0, hi, full, n_full, pv, cs);
      c0 += kAttnStepChunks * kAttnChunk;
      continue;
    }
    // Load the chunk's positions that some query attends; other lanes score zero (masked).
    const int la = (int)(std::max(lo, c0) - c0);
    const int lb = (int)(std::min(hi, c0 + kAttnChunk) - c0);
    // One-chunk steps prefetch for small (decode) tiles only: a large tile has few of them (the
    // causal diagonal, a window's edges), and its 128 output rows (32 KB) need L1 more.
    if (in_place) {
      for (int64_t pc = c0 == first ? c0 + kAttnChunk : c0 + kAhead; pc <= c0 + kAhead && pc < hi;
           pc += kAttnChunk) {
        prefetch_rows(kv, block_table, pc, 0, (int)(std::min(hi, pc + kAttnChunk) - pc), kv_head);
      }
    }
    const void* vrow[kAttnChunk];
    alignas(64) float vs[kAttnChunk];
    const __m512 kmul = load_chunk(t, c0, la, lb, t.kt, t.vbuf, vrow, vs);
    const int np = x86::chunk_pairs(queries, nq, h0, ng, hd, c0, st, pairs);
    if (scores.bf16_dot) {
      score_all_bf16(pairs, np, t.kt, hd, pv[0]);
    } else {
      score_all(pairs, np, t.kt, hd, pv[0]);
    }
    softmax_all(pairs, np, kmul, scores.softcap, pv[0], cs[0],
                kv.dtype == KvDtype::kInt8 ? vs : nullptr);
    float(*const w[1])[kAttnChunk] = {pv[0]};
    const float* const c[1] = {cs[0]};
    if (scores.bf16_dot) {
      const uint32_t* const vp[1] = {reinterpret_cast<const uint32_t*>(t.vbuf)};
      bf16_pv_step(pairs, np, 1, w, c, vp, hd);
    } else {
      const void* const* const v[1] = {vrow};
      accumulate_runs<1>(v_rows, pairs, np, w, c, v, hd);
    }
    c0 += kAttnChunk;
  }
  for (int i = 0; i < nq; ++i) {
    for (int g = 0; g < ng; ++g) {
      float* state = ml + ((int64_t)i * n_heads + h0 + g) * 2;
      state[0] = st[i][g].m;
      state[1] = st[i][g].l;
    }
  }
}

}  // namespace

void attention_segment(std::span<const AttnQuery> queries, int32_t n_heads, const KvLayerView& kv,
                       std::span<const uint32_t> block_table, AttnScores scores, float* ml,
                       float* scratch) {
  x86::for_each_tile(queries, n_heads, kv,
                     [&](const AttnQuery* tile, int nq, int32_t h0, int ng, int32_t kv_head) {
                       float* tile_ml = ml + (tile - queries.data()) * (int64_t)n_heads * 2;
                       attend_tile(tile, nq, h0, ng, kv_head, kv, block_table.data(), scores,
                                   tile_ml, n_heads, scratch);
                     });
}

}  // namespace kvw::kernels::avx512
