// kernels/x86/attention_decode_avx512.cc: the AVX-512 attention's decode tiles, which
// attention_avx512.cc's attend_tile hands to attend_decode_tile. Compiled with the AVX-512
// options of attention_avx512.cc (KVW_AVX512_SOURCES); runs only after dispatch.cc saw AVX-512.
//
// Decode tiles (one query, up to kDecodeLanes heads of a GQA group, F16 / F32 / INT8 rows with
// head_dim % 16 == 0) keep the pairs in the lanes of a __m256 and the chunk's positions in 16
// registers, which is the layout softmax_pairs (attention_avx512.cc) transposes its scores into:
// the scores need no transposed K (each K element is broadcast from the decoded row) and the
// softmax no transposes. Every lane does the arithmetic of the pair-major path in the same order,
// so the bits are the same: fma(q[d], k[d], acc) over d in order; the score times the multiplier,
// soft-capped, masked; the max (exact in any order); exp512's operations (below, on 8 lanes); the
// weights summed in position order. Zen 4 runs AVX-512 on two 256-bit FMA pipes, so a __m256 FMA
// does half the work of a __m512 one at twice the rate; a CPU with two 512-bit FMA ports scores at
// half its peak here (the V accumulation stays __m512). Under AttnScores::bf16_dot (BF16 rows
// too) q is rounded to bf16 pairs once per tile, K rows to bf16 and V rows to bf16 pairs of
// positions once per chunk (a chunk ahead), the scores come from attention_bf16_avx512.cc's
// vdpbf16ps loop in the same lanes and PV from its bf16_pv_decode; the softmax is unchanged.
#include <algorithm>
#include <cstring>

#include "kernels/x86/attention_avx512_util.h"

namespace kvw::kernels::avx512 {
namespace {

// exp512 and softcap512 on 8 lanes: the same operations, so each lane's bits are theirs.
KVW_INLINE __m256 exp256x(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
  const __m256 n = _mm256_roundscale_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  return _mm256_scalef_ps(p, n);
}

KVW_INLINE __m256 softcap256x(__m256 x, __m256 cap, __m256 inv_cap) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 y = _mm256_mul_ps(x, inv_cap);
  const __m256 abs_y = _mm256_and_ps(y, _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MAX)));
  const __m256 t = exp256x(_mm256_mul_ps(abs_y, _mm256_set1_ps(-2.0f)));
  const __m256 th = _mm256_div_ps(_mm256_sub_ps(one, t), _mm256_add_ps(one, t));
  const __m256 sign = _mm256_and_ps(y, _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MIN)));
  return _mm256_mul_ps(cap, _mm256_or_ps(th, sign));
}

// 16 elements of a K row from element d0, as f32 (INT8: its integers, as load_kt).
template <KvDtype kD>
KVW_INLINE __m512 load_k16(const uint8_t* row, int32_t d0) {
  if constexpr (kD == KvDtype::kF16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row) + d0 / 16));
  } else if constexpr (kD == KvDtype::kInt8) {
    return _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + d0))));
  } else {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + d0);
  }
}

// A decode chunk's rows, positions [la, lb) of the chunk at c0: K decoded to f32 (INT8: its
// integers, the scale in kmul with the softmax scale, as load_chunk), V row pointers and INT8 V
// scales. Rows outside [la, lb) are zeros, as load_kt leaves them (scored, then masked).
struct DecodeRows {
  float* kbuf;  // [kAttnChunk][hd] f32, or bf16 K [kAttnChunk][hd] then V pairs [8][hd] u32
  const void* vrow[kAttnChunk];
  float kmul[kAttnChunk], vs[kAttnChunk];
  int la, lb;
};

// The VRows that read a cache of dtype kD in place.
template <KvDtype kD>
constexpr VRows kRowsOf = kD == KvDtype::kF16    ? VRows::kF16
                          : kD == KvDtype::kInt8 ? VRows::kInt8
                          : kD == KvDtype::kBF16 ? VRows::kBF16
                                                 : VRows::kF32;

// A bf16 chunk's V pair rows (bf16_v_pairs), [8][hd] after its bf16 K rows in kbuf.
KVW_INLINE uint32_t* v_pairs_of(const DecodeRows& r, int32_t hd) {
  return reinterpret_cast<uint32_t*>(r.kbuf + kAttnChunk / 2 * hd);
}

// bf16: K rows as bf16 (bf16_k_row) instead of f32, in the first half of each row's space, and
// V as bf16 pair rows in the second half (v_pairs_of).
template <KvDtype kD, bool kBf16>
void decode_rows(const TileWork& t, int64_t c0, int la, int lb, DecodeRows* r) {
  const KvLayerView& kv = *t.kv;
  const int32_t hd = kv.head_dim;
  const int64_t row_bytes = hd * (int64_t)kv_elem_bytes(kD);
  ChunkRows cr;
  chunk_rows(kv, t.block_table, c0, la, lb, t.kv_head, &cr);
  r->la = la, r->lb = lb;
  for (int p = 0; p < kAttnChunk; ++p) {
    float* dst = r->kbuf + p * hd;
    uint16_t* dst16 = reinterpret_cast<uint16_t*>(r->kbuf) + p * hd;
    if (p < la || p >= lb) {
      std::memset(dst, 0, (kBf16 ? sizeof(uint16_t) : sizeof(float)) * hd);
      continue;
    }
    const uint8_t* src = row_ptr(kv.k, cr, p, row_bytes);
    if constexpr (kBf16) {
      bf16_k_row(kD, src, hd, dst16);
    } else {
      for (int32_t j = 0; j < hd; j += 16) _mm512_storeu_ps(dst + j, load_k16<kD>(src, j));
    }
    r->vrow[p] = row_ptr(kv.v, cr, p, row_bytes);
    r->kmul[p] = t.scores.scale;
    if constexpr (kD == KvDtype::kInt8) {
      r->kmul[p] = row_scale(kv.k_scale, cr, p) * t.scores.scale;
      r->vs[p] = row_scale(kv.v_scale, cr, p);
    }
  }
  if constexpr (kBf16) bf16_v_pairs(kRowsOf<kD>, r->vrow, la, lb, hd, v_pairs_of(*r, hd));
}

// The running softmax state of a decode tile, lanes = pairs (lanes past its heads: q = 0).
struct DecodeState {
  const float* qt;  // [hd][kDecodeLanes]: the pairs' q rows, transposed
  __m256 m, l;
};

// Scores, softmax and the state update of a decode chunk's pairs: weights to w
// ([kAttnChunk][kDecodeLanes]; INT8 V scales folded in after the sum, as softmax_all),
// rescales to c.
// bf16_dot: the scores come from bf16_decode_scores (kbuf holds bf16 rows, qt bf16 pairs).
template <bool kInt8, int32_t kHd, bool kBf16 = false>
void decode_softmax(const DecodeRows& r, int32_t hd_run, AttnScores scores, DecodeState& ds,
                    float* w, float* c) {
  // A compile-time head_dim puts the 16 rows at fixed offsets from one pointer: 16 row pointers
  // spilled from the general-purpose registers (the loop's other cost beside its FMAs).
  const int32_t hd = kHd > 0 ? kHd : hd_run;
  __m256 acc[kAttnChunk];
  if constexpr (kBf16) {
    alignas(32) float s[kAttnChunk][kDecodeLanes];
    bf16_decode_scores(reinterpret_cast<const uint32_t*>(ds.qt),
                       reinterpret_cast<const uint16_t*>(r.kbuf), hd, s);
    for (int p = 0; p < kAttnChunk; ++p) acc[p] = _mm256_load_ps(s[p]);
  } else {
    for (int p = 0; p < kAttnChunk; ++p) acc[p] = _mm256_setzero_ps();
    for (int32_t d = 0; d < hd; ++d) {
      const __m256 q = _mm256_loadu_ps(ds.qt + d * kDecodeLanes);
      for (int p = 0; p < kAttnChunk; ++p)
        acc[p] = _mm256_fmadd_ps(q, _mm256_set1_ps(r.kbuf[p * hd + d]), acc[p]);
    }
  }
  const int la = r.la, lb = r.lb;
  const __m256 cap = _mm256_set1_ps(scores.softcap);
  const __m256 inv_cap = _mm256_set1_ps(scores.softcap > 0.0f ? 1.0f / scores.softcap : 0.0f);
  __m256 mx[kAttnChunk];
  for (int p = 0; p < kAttnChunk; ++p) {
    if (p < la || p >= lb) {
      acc[p] = _mm256_set1_ps(-__builtin_inff());
    } else {
      acc[p] = _mm256_mul_ps(acc[p], _mm256_set1_ps(r.kmul[p]));
      if (scores.softcap > 0.0f) acc[p] = softcap256x(acc[p], cap, inv_cap);
    }
    mx[p] = acc[p];
  }
  for (int h = kAttnChunk / 2; h > 0; h /= 2) {
    for (int p = 0; p < h; ++p) mx[p] = _mm256_max_ps(mx[p], mx[p + h]);
  }
  const __m256 m = _mm256_max_ps(ds.m, mx[0]);
  const __m256 rescale = exp256x(_mm256_sub_ps(ds.m, m));
  __m256 sum = _mm256_setzero_ps();
  for (int p = 0; p < kAttnChunk; ++p) {
    const bool live = p >= la && p < lb;
    const __m256 wp = live ? exp256x(_mm256_sub_ps(acc[p], m)) : _mm256_setzero_ps();
    sum = p == 0 ? wp : _mm256_add_ps(sum, wp);
    _mm256_store_ps(w + p * kDecodeLanes,
                    kInt8 && live ? _mm256_mul_ps(wp, _mm256_set1_ps(r.vs[p])) : wp);
  }
  ds.m = m;
  ds.l = _mm256_add_ps(_mm256_mul_ps(ds.l, rescale), sum);
  _mm256_storeu_ps(c, rescale);
}

// accumulate_runs<1> of a decode chunk's position-major weights.
void accumulate_decode(VRows rows, const ChunkPair* pairs, int np, const float* w, const float* c,
                       const void* const* vrow, int32_t hd) {
  for (int k = 0; k < np;) {
    const int run = np - k >= kAccBatch ? kAccBatch : std::min(np - k, 4);
    float* out[kAccBatch];
    for (int n = 0; n < run; ++n) out[n] = pairs[k + n].out;
    const AccChunk ch = {c + k, w + k, vrow};
    const int a = pairs[k].qa, b = pairs[k].qb;
    switch (run) {
      case 8:
        accumulate_any<8, 1, true>(rows, out, &ch, a, b, hd);
        break;
      case 4:
        accumulate_any<4, 1, true>(rows, out, &ch, a, b, hd);
        break;
      case 3:
        accumulate_any<3, 1, true>(rows, out, &ch, a, b, hd);
        break;
      case 2:
        accumulate_any<2, 1, true>(rows, out, &ch, a, b, hd);
        break;
      default:
        accumulate_any<1, 1, true>(rows, out, &ch, a, b, hd);
        break;
    }
    k += run;
  }
}

// attend_tile's one-chunk steps for a decode tile of heads [h0, h0 + ng) (see above), the state
// to st[0] as attend_tile's. Each chunk's K rows are decoded one chunk ahead, into the other of
// two buffers: the scores' 4-byte broadcasts read rows stored a chunk earlier, not 64-byte
// stores still draining, and the row loads have a chunk's work to arrive behind.
template <KvDtype kD, bool kBf16>
void attend_decode(const TileWork& t, const AttnQuery* query, int32_t h0, int ng,
                   SoftmaxState (*st)[kMaxGroup]) {
  const KvLayerView& kv = *t.kv;
  const int32_t hd = kv.head_dim;
  const int64_t lo = query->pos_begin, hi = query->pos_end;
  const int64_t first = lo / kAttnChunk * kAttnChunk;
  // attend_tile's step scratch for K (qt, one buffer) and V (the other), which decode reads
  // in place.
  float* qt = t.kt;
  if constexpr (kBf16) {
    bf16_decode_q(query->q + (int64_t)h0 * hd, ng, hd, reinterpret_cast<uint32_t*>(qt));
  } else {
    for (int32_t d = 0; d < hd; ++d) {
      for (int n = 0; n < kDecodeLanes; ++n)
        qt[d * kDecodeLanes + n] = n < ng ? query->q[(int64_t)(h0 + n) * hd + d] : 0.0f;
    }
  }
  DecodeState ds = {qt, _mm256_set1_ps(-__builtin_inff()), _mm256_setzero_ps()};
  DecodeRows rows[2];
  rows[0].kbuf = qt + hd * kDecodeLanes;
  rows[1].kbuf = t.vbuf;
  ChunkPair pairs[kDecodeLanes];
  alignas(32) float w[kAttnChunk][kDecodeLanes];
  float c[kDecodeLanes];
  const int64_t ahead = kPrefetchChunks * kAttnChunk;
  auto prefetch = [&](int64_t pc) {
    if (pc < hi) {
      prefetch_rows(kv, t.block_table, pc, 0, (int)(std::min(hi, pc + kAttnChunk) - pc), t.kv_head);
    }
  };
  auto load = [&](int64_t c0, DecodeRows* r) {
    decode_rows<kD, kBf16>(t, c0, (int)(std::max(lo, c0) - c0),
                           (int)(std::min(hi, c0 + kAttnChunk) - c0), r);
  };
  for (int64_t pc = first + kAttnChunk; pc < first + ahead; pc += kAttnChunk) prefetch(pc);
  load(first, &rows[0]);
  int b = 0;
  for (int64_t c0 = first; c0 < hi; c0 += kAttnChunk, b ^= 1) {
    prefetch(c0 + ahead);
    if (c0 + kAttnChunk < hi) load(c0 + kAttnChunk, &rows[b ^ 1]);
    const int np = x86::chunk_pairs(query, 1, h0, ng, hd, c0, st, pairs);
    constexpr bool kInt8 = kD == KvDtype::kInt8;
    if constexpr (kBf16) {
      decode_softmax<kInt8, 0, true>(rows[b], hd, t.scores, ds, &w[0][0], c);
    } else if (hd == 64) {
      decode_softmax<kInt8, 64>(rows[b], hd, t.scores, ds, &w[0][0], c);
    } else if (hd == 128) {
      decode_softmax<kInt8, 128>(rows[b], hd, t.scores, ds, &w[0][0], c);
    } else {
      decode_softmax<kInt8, 0>(rows[b], hd, t.scores, ds, &w[0][0], c);
    }
    if constexpr (kBf16) {
      bf16_pv_decode(pairs, np, &w[0][0], c, v_pairs_of(rows[b], hd), hd);
    } else {
      accumulate_decode(t.v_rows, pairs, np, &w[0][0], c, rows[b].vrow, hd);
    }
  }
  alignas(32) float m[kDecodeLanes], l[kDecodeLanes];
  _mm256_store_ps(m, ds.m);
  _mm256_store_ps(l, ds.l);
  for (int n = 0; n < ng; ++n) st[0][n] = {m[n], l[n]};
}

}  // namespace

namespace {

// The dtypes this file decodes; bf16 K/V only with bf16 q.k products (false: the caller's
// generic path).
template <bool kBf16Dot>
bool attend_decode_dtype(const TileWork& t, const AttnQuery* query, int32_t h0, int ng,
                         SoftmaxState (*st)[kMaxGroup]) {
  switch (t.kv->dtype) {
    case KvDtype::kF16:
      attend_decode<KvDtype::kF16, kBf16Dot>(t, query, h0, ng, st);
      return true;
    case KvDtype::kBF16:
      if constexpr (!kBf16Dot) return false;
      attend_decode<KvDtype::kBF16, true>(t, query, h0, ng, st);
      return true;
    case KvDtype::kInt8:
      attend_decode<KvDtype::kInt8, kBf16Dot>(t, query, h0, ng, st);
      return true;
    case KvDtype::kF32:
      attend_decode<KvDtype::kF32, kBf16Dot>(t, query, h0, ng, st);
      return true;
    default:
      return false;
  }
}

}  // namespace

bool attend_decode_tile(const TileWork& t, const AttnQuery* query, int32_t h0, int ng,
                        SoftmaxState (*st)[kMaxGroup]) {
  return t.scores.bf16_dot ? attend_decode_dtype<true>(t, query, h0, ng, st)
                           : attend_decode_dtype<false>(t, query, h0, ng, st);
}

}  // namespace kvw::kernels::avx512
