// kernels/x86/avx2_ops.cc: AVX2 rmsnorm, silu_mul, gelu_tanh_mul, softcap, paged attention and KV
// store, and the "avx2" KernelTable. Compiled with -mavx2 -mfma -mf16c; used only after dispatch.cc
// checked CPUID. Attention is flash attention over chunks of kAttnChunk positions: each K/V row is
// read (and decoded) once per tile of queries and query heads of its KV head; each (query, head)
// keeps its own online-softmax state and sees the same chunks with the same masks whatever tile it
// is in, so its result is the same bits as alone.
#include <cstring>

#include "kernels/kernels_internal.h"
#include "kernels/x86/attention_util.h"
#include "kernels/x86/avx2_kernels.h"
#include "kernels/x86/avx2_util.h"

namespace kvw::kernels::avx2 {
namespace {

using x86::ChunkPair;
using x86::kv_offset;
using x86::kv_row;
using x86::SoftmaxState;

using x86::kMaxGroup;
using x86::kMaxTile;

KVW_INLINE void scale_row(float* y, float c, int32_t n) {
  const __m256 vc = _mm256_set1_ps(c);
  int32_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), vc));
  for (; i < n; ++i) y[i] *= c;
}

void f32_to_f16_row(const float* src, uint16_t* dst, int32_t n) {
  int32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
}

// Scores of N (query, head) pairs against one chunk: s[2n], s[2n + 1] = positions 0-7, 8-15 of
// pair n, each lane fma(q[d], k[d], acc) over d in order. N pairs at once give 2N independent
// FMA chains that share every K load (one pair alone is FMA-latency bound).
template <int N>
KVW_INLINE void score_pairs(const float* const* q, const float* kt, int32_t hd, __m256* s) {
  __m256 a0[N], a1[N];
  for (int n = 0; n < N; ++n) a0[n] = a1[n] = _mm256_setzero_ps();
  for (int32_t d = 0; d < hd; ++d) {
    const __m256 k0 = _mm256_loadu_ps(kt + d * kAttnChunk);
    const __m256 k1 = _mm256_loadu_ps(kt + d * kAttnChunk + 8);
    for (int n = 0; n < N; ++n) {
      const __m256 qd = _mm256_broadcast_ss(q[n] + d);
      a0[n] = _mm256_fmadd_ps(qd, k0, a0[n]);
      a1[n] = _mm256_fmadd_ps(qd, k1, a1[n]);
    }
  }
  for (int n = 0; n < N; ++n) {
    s[2 * n] = a0[n];
    s[2 * n + 1] = a1[n];
  }
}

// For N pairs that attend the same lanes [a, b): out[n] = out[n] * c[n] + sum over p in [a, b)
// of pv[n][p] * v[p], each element fma'd over p in order (16 then 8 floats at a time, then a
// scalar tail), so the bits do not depend on N. The pairs share every V load.
template <int N>
KVW_INLINE void accumulate_pairs(float* const* out, const float* c, const float* const* pv,
                                 const float* const* v, int a, int b, int32_t hd) {
  int32_t j = 0;
  for (; j + 16 <= hd; j += 16) {
    __m256 acc[N][2];
    for (int n = 0; n < N; ++n) {
      const __m256 vc = _mm256_set1_ps(c[n]);
      acc[n][0] = _mm256_mul_ps(_mm256_loadu_ps(out[n] + j), vc);
      acc[n][1] = _mm256_mul_ps(_mm256_loadu_ps(out[n] + j + 8), vc);
    }
    for (int p = a; p < b; ++p) {
      const __m256 v0 = _mm256_loadu_ps(v[p] + j), v1 = _mm256_loadu_ps(v[p] + j + 8);
      for (int n = 0; n < N; ++n) {
        const __m256 w = _mm256_broadcast_ss(pv[n] + p);
        acc[n][0] = _mm256_fmadd_ps(w, v0, acc[n][0]);
        acc[n][1] = _mm256_fmadd_ps(w, v1, acc[n][1]);
      }
    }
    for (int n = 0; n < N; ++n) {
      _mm256_storeu_ps(out[n] + j, acc[n][0]);
      _mm256_storeu_ps(out[n] + j + 8, acc[n][1]);
    }
  }
  for (; j + 8 <= hd; j += 8) {
    for (int n = 0; n < N; ++n) {
      __m256 acc = _mm256_mul_ps(_mm256_loadu_ps(out[n] + j), _mm256_set1_ps(c[n]));
      for (int p = a; p < b; ++p)
        acc = _mm256_fmadd_ps(_mm256_broadcast_ss(pv[n] + p), _mm256_loadu_ps(v[p] + j), acc);
      _mm256_storeu_ps(out[n] + j, acc);
    }
  }
  for (; j < hd; ++j) {
    for (int n = 0; n < N; ++n) {
      float acc = out[n][j] * c[n];
      for (int p = a; p < b; ++p) acc = __builtin_fmaf(pv[n][p], v[p][j], acc);
      out[n][j] = acc;
    }
  }
}

// Queries [0, nq) x query heads [h0, h0 + ng) of KV head kv_head. Per chunk: K rows transposed
// into kt [head_dim][kAttnChunk] so one FMA scores 8 positions, V rows decoded once; then the
// (query, head) pairs that attend the chunk are scored four at a time, each pair's scores
// (positions outside its query's range masked to -inf) rescale its running state, and runs of up
// to four pairs with the same range accumulate their weighted V rows together. Every pair's
// arithmetic is the same whatever pairs it is grouped with.
// Unnormalised: each pair's state goes to ml[query][head][2] (heads of n_heads) instead.
void attend_tile(const AttnQuery* queries, int nq, int32_t h0, int ng, int32_t kv_head,
                 const KvLayerView& kv, const uint32_t* block_table, AttnScores scores, float* ml,
                 int32_t n_heads, float* scratch) {
  const int32_t hd = kv.head_dim;
  float* kt = scratch;                  // [hd][kAttnChunk]
  float* vbuf = kt + hd * kAttnChunk;   // [kAttnChunk][hd]
  float* row = vbuf + hd * kAttnChunk;  // [hd]
  const float* vrow[kAttnChunk];
  SoftmaxState st[kMaxTile][kMaxGroup];
  ChunkPair pairs[kMaxTile * kMaxGroup];
  alignas(32) float pv[kMaxTile * kMaxGroup][kAttnChunk];  // scores, then weights, per pair
  float cs[kMaxTile * kMaxGroup];                          // each pair's rescale of its state
  int64_t lo = queries[0].pos_begin, hi = queries[0].pos_end;
  for (int i = 0; i < nq; ++i) {
    lo = queries[i].pos_begin < lo ? queries[i].pos_begin : lo;
    hi = queries[i].pos_end > hi ? queries[i].pos_end : hi;
    for (int g = 0; g < ng; ++g) {
      st[i][g] = {-__builtin_inff(), 0.0f};
      std::memset(queries[i].out + (int64_t)(h0 + g) * hd, 0, hd * sizeof(float));
    }
  }
  const __m256i lane_lo = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i lane_hi = _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15);
  const __m256 neg_inf = _mm256_set1_ps(-__builtin_inff());
  const __m256 vscale = _mm256_set1_ps(scores.scale);
  const bool capped = scores.softcap > 0.0f;
  const __m256 cap = _mm256_set1_ps(scores.softcap);
  const __m256 inv_cap = _mm256_set1_ps(capped ? 1.0f / scores.softcap : 0.0f);
  for (int64_t c0 = lo / kAttnChunk * kAttnChunk; c0 < hi; c0 += kAttnChunk) {
    // Load the chunk's positions that some query attends; other lanes score zero (masked).
    const int la = (int)((lo > c0 ? lo : c0) - c0);
    const int lb = (int)((hi < c0 + kAttnChunk ? hi : c0 + kAttnChunk) - c0);
    std::memset(kt, 0, sizeof(float) * hd * kAttnChunk);
    for (int p = la; p < lb; ++p) {
      const float* k = kv_row(kv, false, block_table, c0 + p, kv_head, row);
      for (int32_t d = 0; d < hd; ++d) kt[d * kAttnChunk + p] = k[d];
      vrow[p] = kv_row(kv, true, block_table, c0 + p, kv_head, vbuf + p * hd);
    }
    const int np = x86::chunk_pairs(queries, nq, h0, ng, hd, c0, st, pairs);
    int k = 0;
    for (; k + 4 <= np; k += 4) {
      const float* q[4] = {pairs[k].q, pairs[k + 1].q, pairs[k + 2].q, pairs[k + 3].q};
      __m256 s[8];
      score_pairs<4>(q, kt, hd, s);
      for (int n = 0; n < 8; ++n) _mm256_store_ps(pv[k] + 8 * n, s[n]);
    }
    for (; k < np; ++k) {
      __m256 s[2];
      score_pairs<1>(&pairs[k].q, kt, hd, s);
      _mm256_store_ps(pv[k], s[0]);
      _mm256_store_ps(pv[k] + 8, s[1]);
    }
    for (k = 0; k < np; ++k) {
      const __m256i va = _mm256_set1_epi32(pairs[k].qa - 1), vb = _mm256_set1_epi32(pairs[k].qb);
      const __m256 valid0 = _mm256_castsi256_ps(
          _mm256_and_si256(_mm256_cmpgt_epi32(lane_lo, va), _mm256_cmpgt_epi32(vb, lane_lo)));
      const __m256 valid1 = _mm256_castsi256_ps(
          _mm256_and_si256(_mm256_cmpgt_epi32(lane_hi, va), _mm256_cmpgt_epi32(vb, lane_hi)));
      __m256 x0 = _mm256_mul_ps(_mm256_load_ps(pv[k]), vscale);
      __m256 x1 = _mm256_mul_ps(_mm256_load_ps(pv[k] + 8), vscale);
      if (capped) {
        x0 = x86::softcap256(x0, cap, inv_cap);
        x1 = x86::softcap256(x1, cap, inv_cap);
      }
      const __m256 s0 = _mm256_blendv_ps(neg_inf, x0, valid0);
      const __m256 s1 = _mm256_blendv_ps(neg_inf, x1, valid1);
      SoftmaxState& s = *pairs[k].st;
      const float chunk_max = x86::hmax(_mm256_max_ps(s0, s1));
      const float m = chunk_max > s.m ? chunk_max : s.m;
      cs[k] = __builtin_expf(s.m - m);  // 0 on the first chunk (s.m = -inf)
      const __m256 vm = _mm256_set1_ps(m);
      const __m256 p0 = _mm256_and_ps(x86::exp256(_mm256_sub_ps(s0, vm)), valid0);
      const __m256 p1 = _mm256_and_ps(x86::exp256(_mm256_sub_ps(s1, vm)), valid1);
      s.l = s.l * cs[k] + x86::hsum(_mm256_add_ps(p0, p1));
      s.m = m;
      _mm256_store_ps(pv[k], p0);
      _mm256_store_ps(pv[k] + 8, p1);
    }
    for (k = 0; k < np;) {
      const int run = x86::same_range_run(pairs, k, np, 4);
      float* out[4];
      const float* w[4];
      for (int n = 0; n < run; ++n) {
        out[n] = pairs[k + n].out;
        w[n] = pv[k + n];
      }
      const int a = pairs[k].qa, b = pairs[k].qb;
      switch (run) {
        case 4:
          accumulate_pairs<4>(out, cs + k, w, vrow, a, b, hd);
          break;
        case 3:
          accumulate_pairs<3>(out, cs + k, w, vrow, a, b, hd);
          break;
        case 2:
          accumulate_pairs<2>(out, cs + k, w, vrow, a, b, hd);
          break;
        default:
          accumulate_pairs<1>(out, cs + k, w, vrow, a, b, hd);
          break;
      }
      k += run;
    }
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

void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* out) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int j = 0; j < 4; ++j) {
      const __m256 v = _mm256_loadu_ps(x + i + 8 * j);
      acc[j] = _mm256_fmadd_ps(v, v, acc[j]);
    }
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    acc[0] = _mm256_fmadd_ps(v, v, acc[0]);
  }
  float sum =
      x86::hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  for (; i < n; ++i) sum += x[i] * x[i];
  const float scale = 1.0f / _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(sum / (float)n + eps)));
  const __m256 vs = _mm256_set1_ps(scale);
  for (i = 0; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vs);
    _mm256_storeu_ps(out + i, _mm256_mul_ps(v, _mm256_loadu_ps(w + i)));
  }
  for (; i < n; ++i) out[i] = x[i] * scale * w[i];
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = x86::exp256(_mm256_xor_ps(g, sign));
    const __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, e));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) out[i] = gate[i] / (1.0f + __builtin_expf(-gate[i])) * up[i];
}

namespace {

// out[i] = f(a[i], b[i]) for n floats, 8 at a time; the last partial group runs through f on a
// zero-padded copy, so an element's bits never depend on where a range or a thread's share ends.
template <class F>
void each8(const float* a, const float* b, int64_t n, float* out, F f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, f(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  if (i == n) return;
  alignas(32) float ta[8] = {}, tb[8] = {}, to[8];
  std::memcpy(ta, a + i, (size_t)(n - i) * sizeof(float));
  std::memcpy(tb, b + i, (size_t)(n - i) * sizeof(float));
  _mm256_store_ps(to, f(_mm256_load_ps(ta), _mm256_load_ps(tb)));
  std::memcpy(out + i, to, (size_t)(n - i) * sizeof(float));
}

}  // namespace

void gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out) {
  const __m256 k = _mm256_set1_ps(0.7978845608028654f), c = _mm256_set1_ps(0.044715f);
  const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
  each8(gate, up, n, out, [&](__m256 x, __m256 u) {
    const __m256 inner =
        _mm256_mul_ps(_mm256_mul_ps(k, x), _mm256_fmadd_ps(_mm256_mul_ps(c, x), x, one));
    const __m256 g = _mm256_mul_ps(_mm256_mul_ps(half, x), _mm256_add_ps(one, x86::tanh256(inner)));
    return _mm256_mul_ps(g, u);
  });
}

void softcap(float* x, int64_t n, float cap) {
  const __m256 vcap = _mm256_set1_ps(cap), inv = _mm256_set1_ps(1.0f / cap);
  each8(x, x, n, x, [&](__m256 v, __m256) { return x86::softcap256(v, vcap, inv); });
}

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

void kv_store(const KvLayerView& kv, std::span<const uint32_t> block_table, int64_t pos,
              const float* k, const float* v) {
  const int32_t hd = kv.head_dim;
  for (int32_t h = 0; h < kv.n_kv_heads; ++h) {
    if (kv.dtype == KvDtype::kF16) {
      const int64_t off = kv_offset(kv, block_table.data(), pos, h, 2);
      f32_to_f16_row(k + (int64_t)h * hd,
                     reinterpret_cast<uint16_t*>(static_cast<uint8_t*>(kv.k) + off), hd);
      f32_to_f16_row(v + (int64_t)h * hd,
                     reinterpret_cast<uint16_t*>(static_cast<uint8_t*>(kv.v) + off), hd);
    } else {
      kv_store_row(kv, false, block_table, pos, h, k + (int64_t)h * hd);
      kv_store_row(kv, true, block_table, pos, h, v + (int64_t)h * hd);
    }
  }
}

}  // namespace kvw::kernels::avx2

namespace kvw::kernels {

const KernelTable& avx2_table() {
  static const KernelTable table = {
      .isa = "avx2",
      .quantize_act = avx2::quantize_act,
      .matmul = avx2::matmul,
      .packs = packs,
      .pack = pack,
      .matmul_packed = avx2::matmul_packed,
      .rmsnorm = avx2::rmsnorm,
      .silu_mul = avx2::silu_mul,
      .gelu_tanh_mul = avx2::gelu_tanh_mul,
      .softcap = avx2::softcap,
      .attention = attention_of<avx2::attention_segment>,
      .attention_segment = avx2::attention_segment,
      .kv_store = avx2::kv_store,
  };
  return table;
}

}  // namespace kvw::kernels
